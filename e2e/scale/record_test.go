package scale_test

import (
	"debug/buildinfo"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/openmed/openmed-operator/e2e/scale/figures"
)

// jsonEnv names the file the benchmark writes its figures to
// (figures.File): `make bench-scale` sets it (BENCH_JSON,
// docs/scale/results.json by default); unset, nothing is written. The file
// is written only when every assertion held.
const jsonEnv = "OPENMED_SCALE_JSON"

// settingsEnv are the variables a File records as they were set.
var settingsEnv = []string{"OPENMED_SCALE_N", "OPENMED_SCALE_PODS", "OPENMED_SCALE_BAKE", "OPENMED_SCALE_VERIFY", "OPENMED_SCALE_UNOWNED",
	"OPENMED_SCALE_SHARDS", "OPENMED_SCALE_STEADY", "OPENMED_LOCKDOWN"}

// writeFigures writes the runs to $OPENMED_SCALE_JSON, if it is set and
// the test has not failed.
func writeFigures(t *testing.T, runs []figures.Run, started time.Time) {
	t.Helper()
	path := os.Getenv(jsonEnv)
	if path == "" {
		return
	}
	if t.Failed() {
		t.Logf("%s not written: the benchmark failed", path)
		return
	}
	f := &figures.File{
		Date:          time.Now().UTC().Format(time.RFC3339),
		Go:            runtime.Version(),
		KubeAPIServer: moduleVersion(t, "kube-apiserver", "k8s.io/kubernetes"),
		Etcd:          moduleVersion(t, "etcd", "go.etcd.io/etcd/server/v3"),
		CPUs:          runtime.NumCPU(),
		Settings:      map[string]string{},
		Seconds:       round(time.Since(started).Seconds(), 1),
		Runs:          runs,
	}
	for _, name := range settingsEnv {
		if v, ok := os.LookupEnv(name); ok {
			f.Settings[name] = v
		}
	}
	if err := f.Write(path); err != nil {
		t.Fatal(err)
	}
	t.Logf("figures written to %s", path)
}

// moduleVersion is the version of module mod in the build information of
// the control-plane binary name under $KUBEBUILDER_ASSETS.
func moduleVersion(t *testing.T, name, mod string) string {
	t.Helper()
	info, err := buildinfo.ReadFile(filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), name))
	if err != nil {
		t.Fatalf("the version of %s: %v", name, err)
	}
	for _, d := range info.Deps {
		if d.Path == mod {
			if d.Replace != nil {
				return d.Replace.Version
			}
			return d.Version
		}
	}
	if info.Main.Path == mod {
		return info.Main.Version
	}
	t.Fatalf("%s was not built from %s", name, mod)
	return ""
}

// record is what the figures file holds of r.
func (r result) record() figures.Run {
	mib := func(b int64) float64 { return round(float64(b)/(1<<20), 1) }
	ms := func(d time.Duration) float64 { return round(float64(d)/float64(time.Millisecond), 1) }
	mem := func(m memory) figures.Memory {
		return figures.Memory{RSS: mib(m.rss), File: mib(m.file), Anon: mib(m.anon)}
	}
	out := figures.Run{
		N: r.cfg.n, Pods: r.cfg.pods, Unowned: r.cfg.unowned, Shards: r.cfg.shards,
		FirstRollout:        figures.Phase{ByKind: r.rollout.byKind, Conflicts: r.rollout.conflicts},
		Upgrade:             figures.Phase{ByKind: r.upgrade.byKind, Conflicts: r.upgrade.conflicts},
		SteadySeconds:       steadyWindow.Seconds(),
		PassesPerModel:      figures.Pair{Rollout: round(r.passesRollout, 2), Upgrade: round(r.passesUpgrade, 2)},
		CPUMsPerModel:       figures.Pair{Rollout: round(r.cpuRollout*1000, 2), Upgrade: round(r.cpuUpgrade*1000, 2)},
		APIServerCores:      round(r.apiServerCPU, 2),
		CreateReadySeconds:  round(r.createReady.Seconds(), 1),
		UpgradeReadySeconds: round(r.upgradeRdy.Seconds(), 1),
		ReactionMs: figures.Spread{Median: ms(percentile(r.reaction, 50)), P95: ms(percentile(r.reaction, 95)),
			Count: len(r.reaction)},
		WaveReactionMs: figures.Spread{Median: ms(percentile(r.waveReaction, 50)), P95: ms(percentile(r.waveReaction, 95)),
			Count: len(r.waveReaction)},
		PeakRSSMiB: mib(r.peakRSS), PeakAnonMiB: mib(r.peakAnon), SyncedRSSMiB: mib(r.syncedRSS),
		Fixed: mem(r.synced), Floor: mem(r.floor),
		CrossShardCalls: len(r.crossShard),
		Failover:        figures.Failover{Seconds: round(r.failoverTime.Seconds(), 2), Calls: r.failover.total(), PeakRSSMiB: mib(r.failoverRSS)},
		Baked:           r.baked, BakedBeforePods: r.noPods,
		MetricsBytes: r.metricsBytes, SamplesPerModel: round(r.samplesPerModel, 2), EventsDropped: r.eventsDropped,
	}
	if r.cfg.bake {
		out.BakeSeconds = scaleBake
	}
	if r.cfg.verify {
		v := r.verification
		out.Verification = &figures.Verification{
			PodsVerified:     figures.Counts{Rollout: v.verified[0], Upgrade: v.verified[1]},
			GoldenRequests:   figures.Counts{Rollout: v.golden[0], Upgrade: v.golden[1]},
			AskedAgain:       figures.Counts{Rollout: v.askedAgain[0], Upgrade: v.askedAgain[1]},
			WaitStatuses:     figures.Counts{Rollout: waitStatuses(v.statuses[0]), Upgrade: waitStatuses(v.statuses[1])},
			VerifiedSeconds:  figures.Pair{Rollout: round(v.allVerified[0].Seconds(), 2), Upgrade: round(v.allVerified[1].Seconds(), 2)},
			FailoverRequests: v.failover,
		}
		for _, c := range v.steady {
			out.Verification.SteadyRequests += c
		}
	}
	for i, w := range r.steady {
		out.Steady = append(out.Steady, figures.Window{Calls: w.total() + conflicts(w), ListWatch: r.steadyInformer[i].total()})
	}
	for i := range r.shardRSS {
		out.PerShard = append(out.PerShard, figures.Shard{PeakRSSMiB: mib(r.shardRSS[i]), PeakAnonMiB: mib(r.shardAnon[i]), Calls: r.shardCalls[i]})
	}
	return out
}

// conflicts is the writes of p the API server answered 409.
func conflicts(p phaseCalls) int {
	n := 0
	for _, c := range p.conflicts {
		n += c
	}
	return n
}

func round(v float64, digits int) float64 {
	p := 1.0
	for range digits {
		p *= 10
	}
	if v < 0 {
		return -float64(int64(-v*p+0.5)) / p
	}
	return float64(int64(v*p+0.5)) / p
}
