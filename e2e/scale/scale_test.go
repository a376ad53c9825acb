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
package scale_test

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
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
	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/localrun"
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
)

// The calls of each phase per model, by kind, asserted exactly. A first
// rollout creates the manifest ConfigMap, adds the finalizer, records its
// target in status.claimedTargets before it writes to it, applies the
// pointer, writes RollingOut and Ready, and records RolloutStarted and
// RolloutSucceeded; an upgrade is the same without the finalizer and the
// record. A bake adds the Baking status write and its event.
var (
	firstRolloutCalls = map[string]int{"create configmaps": 1, "patch openmedmodels": 1, "patch openmedmodels/status": 3,
		"patch deployments": 1, "create events": 2}
	upgradeCalls = map[string]int{"create configmaps": 1, "patch openmedmodels/status": 2, "patch deployments": 1,
		"create events": 2}
	bakeCalls = map[string]int{"patch openmedmodels/status": 1, "create events": 1}
)

// steadyWindow is how long each steady-state window lasts:
// OPENMED_SCALE_STEADY, default 15s (`make test` uses shorter ones).
var steadyWindow = func() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("OPENMED_SCALE_STEADY")); err == nil && d > 0 {
		return d
	}
	return 15 * time.Second
}()

// variants are the runs for each N: OPENMED_SCALE_BAKE=both (the default:
// without the bake guard, then with it), off or on.
func variants(t *testing.T) []bool {
	switch v := os.Getenv("OPENMED_SCALE_BAKE"); v {
	case "", "both":
		return []bool{false, true}
	case "off":
		return []bool{false}
	case "on":
		return []bool{true}
	default:
		t.Fatalf("OPENMED_SCALE_BAKE=%q: want both, off or on", v)
		return nil
	}
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

// TestScale runs the benchmark for each N and prints one table per N, then
// the ratios between the smallest and the largest.
func TestScale(t *testing.T) {
	ctrllog.SetLogger(logr.Discard())
	bin, err := localrun.BuildOperator(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var results []result
	for _, n := range sizes(t) {
		var plain result
		for _, bake := range variants(t) {
			r := run(t, bin, n, bake)
			fmt.Print(r.table())
			for _, p := range []struct {
				name   string
				calls  phaseCalls
				want   map[string]int
				noPods int
			}{{"first rollout", r.rollout, firstRolloutCalls, r.noPods[v1]}, {"upgrade", r.upgrade, upgradeCalls, r.noPods[v2]}} {
				want := map[string]int{}
				for k, c := range p.want {
					want[k] = c * n
				}
				if bake {
					for k, c := range bakeCalls {
						want[k] += c * n
					}
					// A model whose Deployment the operator saw rolled out
					// before its pod store saw the Ready pods writes
					// Baking without pods first: one status write more,
					// counted from what the model watch saw.
					want["patch openmedmodels/status"] += p.noPods
				}
				if !maps.Equal(p.calls.byKind, want) {
					t.Errorf("N=%d bake=%t %s: calls %v, want exactly %v%s", n, bake, p.name, p.calls.byKind, want, p.calls.busiest())
				}
			}
			for i, w := range r.steady {
				if w.total() != 0 {
					t.Errorf("N=%d bake=%t steady window %d: %d calls: %v", n, bake, i+1, w.total(), w.byKind)
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
						t.Errorf("N=%d bake=%t steady window %d: %d × %s (watches opened before it: %v)", n, bake, i+1, c, kind, r.watchesBefore[i])
					}
				}
			}
			// The bake run baked: every model was seen Baking (and its
			// calls above hold the Baking write and event); the run without
			// the guard none. The pods are watched in both (the pod store
			// also tells an unschedulable rollout).
			if want := map[bool]int{true: n}[bake]; r.baked != want {
				t.Errorf("N=%d bake=%t: %d models seen Baking, want %d", n, bake, r.baked, want)
			}
			if !bake {
				plain = r
				results = append(results, r)
				continue
			}
			if plain.n == 0 {
				continue
			}
			fmt.Printf("\nN=%d, two pods per Deployment: peak RSS %.1f MiB with the bake guard (its pod store), %.1f MiB without: %+.1f%%\n",
				n, float64(r.peakRSS)/(1<<20), float64(plain.peakRSS)/(1<<20), 100*(float64(r.peakRSS)/float64(plain.peakRSS)-1))
		}
	}
	if len(results) > 1 {
		a, b := results[0], results[len(results)-1]
		fmt.Printf("\nN=%d vs N=%d: CPU per model, rollout %.2fx, upgrade %.2fx; RSS growth %.1f KiB per model\n",
			b.n, a.n, b.cpuRollout/a.cpuRollout, b.cpuUpgrade/a.cpuUpgrade,
			float64(b.peakRSS-a.peakRSS)/1024/float64(b.n-a.n))
	}
}

// result is what one run measured.
type result struct {
	n                      int
	bake                   bool
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
	syncedRSS, peakRSS     int64   // bytes: after the caches synced N Deployments, and at the end
	metricsBytes           int
	samplesPerModel        float64
	// writesAs are the identities the writes to Deployments and ConfigMaps
	// were made as ("" for the operator's own), with their counts.
	writesAs map[string]int
}

func (r result) table() string {
	var b strings.Builder
	guard := "without the bake guard"
	if r.bake {
		guard = fmt.Sprintf("with the bake guard, bakeSeconds %d", scaleBake)
	}
	fmt.Fprintf(&b, "\n=== scale N=%d, two pods per Deployment, %s (operator process, real kube-apiserver; calls counted by the API server's audit log)\n", r.n, guard)
	fmt.Fprintf(&b, "%-34s %s\n", "first rollout, calls per model", r.rollout.describe(r.n))
	fmt.Fprintf(&b, "%-34s %s\n", "upgrade, calls per model", r.upgrade.describe(r.n))
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
	fmt.Fprintf(&b, "%-34s %d of %d models seen Baking (before their pods: %v); pods read by %v over the whole process\n", "the bake", r.baked, r.n, r.noPods, r.podReads)
	informer := r.informer.describe(1) + " (per operator, not per model)"
	if r.informer.total() == 0 {
		informer = "0 (no re-list, no new watch after the caches synced; leader election off)"
	}
	fmt.Fprintf(&b, "%-34s %s\n", "list/watch and leases, whole run", informer)
	fmt.Fprintf(&b, "%-34s %s\n", "create -> all Ready", r.createReady.Round(time.Millisecond))
	fmt.Fprintf(&b, "%-34s %s\n", "upgrade -> all Ready", r.upgradeRdy.Round(time.Millisecond))
	med, p95 := percentile(r.reaction, 50), percentile(r.reaction, 95)
	fmt.Fprintf(&b, "%-34s median %s, p95 %s (%d models, one at a time)\n", "reaction, Deployment ready -> Ready", med.Round(100*time.Microsecond), p95.Round(100*time.Microsecond), len(r.reaction))
	med, p95 = percentile(r.waveReaction, 50), percentile(r.waveReaction, 95)
	fmt.Fprintf(&b, "%-34s median %s, p95 %s (queued behind the wave)\n", "  the same during the upgrade wave", med.Round(time.Millisecond), p95.Round(time.Millisecond))
	fmt.Fprintf(&b, "%-34s rollout %.2f ms, upgrade %.2f ms\n", "operator CPU per model", r.cpuRollout*1000, r.cpuUpgrade*1000)
	fmt.Fprintf(&b, "%-34s %.1f MiB (%.1f MiB once the caches held the N Deployments, before any model)\n", "operator peak RSS",
		float64(r.peakRSS)/(1<<20), float64(r.syncedRSS)/(1<<20))
	fmt.Fprintf(&b, "%-34s %d bytes, %.2f samples per model\n", "/metrics", r.metricsBytes, r.samplesPerModel)
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
	return fmt.Sprintf("%.2f (%s)", p.perModel(n), strings.Join(parts, ", "))
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
	m, i := harness.PerModel(in)
	return phaseCalls{byKind: m, reqs: in}, phaseCalls{byKind: i}
}

// run is one benchmark at size n.
func run(t *testing.T, bin string, n int, bake bool) result {
	ctx := context.Background()
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

	sc := harness.NewStandIn(t, c, namespace, workers, 0).WithPods()
	defer sc.Stop()
	parallel(t, n, func(i int) error {
		return client.WithFieldOwner(c, "helm").Create(ctx, deployment(i))
	})
	testenv.Eventually(t, 10*time.Minute, "the stand-in reported every Deployment", func() (bool, string) {
		return sc.Reported() >= n, fmt.Sprintf("%d of %d", sc.Reported(), n)
	})

	r := result{n: n, bake: bake}
	op, err := localrun.StartOperator(localrun.OperatorConfig{Binary: bin, Kubeconfig: cl.Kubeconfig, LogPath: filepath.Join(dir, "operator.log"),
		Args: append([]string{"--log-level=error"}, cl.OperatorArgs...)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = op.Stop(10 * time.Second) }()
	readyCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := op.WaitReady(readyCtx); err != nil {
		t.Fatal(err)
	}
	baseSamples, _ := scrape(t, op.MetricsURL())
	r.syncedRSS = harness.PeakRSS(t, op.PID())
	mw := newModelWatch(t, c)
	defer mw.stop()
	started := time.Now()
	// First rollout.
	cpu0 := harness.CPUSeconds(t, op.PID())
	t0 := time.Now()
	parallel(t, n, func(i int) error {
		m := model(i)
		m.Spec.ServiceAccountName = sa
		if bake {
			m.Spec.RolloutStrategy.BakeSeconds = ptr.To[int32](scaleBake)
		}
		return c.Create(ctx, m)
	})
	mw.waitReady(t, n, v1)
	r.createReady = time.Since(t0)
	settle()
	t1 := time.Now()
	r.cpuRollout = (harness.CPUSeconds(t, op.PID()) - cpu0) / float64(n)
	r.rollout, _ = calls(t, cl, t0, t1)

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
	}

	// Upgrade.
	cpu1 := harness.CPUSeconds(t, op.PID())
	t2 := time.Now()
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
	r.cpuUpgrade = (harness.CPUSeconds(t, op.PID()) - cpu1) / float64(n)
	r.upgrade, _ = calls(t, cl, t2, t3)
	_, r.informer = calls(t, cl, started, t3)
	r.podReads = map[string]int{}
	for _, q := range cl.Requests(t, time.Time{}, t3) {
		if q.Resource == "pods" && (q.Verb == "list" || q.Verb == "watch") {
			r.podReads[q.Kind()]++
		}
	}
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
		saveHeapProfile(t, strings.TrimSuffix(op.MetricsURL(), "/metrics"), filepath.Join(dir, fmt.Sprintf("heap-%d-bake-%t.pprof", n, bake)))
	}
	samples, size := scrape(t, op.MetricsURL())
	r.metricsBytes = size
	r.samplesPerModel = float64(samples-baseSamples) / float64(n)
	r.peakRSS = harness.PeakRSS(t, op.PID())
	return r
}

