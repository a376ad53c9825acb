// Package chaos_test is the fault suite: the operator process against a real
// kube-apiserver through a loopback TLS proxy that injects API faults, or
// killed with SIGKILL again and again, or handed over between two replicas
// mid-rollout. The API server's audit log is the oracle for what the
// operator did; a watch records every pod template each Deployment had; the
// status of every model the API server stores is judged (a watch).
//
//	make chaos                 # 12 models, 3 fault seeds, 10 kills, a handover
//	go test ./e2e/chaos -v     # make test: 4 models, one seed, 3 kills, a handover
package chaos_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions/check"
	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/openmed/openmed-operator/cmd/openmed-operator/app"
	"github.com/openmed/openmed-operator/e2e/internal/harness"
	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/localrun"
	"github.com/openmed/openmed-operator/pkg/rollout"
)

const (
	namespace = "chaos"
	v1        = "OpenMed/OpenMed-PII-SuperClinical-Small-44M-v1"
	v2        = "OpenMed/OpenMed-PII-SuperClinical-Small-44M-v2"
	// broken never becomes available: the stand-in reports its rollout
	// past the progress deadline.
	broken = "OpenMed/OpenMed-PII-SuperClinical-Small-44M-broken"
	// v3 bakes; crashes bakes and a container of its pods restarts: the
	// bake fails.
	v3      = "OpenMed/OpenMed-PII-SuperClinical-Small-44M-v3"
	crashes = "OpenMed/OpenMed-PII-SuperClinical-Small-44M-crashes"
	// chaosBake is the bakeSeconds of v3 and crashes.
	chaosBake = 3
	// convergeWithin bounds every step of the scenario.
	convergeWithin = 4 * time.Minute
)

// suite is how much of the suite runs: OPENMED_CHAOS=full for make chaos.
type suite struct {
	models int
	seeds  []uint64
	kills  int
	// delays are the stand-in Deployment controller's timings each seed
	// runs with: 0 reports a new generation at once (the real controller
	// takes milliseconds), otherwise after a random wait up to the delay.
	delays []time.Duration
}

// standInDelay is the stand-in's slow timing.
const standInDelay = 400 * time.Millisecond

func config() suite {
	if os.Getenv("OPENMED_CHAOS") == "full" {
		return suite{models: 12, seeds: []uint64{1, 2, 3}, kills: 10, delays: []time.Duration{0, standInDelay}}
	}
	return suite{models: 4, seeds: []uint64{1}, kills: 3, delays: []time.Duration{0}}
}

// faultMix is the mix: 20% 429/503/500 (a third of the 500s after
// the request took effect), 5% resets, 0-200 ms latency, watches cut every
// 5-15 s.
func faultMix(seed uint64) harness.Faults {
	return harness.Faults{Seed: seed, TooMany: 0.05, Unavailable: 0.07, Internal: 0.08, InternalAfter: 1.0 / 3,
		ResetBefore: 0.025, ResetAfter: 0.025, MaxLatency: 200 * time.Millisecond,
		WatchMin: 5 * time.Second, WatchMax: 15 * time.Second}
}

