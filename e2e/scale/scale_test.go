// Package scale_test is the scale benchmark: the operator process against a
// real kube-apiserver and etcd, N Deployments and N OpenMedModels, and a
// stand-in for the Deployment controller that reports every new
// generation rolled out at once. Every request of the operator is counted
// by the API server itself (its audit log, filtered by the operator's own
// user). It asserts the request counts, which are deterministic, and only
// prints the times, CPU and memory it measures. Every Deployment has two
// pods (the stand-in creates them, Ready); each N runs twice: without the
// bake guard (the pods are not read) and with it (bakeSeconds set, so
// the operator's pod store holds them), to measure what the guard costs.
//
//	OPENMED_SCALE_N=100,1000 go test ./e2e/scale -run TestScale -v -timeout 60m
//
// (`make bench-scale`). `make test` runs it with N=30.
//
// OPENMED_SCALE_PODS=off runs without pods (and without the bake guard,
// which needs them). OPENMED_SCALE_UNOWNED=k runs each N again with k×N
// Deployments no model targets beside the N, and compares. OPENMED_SCALE_SHARDS=s
// runs each N again on s operator processes (Flux's sharding: one process
// per value of sharding.fluxcd.io/key, the first for the models without it)
// and compares each one's memory with the single process's. Every run ends
// with a failover: the processes are stopped and new ones started, timed
// until every model was reconciled, which must write nothing.
// OPENMED_SCALE_VERIFY=on runs each N once more with models that declare a
// golden request (spec.verification): the stand-in then plays the
// kubelet's readiness too (each pod gets a loopback IP of a range reserved
// as pkg/minicluster reserves its clusters', its containers turn ready once
// its readiness probe answers, the pod Ready once the operator's readiness
// gate passes), pkg/localrun/modelserver serves each pod on its IP, and the
// run asserts the calls of verified rollouts by kind (the status writes of
// the wait for the verdicts and the pods asked again counted from what a
// watch of the models and the pods' servers saw), every new pod verified,
// and no call and no request to a pod in the steady windows and the
// failover; OPENMED_SCALE_VERIFY=only runs that alone.
// OPENMED_SCALE_JSON=FILE writes every run's figures to FILE
// (e2e/scale/figures), from which the docs' tables are generated.
package scale_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/openmed/openmed-operator/e2e/internal/harness"
	"github.com/openmed/openmed-operator/e2e/scale/figures"
	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/localrun"
	"github.com/openmed/openmed-operator/pkg/localrun/modelserver"
	"github.com/openmed/openmed-operator/pkg/minicluster"
	"github.com/openmed/openmed-operator/pkg/rollout"
	"github.com/openmed/openmed-operator/pkg/testenv"
)

const (
	namespace    = "scale"
	operatorUser = "openmed-operator"
	v1           = "OpenMed/OpenMed-PII-SuperClinical-Small-44M-v1"
	v2           = "OpenMed/OpenMed-PII-SuperClinical-Small-44M-v2"
	// scaleBake is the bakeSeconds of the guarded run.
	scaleBake = 1

	steadyWindows = 3
	workers       = 8
	// podsPerModel is the replicas of every model and Deployment.
	podsPerModel = 2
)

// The calls of each phase per model, by kind, asserted exactly; a write the
// API server answered 409 Conflict (a conditional write that met a newer
// version, written again by the next pass) is counted and printed apart,
// and with the bake guard the pass after a 409'd status write may read the
// version's pods once more (check). A first
// rollout reads its target from the API server (the operator caches only
// the Deployments it claimed), creates the manifest ConfigMap, adds the
// finalizer, records its target in status.claimedTargets before it writes
// to it, applies the pointer (which claims the Deployment), writes
// RollingOut and Ready, and records RolloutStarted and RolloutSucceeded; an
// upgrade is the same without the read, the finalizer and the record. A
// bake adds the Baking status write and its event, and the read of the
// version's pods by the pass that ends it.
var (
	firstRolloutCalls = map[string]int{"get deployments": 1, "create configmaps": 1, "patch openmedmodels": 1, "patch openmedmodels/status": 3,
		"patch deployments": 1, "create events": 2}
	upgradeCalls = map[string]int{"create configmaps": 1, "patch openmedmodels/status": 2, "patch deployments": 1,
		"create events": 2}
	bakeCalls = map[string]int{"patch openmedmodels/status": 1, "create events": 1, "list pods": 1}
	// verifyCalls are what a phase adds when the model declares a golden
	// request: each new pod's verdict, written by server-side apply on
	// pods/status once the pod answered. The status writes of the wait
	// for the verdicts (the Deployment controller's counts, Verifying
	// naming the pod waited for, RolloutInProgress once its verdict is
	// in) depend on whether a pass finds the two pods waiting together or
	// one after the other, and are counted from what the model watch saw
	// (waitStatuses). A pod is asked once per phase (checkVerification).
	verifyCalls = map[string]int{"patch pods/status": 2}
)

// raceAllowance bounds, per phase of n models, the two outcomes of a race
// the run cannot order and so counts apart: writes answered 409 Conflict
// (a pass decided on a model version its cache had not caught up with; the
// write is made again by the next pass) and models seen Baking before their
// pods (the Deployment's watch delivered its rollout before the pod watch
// delivered the Ready pods: one status write more). Measured on a noisy
// 2-core machine: at most 1 of 1,000 and 1 of 10,000 409s per phase, and at
// most 6 of 1,000 models Baking before their pods. The bound is 2% of the
// models, at least 2: a small run may meet the race twice, while a
// regression that writes through conflicts or stops waking on pods meets it
// for (nearly) every model, 50 times the bound. With the golden request it
// bounds a third: ReplicaSets read by a pass that saw a new pod before the
// ReplicaSet store saw its ReplicaSet.
func raceAllowance(n int) int { return max(2, n/50) }

// steadyWindow is how long each steady-state window lasts:
// OPENMED_SCALE_STEADY, default 15s (`make test` uses shorter ones).
var steadyWindow = func() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("OPENMED_SCALE_STEADY")); err == nil && d > 0 {
		return d
	}
	return 15 * time.Second
}()

// variant is one run's models: with the bake guard, or declaring a golden
// request (without the bake guard: once its pods are verified, nothing is
// asked).
type variant struct{ bake, verify bool }

// variants are the runs for each N: OPENMED_SCALE_BAKE=both (the default:
// without the bake guard, then with it), off or on; then, with
// OPENMED_SCALE_VERIFY=on, the run with the golden request (only: that one
// alone).
func variants(t *testing.T) []variant {
	if !withPods(t) {
		if v := os.Getenv("OPENMED_SCALE_VERIFY"); v != "" && v != "off" {
			t.Fatalf("OPENMED_SCALE_VERIFY=%s needs pods (OPENMED_SCALE_PODS=on)", v)
		}
		return []variant{{}}
	}
	var out []variant
	switch v := os.Getenv("OPENMED_SCALE_BAKE"); v {
	case "", "both":
		out = []variant{{}, {bake: true}}
	case "off":
		out = []variant{{}}
	case "on":
		out = []variant{{bake: true}}
	default:
		t.Fatalf("OPENMED_SCALE_BAKE=%q: want both, off or on", v)
	}
	switch v := os.Getenv("OPENMED_SCALE_VERIFY"); v {
	case "", "off":
		return out
	case "on":
		return append(out, variant{verify: true})
	case "only":
		return []variant{{verify: true}}
	default:
		t.Fatalf("OPENMED_SCALE_VERIFY=%q: want off, on or only", v)
		return nil
	}
}

// withPods is OPENMED_SCALE_PODS: on (the default) or off.
func withPods(t *testing.T) bool {
	switch v := os.Getenv("OPENMED_SCALE_PODS"); v {
	case "", "on":
		return true
	case "off":
		return false
	default:
		t.Fatalf("OPENMED_SCALE_PODS=%q: want on or off", v)
		return false
	}
}

// envInt is a non-negative integer environment variable, def when unset.
func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		t.Fatalf("%s=%q: want a non-negative number", name, v)
	}
	return n
}

// config is one run's shape.
type config struct {
	n    int
	bake bool
	pods bool
	// verify is whether the models declare a golden request.
	verify bool
	// unowned is how many Deployments no model targets sit beside the n.
	unowned int
	// shards is how many operator processes split the models.
	shards int
}

func (c config) String() string {
	s := fmt.Sprintf("N=%d bake=%t", c.n, c.bake)
	if c.verify {
		s += " verify=on"
	}
	if !c.pods {
		s += " pods=off"
	}
	if c.unowned > 0 {
		s += fmt.Sprintf(" unowned=%d", c.unowned)
	}
	if c.shards > 1 {
		s += fmt.Sprintf(" shards=%d", c.shards)
	}
	return s
}