// settle lets the last events of a phase land: they follow the status
// write the phase waits for.
func settle() { time.Sleep(5 * time.Second) }

func name(i int) string { return fmt.Sprintf("model-%05d", i) }

func deployment(i int) *appsv1.Deployment {
	labels := map[string]string{"app": name(i)}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name(i), Labels: map[string]string{"helm.sh/chart": "openmed-service-0.3.0"}},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "openmed-service", Image: "ghcr.io/maziyarpanahi/openmed:2.2.0",
					EnvFrom:        []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: name(i) + "-config"}}}},
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromInt32(8080)}}},
				}}},
			},
		},
	}
}

func model(i int) *v1alpha1.OpenMedModel {
	return &v1alpha1.OpenMedModel{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name(i)},
		Spec: v1alpha1.OpenMedModelSpec{
			Family: "PII", Version: v1, Tier: v1alpha1.TierSmall, Replicas: ptr.To[int32](2),
			RolloutStrategy: v1alpha1.RolloutStrategy{Type: v1alpha1.RollingUpdateRolloutStrategyType},
		},
	}
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
	done   chan struct{}
}

func newModelWatch(t *testing.T, c client.WithWatch) *modelWatch {
	w, err := c.Watch(context.Background(), &v1alpha1.OpenMedModelList{}, client.InNamespace(namespace))
	if err != nil {
		t.Fatal(err)
	}
	mw := &modelWatch{w: w, ready: map[string]map[string]time.Time{}, becameReady: map[string]time.Time{}, wasReady: map[string]bool{},
		baking: map[string]bool{}, noPods: map[string]map[string]bool{}, done: make(chan struct{})}
	go func() {
		defer close(mw.done)
		for ev := range w.ResultChan() {
			m, ok := ev.Object.(*v1alpha1.OpenMedModel)
			if !ok {
				continue
			}
			now := time.Now()
			ready := apimeta.IsStatusConditionTrue(m.Status.Conditions, v1alpha1.ReadyCondition) && m.Status.ObservedGeneration == m.Generation
			mw.mu.Lock()
			if c := apimeta.FindStatusCondition(m.Status.Conditions, v1alpha1.ReconcilingCondition); c != nil && c.Status == metav1.ConditionTrue && c.Reason == v1alpha1.BakingReason {
				mw.baking[m.Name] = true
				if c.Message == rollout.MsgBakingNoPods {
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
func saveHeapProfile(t *testing.T, base, path string) {
	t.Helper()
	resp, err := http.Get(base + "/debug/pprof/heap?gc=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	fmt.Println("heap profile:", path)
}

// scrape reads /metrics and returns its number of samples and size.
func scrape(t *testing.T, url string) (samples, size int) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if line != "" && !strings.HasPrefix(line, "#") {
			samples++
		}
	}
	return samples, len(data)
}