func TestChaos(t *testing.T) {
	ctrllog.SetLogger(logr.Discard())
	cfg := config()
	bin, err := localrun.BuildOperator(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, seed := range cfg.seeds {
		for _, delay := range cfg.delays {
			t.Run(fmt.Sprintf("faults/seed=%d/stand-in=%s", seed, timing(delay)), func(t *testing.T) {
				f := faultMix(seed)
				run(t, bin, runConfig{models: cfg.models, faults: &f, seed: seed, delay: delay})
			})
		}
	}
	t.Run(fmt.Sprintf("kills=%d", cfg.kills), func(t *testing.T) {
		run(t, bin, runConfig{models: cfg.models, kills: cfg.kills, seed: 7})
	})
	t.Run("handover", func(t *testing.T) {
		run(t, bin, runConfig{models: cfg.models, replicas: 2, handover: true, seed: 11, delay: standInDelay})
	})
}

func timing(delay time.Duration) string {
	if delay == 0 {
		return "at-once"
	}
	return "up-to-" + delay.String()
}

type runConfig struct {
	models   int
	faults   *harness.Faults
	kills    int
	replicas int
	handover bool
	seed     uint64
	delay    time.Duration
}

// step is one change of the scenario and the state every model must reach.
type step struct {
	name string
	act  func(t *testing.T, r *runner)
	done func(m *v1alpha1.OpenMedModel, i int) bool
	// rolls are the pod-template changes this step causes, per Deployment.
	rolls func(i int) map[string]int
	// gone: the step deletes the models it names; their Deployments must
	// end up released.
	gone bool
	// released names, per model, a Deployment the step must leave with
	// nothing of the operator on it (the previous target of a retarget).
	released func(i int) string
	models   func(i int) bool
	// uncounted: how often the step rolls a Deployment depends on which
	// pass saw which edit; the pod-template changes are counted up to it.
	uncounted bool
}

func run(t *testing.T, bin string, cfg runConfig) {
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
	sc := harness.NewStandIn(t, c, namespace, 4, cfg.delay).WithPods()
	defer sc.Stop()
	sc.Fail(manifestHash(t, broken))
	sc.Crash(manifestHash(t, crashes))
	for i := 0; i < cfg.models; i++ {
		for _, name := range []string{name(i), retargetName(i)} {
			d := deployment(i)
			d.Name = name
			if err := client.WithFieldOwner(c, "helm").Create(ctx, d); err != nil {
				t.Fatal(err)
			}
		}
	}
	rec := newTemplateRecorder(t, c)
	defer rec.stop()

	kubeconfig := cl.Kubeconfig
	var proxy *harness.FaultProxy
	if cfg.faults != nil {
		proxy = harness.StartProxy(t, cl.KubeconfigData, *cfg.faults)
		defer proxy.Close()
		kubeconfig = filepath.Join(dir, "proxy.kubeconfig")
		if err := proxy.Kubeconfig(kubeconfig); err != nil {
			t.Fatal(err)
		}
	}
	// The replicas' metrics endpoints (the leader, and goroutines on a
	// failure) are read as Prometheus and a person profiling would.
	scraper, err := localrun.ServiceAccountScraper(ctx, c, "default", "scraper", localrun.MetricsReaderRole, localrun.ProfilerRole)
	if err != nil {
		t.Fatal(err)
	}
	r := &runner{t: t, bin: bin, dir: dir, kubeconfig: kubeconfig, c: c, rnd: rand.New(rand.NewPCG(cfg.seed, 99)), ended: map[*localrun.Operator]bool{},
		serviceAccount: sa, args: cl.OperatorArgs, leaseNamespace: cl.LeaseNamespace(), scraper: scraper}
	defer r.stopAll()
	for i := 0; i < max(1, cfg.replicas); i++ {
		r.start()
	}
	samp := newSampler(t, c)
	defer samp.stop()

	half := func(i int) bool { return i%2 == 1 }
	other := func(i int) bool { return i%2 == 0 }
	all := func(int) bool { return true }
	steps := []step{
		{name: "first rollout", models: all, rolls: one,
			act:  func(t *testing.T, r *runner) { r.createModels(cfg.models) },
			done: func(m *v1alpha1.OpenMedModel, _ int) bool { return ready(m, v1) }},
		{name: "upgrade", models: all, rolls: one,
			act:  func(t *testing.T, r *runner) { r.setVersions(cfg.models, v2) },
			done: func(m *v1alpha1.OpenMedModel, _ int) bool { return ready(m, v2) }},
		{name: "failing version, automatic rollback", models: all, rolls: times(2),
			act:  func(t *testing.T, r *runner) { r.setVersions(cfg.models, broken) },
			done: func(m *v1alpha1.OpenMedModel, _ int) bool { return heldAt(m, v2) }},
		{name: "revert", models: all, rolls: times(0),
			act:  func(t *testing.T, r *runner) { r.setVersions(cfg.models, v2) },
			done: func(m *v1alpha1.OpenMedModel, _ int) bool { return ready(m, v2) }},
		{name: "manual rollback", models: all, rolls: one,
			act:  func(t *testing.T, r *runner) { r.annotate(cfg.models, v1) },
			done: func(m *v1alpha1.OpenMedModel, _ int) bool { return heldAt(m, v1) }},
		{name: "release the manual rollback", models: all, rolls: one,
			act:  func(t *testing.T, r *runner) { r.annotate(cfg.models, "") },
			done: func(m *v1alpha1.OpenMedModel, _ int) bool { return ready(m, v2) }},
		// The bake guard: v3 bakes and becomes the retained version; the
		// crashing version's pods restart during the bake, which rolls it
		// back to v3; its revert rolls nothing.
		{name: "bake", models: all, rolls: one,
			act: func(t *testing.T, r *runner) { r.setBakedVersions(cfg.models, v3) },
			done: func(m *v1alpha1.OpenMedModel, _ int) bool {
				return ready(m, v3) && len(m.Status.History) > 0 && m.Status.History[0].Version == v3
			}},
		{name: "failed bake, automatic rollback", models: all, rolls: times(2),
			act:  func(t *testing.T, r *runner) { r.setBakedVersions(cfg.models, crashes) },
			done: func(m *v1alpha1.OpenMedModel, _ int) bool { return heldAt(m, v3) }},
		{name: "revert the failed bake", models: all, rolls: times(0),
			act:  func(t *testing.T, r *runner) { r.setBakedVersions(cfg.models, v3) },
			done: func(m *v1alpha1.OpenMedModel, _ int) bool { return ready(m, v3) }},
		// The even models move to their second Deployment: the new one
		// gets the pointer (one roll), the old one is released (one roll).
		{name: "retarget half", models: all, released: func(i int) string { return ifThen(other(i), name(i)) },
			rolls: func(i int) map[string]int {
				if !other(i) {
					return nil
				}
				return map[string]int{name(i): 1, retargetName(i): 1}
			},
			act: func(t *testing.T, r *runner) { r.retarget(cfg.models, other) },
			done: func(m *v1alpha1.OpenMedModel, i int) bool {
				return ready(m, v3) && (!other(i) || m.Status.TargetName == retargetName(i))
			}},
		{name: "delete half", models: half, rolls: func(i int) map[string]int { return map[string]int{name(i): b2i(half(i))} }, gone: true,
			act:  func(t *testing.T, r *runner) { r.deleteModels(cfg.models, half) },
			done: func(m *v1alpha1.OpenMedModel, i int) bool { return ready(m, v3) }},
		// The rest move back to their first Deployment and, before a pass
		// can settle that, to the second again, and are deleted at once:
		// every Deployment either ever pointed at must be released
		// (status.claimedTargets), whatever pass saw which edit and
		// whichever status write the faults cost.
		{name: "retarget twice and delete", models: all, gone: true, uncounted: true,
			rolls: func(int) map[string]int { return nil },
			act: func(t *testing.T, r *runner) {
				r.retargetTo(cfg.models, other, name)
				r.retargetTo(cfg.models, other, retargetName)
				r.deleteModels(cfg.models, other)
			},
			done: func(*v1alpha1.OpenMedModel, int) bool { return false }},
	}

	stopChurn := make(chan struct{})
	churnDone := make(chan struct{})
	handedOver := make(chan struct{})
	go func() {
		defer close(churnDone)
		switch {
		case cfg.kills > 0:
			r.killer(cfg.kills, stopChurn)
		case cfg.handover:
			r.handoverOnce(stopChurn, handedOver)
		default:
			<-stopChurn
		}
	}()

	want := map[string]int{}
	var took []string
	var counted map[string]int // pod templates per Deployment before an uncounted step
	for _, s := range steps {
		start := time.Now()
		if s.uncounted && counted == nil {
			counted = map[string]int{}
			for i := 0; i < cfg.models; i++ {
				for _, d := range []string{name(i), retargetName(i)} {
					counted[d] = len(rec.templates(d))
				}
			}
		}
		replicas := r.replicas(cfg.models)
		s.act(t, r)
		for i := 0; i < cfg.models; i++ {
			for d, n := range s.rolls(i) {
				want[d] += n
			}
		}
		r.waitConverged(s, cfg.models, replicas)
		took = append(took, fmt.Sprintf("%s %s", s.name, time.Since(start).Round(100*time.Millisecond)))
		if s.name == "manual rollback" && cfg.handover {
			// The handover happens during the manual rollback's rollout.
			select {
			case <-handedOver:
			case <-time.After(time.Minute):
				t.Fatal("no handover: no stored version of a model showed the manual rollback's rollout, or no replica led")
			}
		}
	}
	close(stopChurn)
	<-churnDone
	if proxy != nil {
		proxy.SetEnabled(false)
	}
	quietFrom := time.Now().Add(3 * time.Second)
	time.Sleep(13 * time.Second)

	// Invariants.
	for i := 0; i < cfg.models; i++ {
		for _, d := range []string{name(i), retargetName(i)} {
			seq := rec.templates(d)
			got := len(seq) - 1
			if n, ok := counted[d]; ok {
				got = n - 1
			}
			if got != want[d] {
				t.Errorf("%s: %d pod-template changes, the scenario needs %d: %v", d, got, want[d], seq)
			}
			for _, bad := range []string{broken, crashes} {
				if n := countHash(seq, manifestHash(t, bad)); n > 1 {
					t.Errorf("%s: the failed version %s was rolled out %d times: %v", d, bad, n, seq)
				}
			}
		}
	}
	if v := samp.violations(); len(v) > 0 {
		t.Errorf("%d contradictory status samples, first: %v", len(v), v[:min(5, len(v))])
	}
	reqs := cl.Requests(t, time.Time{}, time.Now())
	checkAudit(t, reqs)
	for _, q := range reqs {
		if q.At.After(quietFrom) && q.Mutating() && !leaderElectionWrite(q, r.leaseNamespace) {
			t.Errorf("a write once settled: %s %s/%s at %s", q.Kind(), q.Namespace, q.Name, q.At.Format(time.RFC3339Nano))
		}
	}
	checkOwnedFields(t, c, cfg.models)
	if proxy != nil {
		t.Logf("faults injected: %v", proxy.Counts())
	}
	r.mu.Lock()
	if r.kills != cfg.kills {
		t.Errorf("%d SIGKILLs, the run asks for %d", r.kills, cfg.kills)
	}
	r.mu.Unlock()
	t.Logf("converged: %s; operator restarts %d; SIGKILLs %d; status samples %d", strings.Join(took, ", "), r.restarts, r.kills, samp.count())
	r.mu.Lock()
	if len(r.selfExits) > 0 {
		t.Logf("%d operator exits not made by the test (restarted): %v", len(r.selfExits), r.selfExits)
	}
	r.mu.Unlock()
}

// leaderElectionWrite reports a write of the leader election: the Lease, and
// the LeaderElection event a replica records on it when it takes the lead.
// A replica that lost the lead to the last faults exits and, restarted,
// takes it again once the run is quiet; that is no write of a model's.
func leaderElectionWrite(q harness.Request, leaseNamespace string) bool {
	if q.Namespace != leaseNamespace {
		return false
	}
	// A shard's Lease is named after LeaderElectionID too.
	return strings.HasPrefix(q.Name, app.LeaderElectionID) &&
		(q.Resource == "leases" || q.Resource == "events" && q.Verb == "create")
}

// one is a step that rolls each model's current Deployment once.
func one(i int) map[string]int { return times(1)(i) }

// times is a step that rolls each model's current Deployment n times.
func times(n int) func(i int) map[string]int {
	return func(i int) map[string]int { return map[string]int{currentTarget(i): n} }
}

func ifThen(cond bool, s string) string {
	if cond {
		return s
	}
	return ""
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func name(i int) string { return fmt.Sprintf("model-%02d", i) }

// retargetName is the second Deployment of model i, which the retarget
// step moves the even models to.
func retargetName(i int) string { return name(i) + "-b" }

// currentTarget is the Deployment model i points at before the retarget
// step (the only steps after it are the retarget and the deletion, which
// name their Deployments themselves).
func currentTarget(i int) string { return name(i) }

func deployment(i int) *appsv1.Deployment {
	labels := map[string]string{"app": name(i)}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name(i)},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "openmed-service", Image: "ghcr.io/maziyarpanahi/openmed:2.2.0",
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

func manifestHash(t *testing.T, version string) string {
	m := model(0)
	m.Spec.Version = version
	m.Default()
	n, err := rollout.Normalize(m)
	if err != nil {
		t.Fatal(err)
	}
	return rollout.ManifestHash(n)
}

// ready: the model serves version, Ready.
func ready(m *v1alpha1.OpenMedModel, version string) bool {
	return m.Status.ObservedGeneration == m.Generation && m.Status.Phase == v1alpha1.PhaseReady &&
		m.Status.ActiveVersion == version && apimeta.IsStatusConditionTrue(m.Status.Conditions, v1alpha1.ReadyCondition)
}

// heldAt: a rollback holds the model at version, restored.
func heldAt(m *v1alpha1.OpenMedModel, version string) bool {
	return m.Status.ObservedGeneration == m.Generation && m.Status.Phase == v1alpha1.PhaseRolledBack &&
		m.Status.ActiveVersion == version && apimeta.IsStatusConditionTrue(m.Status.Conditions, v1alpha1.RolledBackCondition)
}

func countHash(seq []string, hash string) int {
	n := 0
	for _, s := range seq {
		if strings.HasPrefix(s, hash) {
			n++
		}
	}
	return n
}

// runner runs the operator processes and the scenario's writes.
type runner struct {
	t          *testing.T
	bin, dir   string
	kubeconfig string
	c          client.WithWatch
	rnd        *rand.Rand
	// serviceAccount is what the models name (the lockdown's tenant), args
	// the flags the cluster asks for, leaseNamespace where the Lease is.
	serviceAccount string
	args           []string
	leaseNamespace string
	scraper        *localrun.Scraper

	mu       sync.Mutex
	ops      []*localrun.Operator
	n        int
	restarts int
	kills    int
	// ended are the replicas the runner stopped or killed itself; any
	// other that exits exited by itself (a lost leader election under the
	// injected faults ends the process, as controller-runtime does) and is
	// restarted as the kubelet restarts a pod's container.
	ended     map[*localrun.Operator]bool
	selfExits []string
	stopping  bool
	wg        sync.WaitGroup
}

// start launches one operator replica with leader election and a short
// lease, as a Deployment with replicas would run it.
func (r *runner) start() *localrun.Operator {
	op, err := r.launch()
	if err != nil {
		r.t.Fatal(err)
	}
	return op
}

// launch starts a replica, waits until it is ready and watches for its
// exit.
func (r *runner) launch() (*localrun.Operator, error) {
	r.mu.Lock()
	r.n++
	n := r.n
	r.mu.Unlock()
	op, err := localrun.StartOperator(localrun.OperatorConfig{
		Binary: r.bin, Kubeconfig: r.kubeconfig, LogPath: filepath.Join(r.dir, fmt.Sprintf("operator-%d.log", n)),
		Args: append([]string{"--log-level=info", "--log-encoding=console", "--enable-leader-election",
			"--leader-election-lease-duration=4s", "--leader-election-renew-deadline=3s", "--leader-election-retry-period=500ms",
			"--enable-pprof"}, r.args...),
		Env:     []string{"RUNTIME_NAMESPACE=" + r.leaseNamespace},
		Scraper: r.scraper,
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := op.WaitReady(ctx); err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.ops = append(r.ops, op)
	stopping := r.stopping
	if !stopping {
		r.wg.Add(1)
	}
	r.mu.Unlock()
	if stopping {
		// stopAll has taken its list of replicas already.
		_ = op.Stop(5 * time.Second)
		return op, nil
	}
	go r.supervise(op, n)
	return op, nil
}

// supervise restarts op when it exits by itself, and says why it exited.
func (r *runner) supervise(op *localrun.Operator, n int) {
	defer r.wg.Done()
	<-op.Done()
	r.mu.Lock()
	if r.ended[op] || r.stopping {
		r.mu.Unlock()
		return
	}
	// The one exit the run causes without ending the process itself: a
	// lease not renewed in time (the faults, or a machine too busy for the
	// 3 s renew deadline) ends the process, as controller-runtime does.
	// Any other exit (a panic, a fatal error) is the operator's failure.
	cause, explained := lastLine(op.LogPath(), "leader election lost")
	why := "operator-" + strconv.Itoa(n) + " exited by itself: " + cause
	r.selfExits = append(r.selfExits, why)
	r.mu.Unlock()
	if !explained {
		r.t.Errorf("operator-%d exited by itself and its log does not show the cause the run injects (leader election lost); its log ends:\n%s",
			n, localrun.Tail(op.LogPath(), 30))
	}
	r.t.Log(why + "; restarting it, as the kubelet would")
	if _, err := r.launch(); err != nil {
		r.t.Errorf("restarting after %s: %v", why, err)
	}
}

// end marks op as stopped by the runner.
func (r *runner) end(op *localrun.Operator) {
	r.mu.Lock()
	r.ended[op] = true
	r.mu.Unlock()
}

func (r *runner) stopAll() {
	r.mu.Lock()
	r.stopping = true
	ops := r.ops
	r.mu.Unlock()
	for _, op := range ops {
		_ = op.Stop(5 * time.Second)
	}
	r.wg.Wait()
}

// lastLine is the last line of the file at path that contains want and
// true, or the file's last line (or why it could not be read) and false.
func lastLine(path, want string) (string, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error(), false
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], want) {
			return lines[i], true
		}
	}
	return lines[len(lines)-1], false
}

// killer SIGKILLs the running operator kills times at random moments and
// starts a new one each time. It makes all its kills, whether or not the
// scenario has ended (the run checks their number), then waits for stop.
func (r *runner) killer(kills int, stop <-chan struct{}) {
	for k := 0; k < kills; k++ {
		time.Sleep(time.Duration(1000+r.rnd.IntN(3000)) * time.Millisecond)
		r.mu.Lock()
		op := r.ops[len(r.ops)-1]
		r.ended[op] = true
		r.mu.Unlock()
		_ = op.Kill()
		r.mu.Lock()
		r.kills++
		r.restarts++
		r.mu.Unlock()
		r.start()
	}
	<-stop
}

// handoverOnce stops the leader gracefully as soon as a stored version of
// a model shows the manual rollback's rollout started (a watch: a rollout
// shorter than any poll is not missed); the other replica takes over. It
// reports on handedOver.
func (r *runner) handoverOnce(stop <-chan struct{}, handedOver chan<- struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	rolling := func(m *v1alpha1.OpenMedModel) bool {
		return m.Annotations[v1alpha1.RollbackToAnnotation] != "" && m.Status.Phase == v1alpha1.PhaseRolledBack &&
			!apimeta.IsStatusConditionTrue(m.Status.Conditions, v1alpha1.RolledBackCondition)
	}
	w, err := r.c.Watch(ctx, &v1alpha1.OpenMedModelList{}, client.InNamespace(namespace))
	if err != nil {
		r.t.Errorf("handover: watch the models: %v", err)
		return
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		m, ok := ev.Object.(*v1alpha1.OpenMedModel)
		if !ok || !rolling(m) {
			continue
		}
		var leader *localrun.Operator
		for leader == nil && ctx.Err() == nil {
			if leader = r.leader(); leader == nil {
				time.Sleep(50 * time.Millisecond)
			}
		}
		if leader == nil {
			return
		}
		r.end(leader)
		_ = leader.Signal(syscall.SIGTERM)
		<-leader.Done()
		r.mu.Lock()
		r.restarts++
		r.mu.Unlock()
		r.start()
		close(handedOver)
		return
	}
}

// leader is the replica whose /metrics says it leads.
func (r *runner) leader() *localrun.Operator {
	r.mu.Lock()
	ops := append([]*localrun.Operator(nil), r.ops...)
	r.mu.Unlock()
	for _, op := range ops {
		select {
		case <-op.Done():
			continue
		default:
		}
		if leads(op) {
			return op
		}
	}
	return nil
}

func (r *runner) createModels(n int) {
	for i := 0; i < n; i++ {
		m := model(i)
		m.Spec.ServiceAccountName = r.serviceAccount
		if err := r.c.Create(context.Background(), m); err != nil {
			r.t.Fatal(err)
		}
	}
}

func (r *runner) edit(n int, only func(int) bool, mutate func(*v1alpha1.OpenMedModel)) {
	for i := 0; i < n; i++ {
		if only != nil && !only(i) {
			continue
		}
		m := &v1alpha1.OpenMedModel{}
		if err := r.c.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name(i)}, m); err != nil {
			r.t.Fatal(err)
		}
		base := m.DeepCopy()
		mutate(m)
		if err := r.c.Patch(context.Background(), m, client.MergeFrom(base)); err != nil {
			r.t.Fatal(err)
		}
	}
}