func sizes(t *testing.T) []int {
	spec := os.Getenv("OPENMED_SCALE_N")
	if spec == "" {
		spec = "30"
	}
	var out []int
	for _, f := range strings.Split(spec, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			t.Fatalf("OPENMED_SCALE_N=%q: %q is not a positive number", spec, f)
		}
		out = append(out, n)
	}
	return out
}

// TestScale runs the benchmark for each N and prints one table per run,
// then the comparisons: N against N, the bake guard, unowned Deployments,
// shards.
func TestScale(t *testing.T) {
	ctrllog.SetLogger(logr.Discard())
	started := time.Now()
	bin, err := localrun.BuildOperator(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	floorBinary = buildFloor(t)
	pods, unowned, shards := withPods(t), envInt(t, "OPENMED_SCALE_UNOWNED", 0), envInt(t, "OPENMED_SCALE_SHARDS", 1)
	var results []result
	// records are every run, for $OPENMED_SCALE_JSON.
	var records []figures.Run
	for _, n := range sizes(t) {
		var plain result
		for _, v := range variants(t) {
			bake := v.bake
			cfg := config{n: n, bake: bake, pods: pods, verify: v.verify, shards: 1}
			r := run(t, bin, cfg)
			fmt.Print(r.table())
			check(t, r)
			records = append(records, r.record())
			if unowned > 0 {
				u := cfg
				u.unowned = unowned * n
				ru := run(t, bin, u)
				fmt.Print(ru.table())
				check(t, ru)
				records = append(records, ru.record())
				fmt.Printf("\n%s: with %d unowned Deployments beside the %d owned: peak RSS %+.1f%%, CPU per model rollout %+.1f%%, upgrade %+.1f%%\n",
					cfg, u.unowned, n, pct(ru.peakRSS, r.peakRSS), pctF(ru.cpuRollout, r.cpuRollout), pctF(ru.cpuUpgrade, r.cpuUpgrade))
			}
			if shards > 1 {
				sh := cfg
				sh.shards = shards
				rs := run(t, bin, sh)
				fmt.Print(rs.table())
				check(t, rs)
				records = append(records, rs.record())
				var per []string
				for i, rss := range rs.shardRSS {
					per = append(per, fmt.Sprintf("shard %d %.1f MiB (%.0f%%), anonymous %.1f MiB (%.0f%%)", i, float64(rss)/(1<<20), 100*float64(rss)/float64(r.peakRSS),
						float64(rs.shardAnon[i])/(1<<20), 100*float64(rs.shardAnon[i])/float64(r.peakAnon)))
				}
				fmt.Printf("\n%s: peak RSS of one process %.1f MiB (anonymous %.1f MiB); of %d shards: %s\n", cfg, float64(r.peakRSS)/(1<<20), float64(r.peakAnon)/(1<<20), shards, strings.Join(per, ", "))
				// Each shard holds the fixed part whole: with the models'
				// part split exactly, a shard holds (P + (k-1)S)/k of P.
				p, fixed := float64(r.peakRSS), float64(r.synced.rss)
				fmt.Printf("%s: with the models' part split exactly, each shard would hold %.0f%% of one process (its fixed part %.1f MiB whole); 60%% needs a fixed part of at most %.1f MiB at this N (a bare controller-runtime manager holds %.1f MiB)\n",
					cfg, 100*(p+float64(shards-1)*fixed)/float64(shards)/p, fixed/(1<<20), (0.6*float64(shards)-1)/float64(shards-1)*p/(1<<20), float64(r.floor.rss)/(1<<20))
			}
			switch {
			case cfg.verify:
				if plain.cfg.n != 0 {
					// Each phase verifies podsPerModel pods per model.
					fmt.Printf("\nN=%d, two pods per Deployment, each verified once per phase: operator CPU per pod verified %.2f / %.2f ms (rollout / upgrade; %+.2f / %+.2f ms against the run without the golden request); peak RSS %.1f MiB, %+.1f MiB against it (%+.1f KiB per pod of a phase)\n",
						n, r.cpuRollout*1000/podsPerModel, r.cpuUpgrade*1000/podsPerModel, (r.cpuRollout-plain.cpuRollout)*1000/podsPerModel, (r.cpuUpgrade-plain.cpuUpgrade)*1000/podsPerModel,
						float64(r.peakRSS)/(1<<20), float64(r.peakRSS-plain.peakRSS)/(1<<20), float64(r.peakRSS-plain.peakRSS)/1024/float64(podsPerModel*n))
				}
			case !bake:
				plain = r
				results = append(results, r)
			case plain.cfg.n != 0:
				fmt.Printf("\nN=%d, two pods per Deployment: peak RSS %.1f MiB with the bake guard (its pod store), %.1f MiB without: %+.1f%%\n",
					n, float64(r.peakRSS)/(1<<20), float64(plain.peakRSS)/(1<<20), pct(r.peakRSS, plain.peakRSS))
			}
		}
	}
	if len(results) > 1 {
		a, b := results[0], results[len(results)-1]
		fmt.Printf("\nN=%d vs N=%d: CPU per model, rollout %.2fx, upgrade %.2fx; RSS growth %.1f KiB per model\n",
			b.cfg.n, a.cfg.n, b.cpuRollout/a.cpuRollout, b.cpuUpgrade/a.cpuUpgrade,
			float64(b.peakRSS-a.peakRSS)/1024/float64(b.cfg.n-a.cfg.n))
	}
	writeFigures(t, records, started)
}

func pct(a, b int64) float64 { return 100 * (float64(a)/float64(b) - 1) }

func pctF(a, b float64) float64 { return 100 * (a/b - 1) }

// check asserts what a run must show: each phase's calls exactly, the
// steady windows and the failover without a call for any model, no list
// and no new watch in the steady windows, the bake run baked, and with
// shards no call of one shard for another's model.
func check(t *testing.T, r result) {
	t.Helper()
	n, bake := r.cfg.n, r.cfg.bake
	for i, p := range []struct {
		name   string
		calls  phaseCalls
		want   map[string]int
		noPods int
	}{{"first rollout", r.rollout, firstRolloutCalls, r.noPods[v1]}, {"upgrade", r.upgrade, upgradeCalls, r.noPods[v2]}} {
		want := map[string]int{}
		for k, c := range p.want {
			want[k] = c * n
		}
		if r.cfg.verify {
			for k, c := range verifyCalls {
				want[k] += c * n
			}
			want["patch openmedmodels/status"] += waitStatuses(r.verification.statuses[i])
			// A pass that saw a new pod before the ReplicaSet store
			// saw the pod's ReplicaSet (two watches the run cannot
			// order; the stand-in creates the pods right after it)
			// reads the ReplicaSet once from the API server.
			if rs := p.calls.byKind["get replicasets"]; rs > 0 {
				want["get replicasets"] = rs
				if rs > raceAllowance(n) {
					t.Errorf("%s %s: %d ReplicaSets read, more than the %d the race allows", r.cfg, p.name, rs, raceAllowance(n))
				}
			}
		}
		if bake {
			for k, c := range bakeCalls {
				want[k] += c * n
			}
			// A model whose Deployment the operator saw rolled out
			// before its pod store saw the Ready pods writes
			// Baking without pods first: one status write more,
			// counted from what the model watch saw, at most
			// raceAllowance of them.
			want["patch openmedmodels/status"] += p.noPods
			if p.noPods > raceAllowance(n) {
				t.Errorf("%s %s: %d models seen Baking before their pods, more than the %d the race allows", r.cfg, p.name, p.noPods, raceAllowance(n))
			}
			// A pass that ends a bake and whose status write is
			// answered 409 decides again on the newer model, and
			// reads the version's pods again: at most one list more
			// per such write.
			if extra := p.calls.byKind["list pods"] - want["list pods"]; extra > 0 && extra <= p.calls.conflicts["patch openmedmodels/status"] {
				want["list pods"] += extra
			}
		}
		if c := p.calls.conflictTotal(); c > raceAllowance(n) {
			t.Errorf("%s %s: %d writes answered 409 Conflict (%v), more than the %d the race allows", r.cfg, p.name, c, p.calls.conflicts, raceAllowance(n))
		}
		if !maps.Equal(p.calls.byKind, want) {
			t.Errorf("%s %s: calls %v, want exactly %v%s", r.cfg, p.name, p.calls.byKind, want, p.calls.busiest())
		}
	}
	for i, w := range r.steady {
		if w.total() != 0 || len(w.conflicts) != 0 {
			t.Errorf("%s steady window %d: %d calls: %v (and answered 409: %v)", r.cfg, i+1, w.total(), w.byKind, w.conflicts)
		}
		// No list; a watch only to replace one the API server ended
		// (it closes an informer's watch after 5 to 10 minutes): at
		// most as many as the informers opened before. Leader
		// election (OPENMED_LOCKDOWN) renews its Lease.
		for kind, c := range r.steadyInformer[i].byKind {
			if strings.HasSuffix(kind, " leases") {
				continue
			}
			if !strings.HasPrefix(kind, "watch ") || c > r.watchesBefore[i][kind] {
				t.Errorf("%s steady window %d: %d × %s (watches opened before it: %v)", r.cfg, i+1, c, kind, r.watchesBefore[i])
			}
		}
	}
	if r.eventsDropped != 0 {
		t.Errorf("%s: %.0f events dropped", r.cfg, r.eventsDropped)
	}
	if r.failover.total() != 0 || len(r.failover.conflicts) != 0 {
		t.Errorf("%s failover: %d calls for models: %v (and answered 409: %v)", r.cfg, r.failover.total(), r.failover.byKind, r.failover.conflicts)
	}
	// The bake run baked: every model was seen Baking (and its calls above
	// hold the Baking write and event); the run without the guard none.
	if want := map[bool]int{true: n}[bake]; r.baked != want {
		t.Errorf("%s: %d models seen Baking, want %d", r.cfg, r.baked, want)
	}
	if r.cfg.verify {
		checkVerification(t, r)
	}
	for _, e := range r.crossShard {
		t.Errorf("%s: %s", r.cfg, e)
	}
	for _, e := range r.owners {
		t.Errorf("%s: %s", r.cfg, e)
	}
}

// checkVerification asserts what the pods saw of the golden request: in
// each phase every new pod verified and asked exactly once (a pass that
// read the pod before its verdict reached the pod store plans it again,
// and the verifier, which remembers the verdicts it wrote, does not serve
// it), the statuses of
// the wait within their bounds, and no request of any kind in the steady
// windows and the failover, when every pod is verified and no bake runs.
func checkVerification(t *testing.T, r result) {
	t.Helper()
	v, pods := r.verification, podsPerModel*r.cfg.n
	for i, phase := range []string{"first rollout", "upgrade"} {
		if v.verified[i] != pods {
			t.Errorf("%s %s: %d pods verified, want %d (two per model)", r.cfg, phase, v.verified[i], pods)
		}
		if v.golden[i] != pods || v.maxAsks[i] > 1 {
			t.Errorf("%s %s: the pods received %d golden requests, %d beyond one per pod, one pod %d: want every new pod asked once",
				r.cfg, phase, v.golden[i], v.askedAgain[i], v.maxAsks[i])
		}
		// The pass that asks the first pod writes Verifying, naming
		// it. Each further status of the wait follows a change of one
		// of the new pods (its containers ready: Verifying names it;
		// its verdict: the next pod or RolloutInProgress; its Ready:
		// the Deployment controller's counts) or the controller's
		// first report of the rollout: at most three per pod and one.
		for model, seen := range v.statuses[i] {
			if c, w := count(seen, v1alpha1.VerifyingReason), waitStatuses(map[string][]seenStatus{model: seen}); c < 1 || w > 3*podsPerModel+1 {
				var msgs []string
				for _, s := range seen {
					msgs = append(msgs, fmt.Sprintf("%s %q", s.reason, s.message))
				}
				t.Errorf("%s %s: model %s wrote %d statuses of the wait, %d Verifying (%s); want at least one Verifying, at most %d",
					r.cfg, phase, model, w, c, strings.Join(msgs, " → "), 3*podsPerModel+1)
			}
		}
	}
	for i, c := range v.steady {
		if c != 0 {
			t.Errorf("%s steady window %d: the pods received %d requests, want 0", r.cfg, i+1, c)
		}
	}
	if v.failover != 0 {
		t.Errorf("%s failover: the pods received %d requests, want 0", r.cfg, v.failover)
	}
}

// waitStatuses are the status writes, among those the model watch saw in
// a phase (per model), of a rollout's wait for its pods' verdicts, which
// a rollout whose pods are Ready at once does not make: RolloutStarted
// again (the Deployment controller reported the rollout under way, with
// its counts, before any pod was ready), each Verifying (a pass found a
// pod ready but for its verdict, and names it, with the controller's
// counts) and each RolloutInProgress (a verdict, or a pod's Ready in the
// controller's counts, changed the summary).
func waitStatuses(statuses map[string][]seenStatus) int {
	n := 0
	for _, seen := range statuses {
		n += max(0, count(seen, v1alpha1.RolloutStartedReason)-1) + count(seen, v1alpha1.VerifyingReason) + count(seen, v1alpha1.RolloutInProgressReason)
	}
	return n
}

// count is how many of seen have Reconciling reason.
func count(seen []seenStatus, reason string) int {
	n := 0
	for _, s := range seen {
		if s.reason == reason {
			n++
		}
	}
	return n
}

// sequences prints how many models went through each sequence of
// statuses (by Reconciling reason, "-" for none), most common first.
func sequences(statuses map[string][]seenStatus) string {
	seen := map[string]int{}
	for _, ss := range statuses {
		var parts []string
		for _, s := range ss {
			r := s.reason
			if r == "" {
				r = "-"
			}
			parts = append(parts, r)
		}
		seen[strings.Join(parts, " → ")]++
	}
	keys := slices.Collect(maps.Keys(seen))
	sort.Slice(keys, func(i, j int) bool {
		return seen[keys[i]] > seen[keys[j]] || seen[keys[i]] == seen[keys[j]] && keys[i] < keys[j]
	})
	var out []string
	for _, k := range keys {
		out = append(out, fmt.Sprintf("%d × %s", seen[k], k))
	}
	return strings.Join(out, "; ")
}

// result is what one run measured.
type result struct {
	cfg                    config
	rollout, upgrade       phaseCalls
	steady, steadyInformer []phaseCalls
	// watchesBefore are, for each steady window, the watches the process
	// opened before it, by kind.
	watchesBefore []map[string]int
	// baked is how many models were seen Baking; podReads the operator's
	// list and watch requests on pods over the whole process.
	baked    int
	podReads map[string]int
	// noPods is, per version, how many models were seen Baking before
	// their pods were.
	noPods                  map[string]int
	informer                phaseCalls
	createReady, upgradeRdy time.Duration
	// reaction is measured one model at a time; waveReaction during the
	// upgrade wave, where every model's Ready waits behind the others'
	// rollouts in the operator's queue.
	reaction, waveReaction []time.Duration
	cpuRollout, cpuUpgrade float64 // seconds per model
	// passesRollout, passesUpgrade are the passes per model of each phase
	// (controller_runtime_reconcile_total): a pass that writes nothing
	// costs CPU too.
	passesRollout, passesUpgrade float64
	// wokenRollout, wokenUpgrade split them by what woke them
	// (openmed_passes_total's woken_by), per model.
	wokenRollout, wokenUpgrade map[string]float64
	syncedRSS, peakRSS         int64 // bytes: after the caches synced, and at the end (the largest process's)
	// synced is the first process's memory once its caches synced, before
	// any model; floor a bare controller-runtime manager's (e2e/scale/floor)
	// once its cache synced, on the same API server.
	synced, floor memory
	// peakAnon is the largest process's peak anonymous memory (RssAnon,
	// sampled: its own memory, without its binary's shared file pages).
	peakAnon int64
	// shardRSS is each process's peak RSS, shardAnon its peak RssAnon;
	// shardCalls each one's calls over the run.
	shardRSS   []int64
	shardAnon  []int64
	shardCalls []int
	// crossShard lists calls of one shard for another's model; owners
	// Deployments whose labels or owner do not say their one model.
	crossShard, owners []string
	// failover are the calls for models from the new processes' start
	// until every model was reconciled and 5 s more; failoverTime that
	// time, failoverRSS their peak RSS (the largest).
	failover phaseCalls
	// failoverInformer are the new processes' list and watch requests.
	failoverInformer phaseCalls
	failoverTime     time.Duration
	failoverRSS      int64
	// apiServerCPU is the API server's (and etcd's) CPU time over the
	// first rollout, as a share of the wall time.
	apiServerCPU float64
	// eventsDropped is openmed_events_dropped_total over the processes.
	eventsDropped   float64
	metricsBytes    int
	samplesPerModel float64
	// writesAs are the identities the writes to Deployments and ConfigMaps
	// were made as ("" for the operator's own), with their counts.
	writesAs map[string]int
	// verification is what the pods saw of the golden request
	// (cfg.verify).
	verification verification
}

// verification is, per phase (first rollout, upgrade), the pods verified,
// the golden requests the pods received, and the time from the phase's
// first write until its last pod was verified; and the requests of any
// kind the pods received in each steady window and in the failover.
type verification struct {
	verified, golden [2]int
	// askedAgain are the golden requests beyond one per pod, maxAsks
	// the most one pod received.
	askedAgain, maxAsks [2]int
	allVerified         [2]time.Duration
	// statuses are, per model, the statuses the model watch saw written
	// in the phase.
	statuses [2]map[string][]seenStatus
	steady   []int
	failover int
}

func (r result) table() string {
	var b strings.Builder
	n := r.cfg.n
	guard := "without the bake guard"
	if r.cfg.bake {
		guard = fmt.Sprintf("with the bake guard, bakeSeconds %d", scaleBake)
	}
	shape := "two pods per Deployment"
	if r.cfg.verify {
		shape = "two pods per Deployment verified by a golden request over HTTP"
	}
	if !r.cfg.pods {
		shape = "no pods"
	}
	if r.cfg.unowned > 0 {
		shape += fmt.Sprintf(", %d Deployments no model targets", r.cfg.unowned)
	}
	procs := "operator process"
	if r.cfg.shards > 1 {
		procs = fmt.Sprintf("%d operator processes (shards)", r.cfg.shards)
	}
	fmt.Fprintf(&b, "\n=== scale N=%d, %s, %s (%s, real kube-apiserver; calls counted by the API server's audit log)\n", n, shape, guard, procs)
	fmt.Fprintf(&b, "%-34s %s\n", "first rollout, calls per model", r.rollout.describe(n))
	fmt.Fprintf(&b, "%-34s %s\n", "upgrade, calls per model", r.upgrade.describe(n))
	var as []string
	for user, n := range r.writesAs {
		if user == "" {
			user = "the operator's own identity"
		}
		as = append(as, fmt.Sprintf("%d as %s", n, user))
	}
	sort.Strings(as)
	fmt.Fprintf(&b, "%-34s %s\n", "writes to Deployments, ConfigMaps", strings.Join(as, ", "))
	for i, w := range r.steady {
		fmt.Fprintf(&b, "%-34s %d calls, %d list/watch\n", fmt.Sprintf("steady state %d (%s)", i+1, steadyWindow), w.total(), r.steadyInformer[i].total())
	}
	if r.cfg.verify {
		v := r.verification
		fmt.Fprintf(&b, "%-34s rollout %d pods verified, %d golden requests (%d asked again), all verified in %s; upgrade %d, %d (%d), %s; requests in the steady windows %v, in the failover %d\n",
			"the golden request", v.verified[0], v.golden[0], v.askedAgain[0], v.allVerified[0].Round(time.Millisecond),
			v.verified[1], v.golden[1], v.askedAgain[1], v.allVerified[1].Round(time.Millisecond), v.steady, v.failover)
		fmt.Fprintf(&b, "%-34s rollout %s\n%-34s upgrade %s\n", "  statuses written (Reconciling)", sequences(v.statuses[0]), "", sequences(v.statuses[1]))
	}
	fmt.Fprintf(&b, "%-34s %d of %d models seen Baking (before their pods: %v); pods read by %v over the whole process\n", "the bake", r.baked, n, r.noPods, r.podReads)
	informer := r.informer.describe(1) + " (per run, not per model)"
	if r.informer.total() == 0 {
		informer = "0 (no re-list, no new watch after the caches synced; leader election off)"
	}
	fmt.Fprintf(&b, "%-34s %s\n", "list/watch and leases, whole run", informer)
	fmt.Fprintf(&b, "%-34s %s (API server and etcd CPU: %.2f cores of 2)\n", "create -> all Ready", r.createReady.Round(time.Millisecond), r.apiServerCPU)
	fmt.Fprintf(&b, "%-34s %s\n", "upgrade -> all Ready", r.upgradeRdy.Round(time.Millisecond))
	med, p95 := percentile(r.reaction, 50), percentile(r.reaction, 95)
	fmt.Fprintf(&b, "%-34s median %s, p95 %s (%d models, one at a time)\n", "reaction, Deployment ready -> Ready", med.Round(100*time.Microsecond), p95.Round(100*time.Microsecond), len(r.reaction))
	med, p95 = percentile(r.waveReaction, 50), percentile(r.waveReaction, 95)
	fmt.Fprintf(&b, "%-34s median %s, p95 %s (queued behind the wave)\n", "  the same during the upgrade wave", med.Round(time.Millisecond), p95.Round(time.Millisecond))
	fmt.Fprintf(&b, "%-34s rollout %.2f ms, upgrade %.2f ms\n", "operator CPU per model", r.cpuRollout*1000, r.cpuUpgrade*1000)
	fmt.Fprintf(&b, "%-34s rollout %.2f, upgrade %.2f\n", "passes per model", r.passesRollout, r.passesUpgrade)
	fmt.Fprintf(&b, "%-34s rollout %s; upgrade %s\n", "  woken by", byCause(r.wokenRollout), byCause(r.wokenUpgrade))
	fmt.Fprintf(&b, "%-34s rollout %s; upgrade %s\n", "  watch events that woke a model", bySource(r.wokenRollout), bySource(r.wokenUpgrade))
	fmt.Fprintf(&b, "%-34s %.1f MiB (%.1f MiB once the caches synced, before any model); anonymous (RssAnon, sampled) %.1f MiB\n", "operator peak RSS",
		float64(r.peakRSS)/(1<<20), float64(r.syncedRSS)/(1<<20), float64(r.peakAnon)/(1<<20))
	fmt.Fprintf(&b, "%-34s the operator %s; a bare controller-runtime manager (e2e/scale/floor) %s\n", "  fixed part, once synced", r.synced, r.floor)
	if r.cfg.shards > 1 {
		var per []string
		for i := range r.shardRSS {
			per = append(per, fmt.Sprintf("shard %d: %.1f MiB (anonymous %.1f), %d calls", i, float64(r.shardRSS[i])/(1<<20), float64(r.shardAnon[i])/(1<<20), r.shardCalls[i]))
		}
		fmt.Fprintf(&b, "%-34s %s; calls for another shard's model: %d\n", "  per shard", strings.Join(per, "; "), len(r.crossShard))
	}
	fmt.Fprintf(&b, "%-34s %s to every model reconciled, %d calls for models, peak RSS %.1f MiB; list/watch %s\n", "failover (new processes)",
		r.failoverTime.Round(time.Millisecond), r.failover.total(), float64(r.failoverRSS)/(1<<20), r.failoverInformer.describe(1))
	fmt.Fprintf(&b, "%-34s %d bytes, %.2f samples per model; events dropped (queue of 8,192): %.0f\n", "/metrics", r.metricsBytes, r.samplesPerModel, r.eventsDropped)
	return b.String()
}

func percentile(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[(len(s)-1)*p/100]
}

// phaseCalls are the operator's requests in one window, by
// "verb resource[/subresource]".
type phaseCalls struct {
	byKind map[string]int
	reqs   []harness.Request
	// conflicts are the writes for models the API server answered 409
	// Conflict (a conditional write that met a newer version; the pass
	// decides again and writes once more), by kind. byKind does not hold
	// them.
	conflicts map[string]int
}

// busiest names the models with the most requests to their own object
// (the model, its status and its Deployment, which the benchmark names
// alike) when some have more than most, with those requests: why a phase
// is above its floor.
func (p phaseCalls) busiest() string {
	per := map[string][]harness.Request{}
	for _, r := range p.reqs {
		if r.Resource == "openmedmodels" || r.Resource == "deployments" {
			per[r.Name] = append(per[r.Name], r)
		}
	}
	common := map[int]int{}
	for _, rs := range per {
		common[len(rs)]++
	}
	mode := 0
	for n, c := range common {
		if c > common[mode] {
			mode = n
		}
	}
	var b strings.Builder
	names := make([]string, 0, len(per))
	for name, rs := range per {
		if len(rs) > mode {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for i, name := range names {
		if i == 5 {
			fmt.Fprintf(&b, "; and %d more", len(names)-i)
			break
		}
		fmt.Fprintf(&b, "; %s (%d requests, most models %d):", name, len(per[name]), mode)
		for _, r := range per[name] {
			fmt.Fprintf(&b, " %s %d at %s,", r.Kind(), r.Code, r.At.Format("15:04:05.000"))
		}
	}
	return b.String()
}

func (p phaseCalls) total() int {
	n := 0
	for _, c := range p.byKind {
		n += c
	}
	return n
}

// conflictTotal is how many writes the API server answered 409 Conflict.
func (p phaseCalls) conflictTotal() int {
	n := 0
	for _, c := range p.conflicts {
		n += c
	}
	return n
}

func (p phaseCalls) perModel(n int) float64 { return float64(p.total()) / float64(n) }

func (p phaseCalls) describe(n int) string {
	keys := make([]string, 0, len(p.byKind))
	for k := range p.byKind {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %.2f", k, float64(p.byKind[k])/float64(n))
	}
	out := fmt.Sprintf("%.2f (%s)", p.perModel(n), strings.Join(parts, ", "))
	if len(p.conflicts) > 0 {
		out += fmt.Sprintf("; answered 409 Conflict and written again: %v", p.conflicts)
	}
	return out
}

// calls are the operator's requests in [from, to), split as
// harness.PerModel splits them.
func calls(t *testing.T, cl *harness.Cluster, from, to time.Time) (models, informer phaseCalls) {
	return split(cl.Requests(t, from, to), from, to)
}

// split is calls on requests already read: those received in [from, to).
func split(reqs []harness.Request, from, to time.Time) (models, informer phaseCalls) {
	var in []harness.Request
	for _, q := range reqs {
		if !q.At.Before(from) && q.At.Before(to) {
			in = append(in, q)
		}
	}
	var answered, conflicted []harness.Request
	for _, q := range in {
		if q.Code == http.StatusConflict && q.Mutating() {
			conflicted = append(conflicted, q)
		} else {
			answered = append(answered, q)
		}
	}
	m, i := harness.PerModel(answered)
	c, _ := harness.PerModel(conflicted)
	return phaseCalls{byKind: m, reqs: in, conflicts: c}, phaseCalls{byKind: i}
}

// run is one benchmark of shape cfg.
func run(t *testing.T, bin string, cfg config) result {
	ctx := context.Background()
	n := cfg.n
	dir := t.TempDir()
	cl := harness.StartFor(t, dir, "Metadata")
	defer cl.Stop(t)
	c := cl.Client
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		t.Fatal(err)
	}
	// With $OPENMED_LOCKDOWN, every model writes as the tenant's
	// ServiceAccount.
	sa := cl.Tenant(t, namespace)

	sc := harness.NewStandIn(t, c, namespace, workers, 0)
	if cfg.pods {
		sc = sc.WithPods()
	}
	defer sc.Stop()
	var fleet *modelserver.Fleet
	var pw *podWatch
	if cfg.verify {
		// The pods' IPs are loopback addresses of a range no cluster on
		// the machine takes meanwhile; each pod is served on its IP.
		prefix, lock, err := minicluster.ReservePodRange()
		if err != nil {
			t.Fatal(err)
		}
		defer lock.Close()
		sc = sc.WithPodIPs(t, prefix)
		if fleet, err = modelserver.Start(ctx, cl.Env.Config, modelserver.Options{Namespace: namespace}); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := fleet.Close(); err != nil {
				t.Error(err)
			}
		}()
		pw = newPodWatch(t, c)
		defer pw.stop()
	}
	parallel(t, n, func(i int) error {
		return client.WithFieldOwner(c, "helm").Create(ctx, deployment(name(i)))
	})
	parallel(t, cfg.unowned, func(i int) error {
		return client.WithFieldOwner(c, "helm").Create(ctx, deployment(fmt.Sprintf("unowned-%05d", i)))
	})
	testenv.Eventually(t, 20*time.Minute, "the stand-in reported every Deployment", func() (bool, string) {
		return sc.Reported() >= n+cfg.unowned, fmt.Sprintf("%d of %d", sc.Reported(), n+cfg.unowned)
	})

	r := result{cfg: cfg}
	// The operators' metrics are read as Prometheus reads them (and the
	// profiles of OPENMED_SCALE_PROFILE as a person profiling would).
	scraper, err := localrun.ServiceAccountScraper(ctx, c, "default", "scraper", localrun.MetricsReaderRole, localrun.ProfilerRole)
	if err != nil {
		t.Fatal(err)
	}
	ops := startOperators(t, bin, cl, dir, cfg.shards, scraper)
	defer func() {
		for _, op := range ops {
			_ = op.Stop(10 * time.Second)
		}
	}()
	anon := make([]*harness.AnonSampler, len(ops))
	for i, op := range ops {
		anon[i] = harness.SampleAnon(op.PID())
		defer anon[i].Stop()
	}
	baseSamples, _ := scrape(t, ops[0])
	for _, op := range ops {
		r.syncedRSS = max(r.syncedRSS, harness.PeakRSS(t, op.PID()))
	}
	r.synced, r.floor = memoryOf(t, ops[0].PID()), measureFloor(t, cl, dir)
	mw := newModelWatch(t, c)
	defer mw.stop()
	started := time.Now()
	// First rollout.
	// The operator's CPU is read after /metrics is: a scrape of N models'
	// series is the benchmark's, not the phase's.
	passes0, woken0 := passesOf(t, ops), wokenOf(t, ops)
	cpu0, api0 := cpuOf(t, ops), harness.ControlPlaneCPU(t)
	t0 := time.Now()
	mark(cfg, "create")
	parallel(t, n, func(i int) error {
		m := model(i, cfg.shards)
		m.Spec.ServiceAccountName = sa
		if cfg.bake {
			m.Spec.RolloutStrategy.BakeSeconds = ptr.To[int32](scaleBake)
		}
		if cfg.verify {
			m.Spec.Verification = goldenRequest()
		}
		return c.Create(ctx, m)
	})
	mw.waitReady(t, n, v1)
	r.createReady = time.Since(t0)
	r.apiServerCPU = (harness.ControlPlaneCPU(t) - api0) / r.createReady.Seconds()
	settle()
	t1 := time.Now()
	mark(cfg, "created")
	r.cpuRollout = (cpuOf(t, ops) - cpu0) / float64(n)
	r.passesRollout = (passesOf(t, ops) - passes0) / float64(n)
	r.wokenRollout = perModel(wokenOf(t, ops), woken0, n)
	r.rollout, _ = calls(t, cl, t0, t1)
	if cfg.verify {
		pw.phase(&r.verification, 0, fleet, t0, t1)
		r.verification.statuses[0] = mw.seen(t0, t1)
	}

	// Steady state.
	var windows [][2]time.Time
	for i := 0; i < steadyWindows; i++ {
		from := time.Now()
		time.Sleep(steadyWindow)
		windows = append(windows, [2]time.Time{from, time.Now()})
	}
	// One read of the audit log for every window and what came before it.
	all := cl.Requests(t, time.Time{}, windows[len(windows)-1][1])
	for _, win := range windows {
		w, wi := split(all, win[0], win[1])
		_, before := split(all, time.Time{}, win[0])
		r.watchesBefore = append(r.watchesBefore, before.byKind)
		r.steady = append(r.steady, w)
		r.steadyInformer = append(r.steadyInformer, wi)
		if cfg.verify {
			r.verification.steady = append(r.verification.steady, total(pw.requests(fleet, win[0], win[1], nil)))
		}
	}

	// Upgrade.
	passes1, woken1 := passesOf(t, ops), wokenOf(t, ops)
	cpu1 := cpuOf(t, ops)
	t2 := time.Now()
	mark(cfg, "upgrade")
	parallel(t, n, func(i int) error {
		m := &v1alpha1.OpenMedModel{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name(i)}, m); err != nil {
			return err
		}
		base := m.DeepCopy()
		m.Spec.Version = v2
		return c.Patch(ctx, m, client.MergeFrom(base))
	})
	mw.waitReady(t, n, v2)
	r.upgradeRdy = time.Since(t2)
	settle()
	t3 := time.Now()
	mark(cfg, "upgraded")
	r.cpuUpgrade = (cpuOf(t, ops) - cpu1) / float64(n)
	r.passesUpgrade = (passesOf(t, ops) - passes1) / float64(n)
	r.wokenUpgrade = perModel(wokenOf(t, ops), woken1, n)
	r.upgrade, _ = calls(t, cl, t2, t3)
	if cfg.verify {
		pw.phase(&r.verification, 1, fleet, t2, t3)
		r.verification.statuses[1] = mw.seen(t2, t3)
	}
	_, r.informer = calls(t, cl, started, t3)
	r.podReads = map[string]int{}
	whole := cl.Requests(t, time.Time{}, t3)
	for _, q := range whole {
		if q.Resource == "pods" && (q.Verb == "list" || q.Verb == "watch") {
			r.podReads[q.Kind()]++
		}
	}
	r.shardCalls, r.crossShard = shardCalls(cl, whole, cfg.shards)
	r.owners = owners(t, c, cfg)
	r.baked, r.noPods = mw.bakedCount()
	// With $OPENMED_LOCKDOWN every write to a Deployment or a ConfigMap is
	// the tenant's ServiceAccount's; without, the operator's own.
	want := ""
	if sa != "" {
		want = "system:serviceaccount:" + namespace + ":" + sa
	}
	r.writesAs = map[string]int{}
	for _, q := range append(append([]harness.Request(nil), r.rollout.reqs...), r.upgrade.reqs...) {
		if q.Mutating() && (q.Resource == "deployments" || q.Resource == "configmaps") {
			r.writesAs[q.ImpersonatedUser]++
			if q.ImpersonatedUser != want {
				t.Errorf("%s %s/%s made as %q, want %q", q.Kind(), q.Namespace, q.Name, q.ImpersonatedUser, want)
			}
		}
	}
	r.waveReaction = reactions(sc, mw, v2)
	r.reaction = probeReaction(t, sc, mw, n)

	if dir := os.Getenv("OPENMED_SCALE_PROFILE"); dir != "" {
		saveHeapProfile(t, ops[0], filepath.Join(dir, fmt.Sprintf("heap-%s.pprof", strings.ReplaceAll(cfg.String(), " ", "-"))))
	}
	samples, size := scrape(t, ops[0])
	r.metricsBytes = size
	r.samplesPerModel = float64(samples-baseSamples) / float64(n) * float64(cfg.shards)
	for _, op := range ops {
		r.eventsDropped += metricSum(t, op, "openmed_events_dropped_total", "")
		rss := harness.PeakRSS(t, op.PID())
		r.shardRSS = append(r.shardRSS, rss)
		r.peakRSS = max(r.peakRSS, rss)
	}
	for _, a := range anon {
		r.shardAnon = append(r.shardAnon, a.Stop())
		r.peakAnon = max(r.peakAnon, a.Peak())
	}

	// Failover: new processes take over from a clean start (as a new leader
	// does) and reconcile every model; none may write.
	for _, op := range ops {
		if err := op.Stop(10 * time.Second); err != nil {
			t.Errorf("stop the operator: %v", err)
		}
	}
	t4 := time.Now()
	mark(cfg, "failover")
	ops = startOperators(t, bin, cl, dir, cfg.shards, scraper)
	testenv.Eventually(t, 20*time.Minute, "the new processes reconciled every model", func() (bool, string) {
		done := passesOf(t, ops)
		return done >= float64(n), fmt.Sprintf("%.0f of %d", done, n)
	})
	r.failoverTime = time.Since(t4)
	mark(cfg, "failed-over")
	settle()
	t5 := time.Now()
	r.failover, r.failoverInformer = calls(t, cl, t4, t5)
	if cfg.verify {
		r.verification.failover = total(pw.requests(fleet, t4, t5, nil))
	}
	for _, op := range ops {
		r.failoverRSS = max(r.failoverRSS, harness.PeakRSS(t, op.PID()))
	}
	return r
}

// shardKey is the label Flux's sharding convention selects by.
const shardKey = "sharding.fluxcd.io/key"

// shardOf is the shard of model i: 0 (no label, the main shard) or 1..s-1.
func shardOf(i, shards int) int { return i % shards }

// startOperators starts the operator processes of s shards, whose metrics
// endpoints scraper reads, and waits until each is ready: one process with
// no selector, or one per shard, the first for the models without the shard
// label (Flux's convention), each as its own user so the audit log tells
// them apart.
func startOperators(t *testing.T, bin string, cl *harness.Cluster, dir string, shards int, scraper *localrun.Scraper) []*localrun.Operator {
	t.Helper()
	var ops []*localrun.Operator
	for i := 0; i < shards; i++ {
		kubeconfig, args := cl.Kubeconfig, append([]string{"--log-level=error"}, cl.OperatorArgs...)
		if shards > 1 {
			sel := "!" + shardKey
			if i > 0 {
				kubeconfig, sel = cl.ShardKubeconfig(t, i), fmt.Sprintf("%s=shard%d", shardKey, i)
			}
			args = append(args, "--watch-label-selector="+sel)
		}
		logDir, env := dir, []string(nil)
		profile := os.Getenv("OPENMED_SCALE_PROFILE")
		if profile != "" {
			// The logs stay with the profiles, with every collection's
			// heap sizes (gctrace, on stderr).
			logDir, env = profile, []string{"GODEBUG=gctrace=1"}
			args = append(args, "--enable-pprof")
		}
		op, err := localrun.StartOperator(localrun.OperatorConfig{Binary: bin, Kubeconfig: kubeconfig,
			LogPath: filepath.Join(logDir, fmt.Sprintf("operator-%d.log", i)), Args: args, Env: env, Scraper: scraper})
		if err != nil {
			t.Fatal(err)
		}
		if profile != "" {
			go sampleRSS(op, filepath.Join(profile, fmt.Sprintf("rss-%d-%d.tsv", i, op.PID())),
				filepath.Join(profile, fmt.Sprintf("heap-peak-%d-%d.pprof", i, op.PID())))
			go sampleCPU(op, filepath.Join(profile, fmt.Sprintf("cpu-%d-%d", i, op.PID())))
		}
		ops = append(ops, op)
	}
	for _, op := range ops {
		readyCtx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		err := op.WaitReady(readyCtx)
		cancel()
		if err != nil {
			for _, o := range ops {
				_ = o.Stop(10 * time.Second)
			}
			t.Fatal(err)
		}
	}
	return ops
}