func (r *runner) setVersions(n int, version string) {
	r.edit(n, nil, func(m *v1alpha1.OpenMedModel) { m.Spec.Version = version })
}

// setBakedVersions sets version with a bake of chaosBake seconds.
func (r *runner) setBakedVersions(n int, version string) {
	r.edit(n, nil, func(m *v1alpha1.OpenMedModel) {
		m.Spec.Version = version
		m.Spec.RolloutStrategy.BakeSeconds = ptr.To[int32](chaosBake)
	})
}

func (r *runner) annotate(n int, rollbackTo string) {
	r.edit(n, nil, func(m *v1alpha1.OpenMedModel) {
		if m.Annotations == nil {
			m.Annotations = map[string]string{}
		}
		if rollbackTo == "" {
			delete(m.Annotations, v1alpha1.RollbackToAnnotation)
			return
		}
		m.Annotations[v1alpha1.RollbackToAnnotation] = rollbackTo
	})
}

func (r *runner) deleteModels(n int, only func(int) bool) {
	for i := 0; i < n; i++ {
		if only(i) {
			if err := r.c.Delete(context.Background(), model(i)); err != nil {
				r.t.Fatal(err)
			}
		}
	}
}

// waitConverged waits until every model reached the step's state: deleted
// models gone, every Deployment the step releases with nothing of the
// operator left on it and the replicas it had before the step, the others
// done.
func (r *runner) waitConverged(s step, n int, replicas map[string]int32) {
	t := r.t
	deadline := time.Now().Add(convergeWithin)
	for {
		var pending []string
		for i := 0; i < n; i++ {
			m := &v1alpha1.OpenMedModel{}
			err := r.c.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name(i)}, m)
			switch {
			case s.gone && s.models(i):
				if err == nil {
					pending = append(pending, name(i)+" (not deleted)")
					break
				}
				// A deleted model leaves nothing of the operator on
				// either of its Deployments.
				for _, d := range []string{name(i), retargetName(i)} {
					if why := r.released(d, replicas[d]); why != "" {
						pending = append(pending, why)
					}
				}
			case err != nil:
				pending = append(pending, name(i)+" "+err.Error())
			case !s.done(m, i):
				pending = append(pending, fmt.Sprintf("%s (%s %s %v%s)", name(i), m.Status.Phase, m.Status.ActiveVersion, conds(m), r.target(m)))
			case s.released != nil && s.released(i) != "":
				if why := r.released(s.released(i), replicas[s.released(i)]); why != "" {
					pending = append(pending, why)
				}
			}
		}
		if len(pending) == 0 {
			return
		}
		if time.Now().After(deadline) {
			r.mu.Lock()
			exits := slices.Clone(r.selfExits)
			r.mu.Unlock()
			t.Fatalf("step %q did not converge in %s: %v; operator exits not made by the test: %v; the operators' logs and goroutines: %s",
				s.name, convergeWithin, pending, exits, r.keep())
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// released says what of the operator is still on the Deployment, or "": a
// managedFields entry of its field manager (any operation), the preload
// entry, an owner annotation, or other replicas than it had.
func (r *runner) released(deployment string, replicas int32) string {
	d := &appsv1.Deployment{}
	if err := r.c.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: deployment}, d); err != nil {
		return deployment + ": " + err.Error()
	}
	var left []string
	for _, e := range d.ManagedFields {
		if e.Manager == rollout.DefaultFieldManager {
			left = append(left, "managedFields entry "+string(e.Operation))
		}
	}
	if rollout.PreloadEnv(d, "openmed-service") != nil {
		left = append(left, "preload entry")
	}
	if d.Annotations[v1alpha1.ModelResourceAnnotation] != "" || d.Spec.Template.Annotations[v1alpha1.ModelResourceAnnotation] != "" {
		left = append(left, "owner annotation")
	}
	if _, ok := d.Spec.Template.Labels[v1alpha1.BakeLabel]; ok {
		left = append(left, "bake label")
	}
	if got := ptr.Deref(d.Spec.Replicas, 1); got != replicas {
		left = append(left, fmt.Sprintf("replicas %d, had %d", got, replicas))
	}
	if len(left) == 0 {
		return ""
	}
	return deployment + " not released (" + strings.Join(left, ", ") + ")"
}