// memory is a process's resident set: rss its peak (VmHWM), file and anon
// its current file-backed (its binary's pages) and anonymous parts.
type memory struct{ rss, file, anon int64 }

func (m memory) String() string {
	return fmt.Sprintf("%.1f MiB (file-backed %.1f, anonymous %.1f)", float64(m.rss)/(1<<20), float64(m.file)/(1<<20), float64(m.anon)/(1<<20))
}

func memoryOf(t *testing.T, pid int) memory {
	t.Helper()
	m := memory{rss: harness.PeakRSS(t, pid)}
	m.file, _ = harness.StatusBytes(pid, "RssFile:")
	m.anon, _ = harness.StatusBytes(pid, "RssAnon:")
	return m
}

// floorBinary is e2e/scale/floor, built once by TestScale.
var floorBinary string

func buildFloor(t *testing.T) string {
	t.Helper()
	bin, err := localrun.Build(context.Background(), t.TempDir(), "github.com/openmed/openmed-operator/e2e/scale/floor", "floor")
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// measureFloor runs the bare manager against the cluster until its cache
// synced and returns its memory then.
func measureFloor(t *testing.T, cl *harness.Cluster, dir string) memory {
	t.Helper()
	op, err := localrun.StartOperator(localrun.OperatorConfig{Binary: floorBinary, Kubeconfig: cl.Kubeconfig, LogPath: filepath.Join(dir, "floor.log")})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = op.Stop(10 * time.Second) }()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := op.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return memoryOf(t, op.PID())
}

func cpuOf(t *testing.T, ops []*localrun.Operator) float64 {
	var sum float64
	for _, op := range ops {
		sum += harness.CPUSeconds(t, op.PID())
	}
	return sum
}

// shardCalls counts each process's calls for models over the run, and
// lists those made for a model of another shard (by the object's name:
// the model, its Deployment, ConfigMaps and Events all start with it).
func shardCalls(cl *harness.Cluster, reqs []harness.Request, shards int) ([]int, []string) {
	counts := make([]int, shards)
	var cross []string
	for _, q := range reqs {
		shard := 0
		for i := 1; i < shards; i++ {
			if q.User == harness.ShardUser(cl.User, i) {
				shard = i
			}
		}
		if q.Verb == "list" || q.Verb == "watch" || q.Resource == "leases" {
			continue
		}
		counts[shard]++
		var idx int
		if _, err := fmt.Sscanf(q.Name, "model-%05d", &idx); err != nil {
			continue
		}
		if want := shardOf(idx, shards); want != shard && len(cross) < 10 {
			cross = append(cross, fmt.Sprintf("shard %d: %s %s (a model of shard %d)", shard, q.Kind(), q.Name, want))
		}
	}
	return counts, cross
}

// owners checks every Deployment: a model's is claimed by that model
// alone (its owner annotation, one apply entry of the operator's field
// manager, the model's shard label); an unowned one carries nothing of the
// operator's.
func owners(t *testing.T, c client.Client, cfg config) []string {
	t.Helper()
	var list appsv1.DeploymentList
	if err := c.List(context.Background(), &list, client.InNamespace(namespace)); err != nil {
		t.Fatal(err)
	}
	var out []string
	add := func(format string, args ...any) {
		if len(out) < 10 {
			out = append(out, fmt.Sprintf(format, args...))
		}
	}
	for i := range list.Items {
		d := &list.Items[i]
		entries := 0
		for _, e := range d.ManagedFields {
			if e.Manager == rollout.DefaultFieldManager && e.Operation == metav1.ManagedFieldsOperationApply {
				entries++
			}
		}
		var idx int
		if _, err := fmt.Sscanf(d.Name, "model-%05d", &idx); err != nil {
			if entries != 0 || d.Labels[v1alpha1.ClaimedLabel] != "" || d.Annotations[v1alpha1.ModelResourceAnnotation] != "" {
				add("unowned Deployment %s carries the operator's fields", d.Name)
			}
			continue
		}
		wantShard := ""
		if s := shardOf(idx, cfg.shards); s > 0 {
			wantShard = fmt.Sprintf("shard%d", s)
		}
		if owner := d.Annotations[v1alpha1.ModelResourceAnnotation]; owner != namespace+"/"+d.Name || entries != 1 ||
			d.Labels[v1alpha1.ClaimedLabel] != "true" || d.Labels[shardKey] != wantShard {
			add("Deployment %s: owner %q, %d apply entries of the operator, labels %v (shard %q)", d.Name, owner, entries, d.Labels, wantShard)
		}
	}
	return out
}