// replicas are the replicas of every Deployment of the scenario now.
func (r *runner) replicas(n int) map[string]int32 {
	out := map[string]int32{}
	for i := 0; i < n; i++ {
		for _, name := range []string{name(i), retargetName(i)} {
			d := &appsv1.Deployment{}
			if err := r.c.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, d); err != nil {
				r.t.Fatal(err)
			}
			out[name] = ptr.Deref(d.Spec.Replicas, 1)
		}
	}
	return out
}

// retarget points the models only selects at their second Deployment.
func (r *runner) retarget(n int, only func(int) bool) {
	r.retargetTo(n, only, retargetName)
}

// retargetTo points the models only selects at the Deployment target names.
func (r *runner) retargetTo(n int, only func(int) bool, target func(int) string) {
	r.edit(n, only, func(m *v1alpha1.OpenMedModel) {
		m.Spec.TargetRef = &v1alpha1.TargetReference{Name: target(indexOf(m.Name)), ContainerName: "openmed-service"}
	})
}

func indexOf(model string) int {
	var i int
	_, _ = fmt.Sscanf(model, "model-%02d", &i)
	return i
}

// keep copies the operators' logs and the running ones' goroutines out of
// the test's directory, which goes with the test, and returns where.
func (r *runner) keep() string {
	dir, err := os.MkdirTemp("", "openmed-chaos-failure-")
	if err != nil {
		return err.Error()
	}
	r.mu.Lock()
	ops := slices.Clone(r.ops)
	r.mu.Unlock()
	for i, op := range ops {
		if b, err := os.ReadFile(op.LogPath()); err == nil {
			_ = os.WriteFile(filepath.Join(dir, filepath.Base(op.LogPath())), b, 0o644)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if b, err := op.Read(ctx, "/debug/pprof/goroutine?debug=2"); err == nil {
			_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("goroutines-%d.txt", i)), b, 0o644)
		}
		cancel()
	}
	return dir
}