// passesOf is the number of passes the operator processes have finished.
func passesOf(t *testing.T, ops []*localrun.Operator) float64 {
	t.Helper()
	var sum float64
	for _, op := range ops {
		sum += reconciled(t, op)
	}
	return sum
}

// wokenOf is the passes the operators started, by what woke them: the
// samples of openmed_passes_total by their woken_by label, and as
// "backstop unchanged" the backstop passes among them that found their
// inputs unchanged (openmed_backstop_passes_unchanged_total), one scrape
// per process.
func wokenOf(t *testing.T, ops []*localrun.Operator) map[string]float64 {
	t.Helper()
	const prefix = `openmed_passes_total{woken_by="`
	out := map[string]float64{}
	for _, op := range ops {
		for _, line := range strings.Split(string(fetch(t, op, "/metrics")), "\n") {
			if value, ok := strings.CutPrefix(line, "openmed_backstop_passes_unchanged_total "); ok {
				v, _ := strconv.ParseFloat(value, 64)
				out["backstop unchanged"] += v
				continue
			}
			if rest, ok := strings.CutPrefix(line, `openmed_wakes_total{source="`); ok {
				source, value, _ := strings.Cut(rest, `"} `)
				v, _ := strconv.ParseFloat(value, 64)
				out[wakesPrefix+source] += v
				continue
			}
			rest, ok := strings.CutPrefix(line, prefix)
			if !ok {
				continue
			}
			cause, value, _ := strings.Cut(rest, `"} `)
			v, _ := strconv.ParseFloat(value, 64)
			out[cause] += v
		}
	}
	return out
}