// target says what the model's Deployment and pods show, for a step that
// did not converge: generations, replica counts, the Progressing reason,
// the bake's start and each pod of the model.
func (r *runner) target(m *v1alpha1.OpenMedModel) string {
	var b strings.Builder
	fmt.Fprintf(&b, "; model gen %d observed %d", m.Generation, m.Status.ObservedGeneration)
	if m.Status.BakeStartedAt != nil {
		fmt.Fprintf(&b, ", bake started %s", m.Status.BakeStartedAt.UTC().Format(time.TimeOnly))
	}
	d := &appsv1.Deployment{}
	if err := r.c.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: rollout.TargetName(m)}, d); err == nil {
		progressing := ""
		for _, c := range d.Status.Conditions {
			if c.Type == appsv1.DeploymentProgressing {
				progressing = c.Reason
			}
		}
		fmt.Fprintf(&b, "; deployment %s gen %d observed %d replicas %d updated %d ready %d available %d %s hash %.12s",
			d.Name, d.Generation, d.Status.ObservedGeneration, d.Status.Replicas, d.Status.UpdatedReplicas, d.Status.ReadyReplicas,
			d.Status.AvailableReplicas, progressing, d.Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation])
	}
	var pods corev1.PodList
	if err := r.c.List(context.Background(), &pods, client.InNamespace(namespace)); err == nil {
		for _, p := range pods.Items {
			if p.Annotations[v1alpha1.ModelResourceAnnotation] != namespace+"/"+m.Name {
				continue
			}
			ready := "?"
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady {
					ready = string(c.Status) + "@" + c.LastTransitionTime.UTC().Format(time.TimeOnly)
				}
			}
			fmt.Fprintf(&b, "; pod %s created %s ready %s bake-label %q deleting %t", p.Name, p.CreationTimestamp.UTC().Format(time.TimeOnly),
				ready, p.Labels[v1alpha1.BakeLabel], p.DeletionTimestamp != nil)
		}
	}
	fmt.Fprintf(&b, "; now %s", time.Now().UTC().Format(time.TimeOnly))
	return b.String()
}