// perModel is (after - before) / n for each cause.
func perModel(after, before map[string]float64, n int) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		out[k] = (v - before[k]) / float64(n)
	}
	return out
}

// byCause prints the non-zero causes, by name.
// wakesPrefix marks, in a wokenOf map, the watch events that woke a model
// (openmed_wakes_total), by source.
const wakesPrefix = "wakes/"

// byCause prints the passes by what woke them; bySource the watch events
// that woke a model, by source.
func byCause(m map[string]float64) string { return printCounts(m, false) }

func bySource(m map[string]float64) string { return printCounts(m, true) }

func printCounts(m map[string]float64, wakes bool) string {
	var parts []string
	for _, key := range slices.Sorted(maps.Keys(m)) {
		cause, isWake := strings.CutPrefix(key, wakesPrefix)
		if isWake == wakes && m[key] != 0 {
			parts = append(parts, fmt.Sprintf("%s %.2f", cause, m[key]))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

// reconciled is the number of passes the operator has finished
// (controller-runtime's controller_runtime_reconcile_total).
func reconciled(t *testing.T, op *localrun.Operator) float64 {
	t.Helper()
	return metricSum(t, op, "controller_runtime_reconcile_total", `controller="openmedmodel"`)
}

// metricSum sums the samples of the metric name whose labels contain
// match.
func metricSum(t *testing.T, op *localrun.Operator, name, match string) float64 {
	t.Helper()
	data := fetch(t, op, "/metrics")
	var sum float64
	for _, line := range strings.Split(string(data), "\n") {
		if (strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ")) && strings.Contains(line, match) {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			sum += v
		}
	}
	return sum
}

// settle lets the last events of a phase land: they follow the status
// write the phase waits for.
func settle() { time.Sleep(5 * time.Second) }

func name(i int) string { return fmt.Sprintf("model-%05d", i) }

func deployment(name string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{"helm.sh/chart": "openmed-service-0.3.0"}},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](podsPerModel),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "openmed-service", Image: "ghcr.io/maziyarpanahi/openmed:2.2.0",
					EnvFrom:        []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: name + "-config"}}}},
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromInt32(8080)}}},
				}}},
			},
		},
	}
}

// model is model i; with shards, labelled for its shard (none for the
// main shard).
func model(i, shards int) *v1alpha1.OpenMedModel {
	var labels map[string]string
	if s := shardOf(i, shards); s > 0 {
		labels = map[string]string{shardKey: fmt.Sprintf("shard%d", s)}
	}
	return &v1alpha1.OpenMedModel{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name(i), Labels: labels},
		Spec: v1alpha1.OpenMedModelSpec{
			Family: "PII", Version: v1, Tier: v1alpha1.TierSmall, Replicas: ptr.To[int32](podsPerModel),
			RolloutStrategy: v1alpha1.RolloutStrategy{Type: v1alpha1.RollingUpdateRolloutStrategyType},
		},
	}
}

// goldenRequest is the verification the models of a verified run
// declare: the synthetic note's patient must be found, on the port the
// stand-in's pods are served on.
func goldenRequest() *v1alpha1.Verification {
	return &v1alpha1.Verification{
		Request: v1alpha1.VerificationRequest{
			Port: intstr.FromInt32(modelserver.DefaultPort), Path: goldenPath,
			Body: `{"text":"Patient John Smith, seen 2024-03-05.","model_name":"pii","confidence_threshold":0.5}`,
		},
		SuccessCondition: `response.code == 200 && response.json.entities.exists(e, e.label == "NAME" && e.text == "John Smith")`,
	}
}

const goldenPath = "/pii/extract"

// podWatch records, from a watch of the namespace's pods, every pod's
// name and when it was first seen verified (its readiness gate's
// condition True).
type podWatch struct {
	w        watch.Interface
	mu       sync.Mutex
	names    map[string]bool
	verified map[string]time.Time
	done     chan struct{}
}

func newPodWatch(t *testing.T, c client.WithWatch) *podWatch {
	t.Helper()
	w, err := c.Watch(context.Background(), &corev1.PodList{}, client.InNamespace(namespace))
	if err != nil {
		t.Fatal(err)
	}
	pw := &podWatch{w: w, names: map[string]bool{}, verified: map[string]time.Time{}, done: make(chan struct{})}
	go func() {
		defer close(pw.done)
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			now := time.Now()
			pw.mu.Lock()
			pw.names[p.Name] = true
			if c := rollout.VerifiedCondition(p); c != nil && c.Status == corev1.ConditionTrue {
				if _, seen := pw.verified[p.Name]; !seen {
					pw.verified[p.Name] = now
				}
			}
			pw.mu.Unlock()
		}
	}()
	return pw
}

// phase records in v, as phase i, what the pods saw of a phase that began
// at from and ended at to: the pods first seen verified in it, the time
// from its start until the last of them, and the golden requests the pods
// received (beyond one per pod, and the most one pod received).
func (pw *podWatch) phase(v *verification, i int, f *modelserver.Fleet, from, to time.Time) {
	pw.mu.Lock()
	for _, at := range pw.verified {
		if !at.Before(from) && at.Before(to) {
			v.verified[i]++
			v.allVerified[i] = max(v.allVerified[i], at.Sub(from))
		}
	}
	pw.mu.Unlock()
	for _, n := range pw.requests(f, from, to, func(r modelserver.Request) bool {
		return r.Method == http.MethodPost && r.Path == goldenPath
	}) {
		v.golden[i] += n
		v.askedAgain[i] += max(0, n-1)
		v.maxAsks[i] = max(v.maxAsks[i], n)
	}
}

// requests counts, per pod seen, the requests it received in [from, to)
// that keep keeps (nil: every request); pods that received none are left
// out.
func (pw *podWatch) requests(f *modelserver.Fleet, from, to time.Time, keep func(modelserver.Request) bool) map[string]int {
	pw.mu.Lock()
	names := slices.Collect(maps.Keys(pw.names))
	pw.mu.Unlock()
	out := map[string]int{}
	for _, name := range names {
		for _, r := range f.Requests(name) {
			if !r.Time.Before(from) && r.Time.Before(to) && (keep == nil || keep(r)) {
				out[name]++
			}
		}
	}
	return out
}

// total is the sum of a count per pod.
func total(perPod map[string]int) int {
	n := 0
	for _, c := range perPod {
		n += c
	}
	return n
}

func (pw *podWatch) stop() {
	pw.w.Stop()
	<-pw.done
}