func conds(m *v1alpha1.OpenMedModel) []string {
	var out []string
	for _, c := range m.Status.Conditions {
		out = append(out, c.Type+"="+string(c.Status)+"/"+c.Reason)
	}
	sort.Strings(out)
	return out
}

// templateRecorder watches the Deployments and keeps, per Deployment, every
// distinct pod template the operator's fields gave it, in order.
type templateRecorder struct {
	w    watch.Interface
	mu   sync.Mutex
	seqs map[string][]string
	done chan struct{}
}

func newTemplateRecorder(t *testing.T, c client.WithWatch) *templateRecorder {
	w, err := c.Watch(context.Background(), &appsv1.DeploymentList{}, client.InNamespace(namespace))
	if err != nil {
		t.Fatal(err)
	}
	rec := &templateRecorder{w: w, seqs: map[string][]string{}, done: make(chan struct{})}
	go func() {
		defer close(rec.done)
		for ev := range w.ResultChan() {
			d, ok := ev.Object.(*appsv1.Deployment)
			if !ok {
				continue
			}
			id := templateID(d)
			rec.mu.Lock()
			seq := rec.seqs[d.Name]
			if len(seq) == 0 || seq[len(seq)-1] != id {
				rec.seqs[d.Name] = append(seq, id)
			}
			rec.mu.Unlock()
		}
	}()
	return rec
}