// parallel runs f for 0..n-1 on a few workers.
func parallel(t *testing.T, n int, f func(i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	next := make(chan int)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := retry.OnError(retry.DefaultBackoff, func(error) bool { return true }, func() error { return f(i) }); err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// modelWatch records when each model was first seen Ready on a version.
type modelWatch struct {
	w     watch.Interface
	mu    sync.Mutex
	ready map[string]map[string]time.Time // version -> model -> time
	// becameReady is when each model last turned Ready=True; wasReady is
	// whether it was Ready when last seen.
	becameReady map[string]time.Time
	wasReady    map[string]bool
	// baking holds the models seen Reconciling=True/Baking; noPods, per
	// version, those seen Baking without a Ready pod.
	baking map[string]bool
	noPods map[string]map[string]bool
	// statuses are, per model, the statuses the watch saw change (each
	// a status write: the operator writes none that changes nothing);
	// lastStatus is the status each model was last seen with.
	statuses   map[string][]seenStatus
	lastStatus map[string]string
	done       chan struct{}
}

// seenStatus is a status the model watch saw: when, and the reason and
// message of Reconciling ("" without it).
type seenStatus struct {
	at              time.Time
	reason, message string
}

func newModelWatch(t *testing.T, c client.WithWatch) *modelWatch {
	w, err := c.Watch(context.Background(), &v1alpha1.OpenMedModelList{}, client.InNamespace(namespace))
	if err != nil {
		t.Fatal(err)
	}
	mw := &modelWatch{w: w, ready: map[string]map[string]time.Time{}, becameReady: map[string]time.Time{}, wasReady: map[string]bool{},
		baking: map[string]bool{}, noPods: map[string]map[string]bool{}, statuses: map[string][]seenStatus{}, lastStatus: map[string]string{},
		done: make(chan struct{})}
	go func() {
		defer close(mw.done)
		for ev := range w.ResultChan() {
			m, ok := ev.Object.(*v1alpha1.OpenMedModel)
			if !ok {
				continue
			}
			now := time.Now()
			ready := apimeta.IsStatusConditionTrue(m.Status.Conditions, v1alpha1.ReadyCondition) && m.Status.ObservedGeneration == m.Generation
			status, _ := json.Marshal(m.Status)
			mw.mu.Lock()
			if string(status) != mw.lastStatus[m.Name] {
				mw.lastStatus[m.Name] = string(status)
				seen := seenStatus{at: now}
				if c := apimeta.FindStatusCondition(m.Status.Conditions, v1alpha1.ReconcilingCondition); c != nil {
					seen.reason, seen.message = c.Reason, c.Message
				}
				mw.statuses[m.Name] = append(mw.statuses[m.Name], seen)
			}
			if c := apimeta.FindStatusCondition(m.Status.Conditions, v1alpha1.ReconcilingCondition); c != nil && c.Status == metav1.ConditionTrue && c.Reason == v1alpha1.BakingReason {
				mw.baking[m.Name] = true
				// Ready keeps the bake's fixed message; Reconciling's
				// is the pass's summary (versions, target, bake end).
				if r := apimeta.FindStatusCondition(m.Status.Conditions, v1alpha1.ReadyCondition); r != nil && r.Message == rollout.MsgBakingNoPods {
					if mw.noPods[m.Spec.Version] == nil {
						mw.noPods[m.Spec.Version] = map[string]bool{}
					}
					mw.noPods[m.Spec.Version][m.Name] = true
				}
			}
			if ready && !mw.wasReady[m.Name] {
				mw.becameReady[m.Name] = now
			}
			mw.wasReady[m.Name] = ready
			if !ready {
				mw.mu.Unlock()
				continue
			}
			if mw.ready[m.Status.ActiveVersion] == nil {
				mw.ready[m.Status.ActiveVersion] = map[string]time.Time{}
			}
			if _, seen := mw.ready[m.Status.ActiveVersion][m.Name]; !seen {
				mw.ready[m.Status.ActiveVersion][m.Name] = now
			}
			mw.mu.Unlock()
		}
	}()
	return mw
}

func (mw *modelWatch) waitReady(t *testing.T, n int, version string) {
	t.Helper()
	testenv.Eventually(t, 20*time.Minute, "every model Ready on "+version, func() (bool, string) {
		mw.mu.Lock()
		defer mw.mu.Unlock()
		return len(mw.ready[version]) >= n, fmt.Sprintf("%d of %d", len(mw.ready[version]), n)
	})
}

// readySince is when name last turned Ready after t, if it did.
func (mw *modelWatch) readySince(name string, t time.Time) (time.Time, bool) {
	mw.mu.Lock()
	defer mw.mu.Unlock()
	at, ok := mw.becameReady[name]
	return at, ok && at.After(t)
}

// bakedCount is how many models were seen Baking, and per version how
// many were seen Baking without pods.
func (mw *modelWatch) bakedCount() (int, map[string]int) {
	mw.mu.Lock()
	defer mw.mu.Unlock()
	noPods := map[string]int{}
	for version, models := range mw.noPods {
		noPods[version] = len(models)
	}
	return len(mw.baking), noPods
}

// seen are, per model, the statuses seen change in [from, to), in
// order.
func (mw *modelWatch) seen(from, to time.Time) map[string][]seenStatus {
	mw.mu.Lock()
	defer mw.mu.Unlock()
	out := map[string][]seenStatus{}
	for name, seen := range mw.statuses {
		for _, s := range seen {
			if !s.at.Before(from) && s.at.Before(to) {
				out[name] = append(out[name], s)
			}
		}
	}
	return out
}

func (mw *modelWatch) stop() {
	mw.w.Stop()
	<-mw.done
}

// reactions are, per model, the time from the stand-in reporting the
// upgrade rolled out to the model being seen Ready on it.
func reactions(s *harness.StandIn, mw *modelWatch, version string) []time.Duration {
	mw.mu.Lock()
	defer mw.mu.Unlock()
	var out []time.Duration
	for name, at := range mw.ready[version] {
		if rep := s.LastReport(name); !rep.IsZero() && at.After(rep) {
			out = append(out, at.Sub(rep))
		}
	}
	return out
}

// probeReaction measures, for probeModels models one at a time, the time
// from the Deployment controller reporting a lost Deployment available
// again to the model being seen Ready: the operator's own reaction, with no
// other model queued before it.
func probeReaction(t *testing.T, s *harness.StandIn, mw *modelWatch, n int) []time.Duration {
	t.Helper()
	var out []time.Duration
	for i := 0; i < min(probeModels, n); i++ {
		m := name(i * n / min(probeModels, n))
		lost := s.SetAvailable(t, m, false)
		testenv.Eventually(t, time.Minute, m+" not Ready", func() (bool, string) {
			mw.mu.Lock()
			defer mw.mu.Unlock()
			return !mw.wasReady[m], ""
		})
		back := s.SetAvailable(t, m, true)
		var at time.Time
		testenv.Eventually(t, time.Minute, m+" Ready again", func() (bool, string) {
			var ok bool
			at, ok = mw.readySince(m, lost)
			return ok, ""
		})
		out = append(out, at.Sub(back))
	}
	return out
}

const probeModels = 20

// saveHeapProfile stores the operator's heap profile (after a GC) for
// `go tool pprof`.
func saveHeapProfile(t *testing.T, op *localrun.Operator, path string) {
	t.Helper()
	data := fetch(t, op, "/debug/pprof/heap?gc=1")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	fmt.Println("heap profile:", path)
}

// mark appends a phase's start (unix seconds) to phases.log beside the
// RSS samples. OPENMED_SCALE_PROFILE only.
func mark(cfg config, phase string) {
	dir := os.Getenv("OPENMED_SCALE_PROFILE")
	if dir == "" {
		return
	}
	f, err := os.OpenFile(filepath.Join(dir, "phases.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%d\t%s\t%s\n", time.Now().Unix(), cfg, phase)
}

// sampleRSS writes the operator's resident set size every second to path
// (unix seconds, MiB) until the process is gone, and saves its heap profile
// (as of the last collection) to heapPath each time the RSS has grown by
// 4 MiB past the last profile's: the last one saved is near the peak.
// OPENMED_SCALE_PROFILE only.
func sampleRSS(op *localrun.Operator, path, heapPath string) {
	f, err := os.Create(path)
	if err != nil {
		return
	}
	defer f.Close()
	var profiled int64
	for {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", op.PID()))
		if err != nil {
			return
		}
		var kb int64
		for _, line := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(line, "VmRSS:") {
				kb, _ = strconv.ParseInt(strings.Fields(line)[1], 10, 64)
			}
		}
		if kb == 0 {
			return
		}
		fmt.Fprintf(f, "%d\t%.1f\n", time.Now().Unix(), float64(kb)/1024)
		if kb > profiled+4096 && kb > 64*1024 {
			if body, err := op.Read(context.Background(), "/debug/pprof/heap"); err == nil {
				_ = os.WriteFile(heapPath, body, 0o600)
				profiled = kb
			}
		}
		time.Sleep(time.Second)
	}
}

// sampleCPU saves the operator's CPU profile in consecutive 20 s windows,
// each as prefix-<unix start>.pprof, until the process is gone: the
// windows of a phase (phases.log) merge with `go tool pprof -proto`.
// OPENMED_SCALE_PROFILE only.
func sampleCPU(op *localrun.Operator, prefix string) {
	for {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", op.PID())); err != nil {
			return
		}
		start := time.Now().Unix()
		body, err := op.Read(context.Background(), "/debug/pprof/profile?seconds=20")
		if err != nil {
			// Not serving yet, or stopping.
			time.Sleep(time.Second)
			continue
		}
		_ = os.WriteFile(fmt.Sprintf("%s-%d.pprof", prefix, start), body, 0o600)
	}
}

// scrape reads op's /metrics and returns its number of samples and size.
func scrape(t *testing.T, op *localrun.Operator) (samples, size int) {
	t.Helper()
	data := fetch(t, op, "/metrics")
	for _, line := range strings.Split(string(data), "\n") {
		if line != "" && !strings.HasPrefix(line, "#") {
			samples++
		}
	}
	return samples, len(data)
}

// fetch reads path of op's metrics endpoint.
func fetch(t *testing.T, op *localrun.Operator, path string) []byte {
	t.Helper()
	data, err := op.Read(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