// templateID is what of the pod template the operator writes: the manifest
// hash, the pointer and the owner. Other fields never change in the suite.
func templateID(d *appsv1.Deployment) string {
	cm := ""
	if e := rollout.PreloadEnv(d, "openmed-service"); e != nil && e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil {
		cm = e.ValueFrom.ConfigMapKeyRef.Name
	}
	a := d.Spec.Template.Annotations
	return a[v1alpha1.ManifestHashAnnotation] + "|" + cm + "|" + a[v1alpha1.ModelResourceAnnotation]
}

func (rec *templateRecorder) templates(name string) []string {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]string(nil), rec.seqs[name]...)
}

func (rec *templateRecorder) stop() {
	rec.w.Stop()
	<-rec.done
}

// sampler judges every version of every model the API server stores (a
// watch, resumed from the last resourceVersion it delivered, so nothing
// between two samples is missed) and keeps what contradicts itself. A
// watch that cannot resume where it ended is a violation: the suite would
// not have seen every version.
type sampler struct {
	mu      sync.Mutex
	bad     []string
	samples int
	cancel  context.CancelFunc
	done    chan struct{}
}

var fluxChecker = func() *check.Checker {
	c := check.NewChecker(nil, &check.Conditions{NegativePolarity: v1alpha1.NegativePolarityConditions})
	c.DisableFetch = true
	return c
}()

func newSampler(t *testing.T, c client.WithWatch) *sampler {
	ctx, cancel := context.WithCancel(context.Background())
	s := &sampler{cancel: cancel, done: make(chan struct{})}
	var list v1alpha1.OpenMedModelList
	if err := c.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		s.judge(&list.Items[i])
	}
	rv := list.ResourceVersion
	go func() {
		defer close(s.done)
		for ctx.Err() == nil {
			w, err := c.Watch(ctx, &v1alpha1.OpenMedModelList{}, client.InNamespace(namespace),
				&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true}})
			if err != nil {
				if ctx.Err() == nil {
					s.violation("the status watch could not resume at " + rv + ": " + err.Error())
				}
				return
			}
			for ev := range w.ResultChan() {
				switch ev.Type {
				case watch.Error:
					if ctx.Err() == nil {
						s.violation(fmt.Sprintf("the status watch ended with an error at %s: %v", rv, apierrors.FromObject(ev.Object)))
					}
					w.Stop()
					return
				case watch.Bookmark:
					if m, ok := ev.Object.(*v1alpha1.OpenMedModel); ok {
						rv = m.ResourceVersion
					}
					continue
				}
				if m, ok := ev.Object.(*v1alpha1.OpenMedModel); ok {
					rv = m.ResourceVersion
					if ev.Type != watch.Deleted {
						s.judge(m)
					}
				}
			}
			w.Stop()
		}
	}()
	return s
}

func (s *sampler) judge(m *v1alpha1.OpenMedModel) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples++
	if v := contradiction(m); v != "" {
		s.bad = append(s.bad, m.Name+"@"+m.ResourceVersion+": "+v)
	}
}

func (s *sampler) violation(v string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bad = append(s.bad, v)
}

// contradiction names what a status sample says against itself.
func contradiction(m *v1alpha1.OpenMedModel) string {
	if m.DeletionTimestamp != nil || m.Status.ObservedGeneration < 1 {
		return ""
	}
	st := &m.Status
	ready := apimeta.FindStatusCondition(st.Conditions, v1alpha1.ReadyCondition)
	switch {
	case st.ObservedGeneration == m.Generation && ready != nil && ready.ObservedGeneration != m.Generation:
		return "observedGeneration current with a stale Ready"
	case ready != nil && ready.Status == metav1.ConditionTrue && st.Phase != v1alpha1.PhaseReady && st.Phase != v1alpha1.PhaseSuspended:
		return "Ready=True with phase " + string(st.Phase)
	case st.Phase == v1alpha1.PhaseRollingOut && !apimeta.IsStatusConditionTrue(st.Conditions, v1alpha1.ReconcilingCondition):
		return "RollingOut without Reconciling"
	}
	// Right after a spec edit the status is the previous generation's, and
	// says so (observedGeneration); Flux's rules judge a status that claims
	// the current one.
	if st.ObservedGeneration != m.Generation {
		return ""
	}
	if fail, _ := fluxChecker.Check(context.Background(), m); fail != nil {
		return "Flux's rules: " + fail.Error()
	}
	return ""
}

func (s *sampler) violations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.bad...)
}

func (s *sampler) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples
}

func (s *sampler) stop() {
	s.cancel()
	<-s.done
}

// checkAudit: the operator only ever read, watched and patched Deployments,
// only read and watched Pods and ReplicaSets, and never touched Secrets.
func checkAudit(t *testing.T, reqs []harness.Request) {
	t.Helper()
	kinds := map[string]int{}
	for _, q := range reqs {
		kinds[q.Kind()]++
		switch q.Resource {
		case "deployments":
			if q.Verb != "get" && q.Verb != "list" && q.Verb != "watch" && q.Verb != "patch" {
				t.Errorf("the operator sent %s %s/%s", q.Kind(), q.Namespace, q.Name)
			}
		case "pods", "replicasets":
			if q.Verb != "get" && q.Verb != "list" && q.Verb != "watch" {
				t.Errorf("the operator sent %s %s/%s", q.Kind(), q.Namespace, q.Name)
			}
		case "secrets":
			t.Errorf("the operator touched %s: %s %s/%s", q.Resource, q.Kind(), q.Namespace, q.Name)
		}
	}
	keys := make([]string, 0, len(kinds))
	for k := range kinds {
		keys = append(keys, k+"="+strconv.Itoa(kinds[k]))
	}
	sort.Strings(keys)
	t.Logf("operator requests: %s", strings.Join(keys, " "))
}

// checkOwnedFields: every field the operator's managedFields entry owns on
// a Deployment is one the operator owns (pkg/rollout's owned fields).
func checkOwnedFields(t *testing.T, c client.Client, n int) {
	t.Helper()
	for i := 0; i < 2*n; i++ {
		dep := name(i / 2)
		if i%2 == 1 {
			dep = retargetName(i / 2)
		}
		d := &appsv1.Deployment{}
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: dep}, d); err != nil {
			t.Fatal(err)
		}
		for _, e := range d.ManagedFields {
			if e.Manager != rollout.DefaultFieldManager {
				continue
			}
			if e.Operation != metav1.ManagedFieldsOperationApply {
				t.Errorf("%s: the operator wrote with %s", d.Name, e.Operation)
			}
			for _, f := range leafFields(t, e.FieldsV1.Raw) {
				if !allowed(f) {
					t.Errorf("%s: the operator owns %s, outside the fields it owns", d.Name, f)
				}
			}
		}
	}
}
