package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	kstatus "github.com/fluxcd/cli-utils/pkg/kstatus/status"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/openmed/openmed-operator/e2e/scale/figures"
	"github.com/openmed/openmed-operator/health"
	"github.com/openmed/openmed-operator/kustomize"
	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/localrun"
	"github.com/openmed/openmed-operator/pkg/minicluster"
	"github.com/openmed/openmed-operator/pkg/testenv"
)

// fleetBakeSeconds is the bake of the fleet's models: longer than
// crashAfter, so the crashing version fails its bake in ring 1.
const fleetBakeSeconds = 15

// secondClusterCrashing is a version whose pods the second control
// plane's kwok restarts crashAfter after they became Ready, and the
// first's runs as a healthy one: it passes ring 1 and fails its bake in
// ring 2.
const secondClusterCrashing = "OpenMed/OpenMed-PII-SuperClinical-Small-44M-crashes-on-the-second-cluster"

// fleetDeadlineSeconds is the fleet's models' progress deadline.
const fleetDeadlineSeconds = 60

// remote is a second local control plane — the fleet's other cluster —
// with the bundle installed and an operator of its own for the models
// labelled operatorLabel=selector.
type remote struct {
	cluster *minicluster.Cluster
	c       client.WithWatch
	op      *localrun.Operator
}

// startRemote starts the second control plane with the suite's kwok
// stages (the crashing and never-ready versions behave as on the first,
// and secondClusterCrashing crashes too),
// installs the bundle and starts an operator against it, acting as the
// bundle's ServiceAccount. Everything stops when the test ends, and the
// test fails if a process of it is left.
func startRemote(t *testing.T, selector string) *remote {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := startControlPlane(ctx, secondClusterCrashing)
	if err != nil {
		t.Fatalf("start the second control plane: %v", err)
	}
	r := &remote{cluster: c}
	t.Cleanup(func() {
		var pids []int
		if r.op != nil {
			pids = append(pids, r.op.PID())
			if err := r.op.Stop(10 * time.Second); err != nil {
				t.Errorf("stop the second cluster's operator: %v", err)
			}
		}
		for _, pid := range c.PIDs() {
			pids = append(pids, pid)
		}
		if err := c.Stop(); err != nil {
			t.Errorf("stop the second control plane: %v", err)
		}
		for _, pid := range pids {
			if alive(pid) {
				t.Errorf("process %d (%s) of the second cluster still runs after it was stopped", pid, cmdName(pid))
			}
		}
	})
	if r.c, err = newClient(c.RESTConfig()); err != nil {
		t.Fatal(err)
	}
	bundle, err := localrun.InstallBundle(ctx, r.c, filepath.Join(kustomize.Dir(), kustomize.DefaultOverlay))
	if err != nil {
		t.Fatalf("install the bundle on the second cluster: %v", err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "operator.kubeconfig")
	if err := localrun.WriteImpersonatingKubeconfig(c.KubeconfigPath(), kubeconfig, bundle.ServiceAccount.Namespace, bundle.ServiceAccount.Name); err != nil {
		t.Fatal(err)
	}
	scraper, err := localrun.ServiceAccountScraper(ctx, r.c, "default", "prometheus", localrun.MetricsReaderRole)
	if err != nil {
		t.Fatal(err)
	}
	r.op, err = localrun.StartOperator(localrun.OperatorConfig{
		Binary:     operatorBinary,
		Kubeconfig: kubeconfig,
		LogPath:    filepath.Join(t.TempDir(), "operator.log"),
		Args:       []string{"--log-encoding=console", "--watch-label-selector=" + operatorLabel + "=" + selector},
		Scraper:    scraper,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.op.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return r
}

// namespace creates a namespace on the second cluster.
func (r *remote) namespace(t *testing.T, prefix string) string {
	t.Helper()
	name := prefix + "-" + rand.String(5)
	if err := r.c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	return name
}

// ring is one wave of the fleet: a namespace on one of the two clusters.
type ring struct {
	name string
	c    client.WithWatch
	ns   string
	// cluster names the control plane ("first" or "second").
	cluster string
}

// String names the ring, its control plane and namespace.
func (r ring) String() string {
	return fmt.Sprintf("%s (%s cluster, namespace %s)", r.name, r.cluster, r.ns)
}

// fleetRings are the fleet's three rings: ring 1 on the suite's cluster,
// rings 2 and 3 in two namespaces of the second.
func fleetRings(t *testing.T, rem *remote) []ring {
	t.Helper()
	return []ring{
		{name: "ring-1", c: k8s, ns: newNamespace(t), cluster: "first"},
		{name: "ring-2", c: rem.c, ns: rem.namespace(t, "ring-2"), cluster: "second"},
		{name: "ring-3", c: rem.c, ns: rem.namespace(t, "ring-3"), cluster: "second"},
	}
}

// fleetFiles is the fleet's Git tree at version: under models/, the example
// model with a bake, labelled for the test's operators, without a
// namespace (each ring's Application or Kustomization puts it in its own).
func fleetFiles(t *testing.T, version, operator string) map[string][]byte {
	t.Helper()
	m, err := exampleModel()
	if err != nil {
		t.Fatal(err)
	}
	u, err := k8sruntime.DefaultUnstructuredConverter.ToUnstructured(m)
	if err != nil {
		t.Fatal(err)
	}
	obj := &unstructured.Unstructured{Object: u}
	obj.SetNamespace("")
	obj.SetLabels(map[string]string{operatorLabel: operator})
	delete(obj.Object, "status")
	unstructured.RemoveNestedField(obj.Object, "metadata", "creationTimestamp")
	for path, v := range map[string]any{
		"spec.version": version,
		"spec.rolloutStrategy.progressDeadlineSeconds": int64(fleetDeadlineSeconds),
		"spec.rolloutStrategy.bakeSeconds":             int64(fleetBakeSeconds),
	} {
		if err := unstructured.SetNestedField(obj.Object, v, strings.Split(path, ".")...); err != nil {
			t.Fatal(err)
		}
	}
	model, err := yaml.Marshal(obj.Object)
	if err != nil {
		t.Fatal(err)
	}
	return map[string][]byte{"models/openmedmodel.yaml": model}
}

// recorder keeps every stored version of the objects of one kind in one
// namespace of one cluster from the moment it starts, with when the watch
// delivered it: a watch misses no version, however short-lived.
type recorder struct {
	mu   sync.Mutex
	got  []recorded
	w    watch.Interface
	done chan struct{}
}

// recorded is one stored version: when the watch delivered it, and its
// resourceVersion, which orders it with every other version the same API
// server stored (one etcd revision counter), whatever the watches' delays.
type recorded struct {
	at  time.Time
	rv  int64
	obj *unstructured.Unstructured
}

// record starts a recorder for kind (group/version/Kind) in ns.
func record(t *testing.T, c client.WithWatch, gvk schema.GroupVersionKind, ns string) *recorder {
	t.Helper()
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	if err := c.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	w, err := c.Watch(context.Background(), list, client.InNamespace(ns),
		&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.GetResourceVersion()}})
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{w: w, done: make(chan struct{})}
	now := time.Now()
	for i := range list.Items {
		r.got = append(r.got, recorded{at: now, rv: resourceVersion(&list.Items[i]), obj: &list.Items[i]})
	}
	go func() {
		defer close(r.done)
		for ev := range w.ResultChan() {
			if u, ok := ev.Object.(*unstructured.Unstructured); ok && ev.Type != watch.Deleted {
				r.mu.Lock()
				r.got = append(r.got, recorded{at: time.Now(), rv: resourceVersion(u), obj: u})
				r.mu.Unlock()
			}
		}
	}()
	t.Cleanup(r.stop)
	return r
}

// resourceVersion is u's resourceVersion as a number (the API server's
// etcd revision).
func resourceVersion(u *unstructured.Unstructured) int64 {
	rv, _ := strconv.ParseInt(u.GetResourceVersion(), 10, 64)
	return rv
}

// stop ends the recorder's watch.
func (r *recorder) stop() {
	r.w.Stop()
	<-r.done
}

// first is the first recorded version of name that match accepts.
func (r *recorder) first(name string, match func(*unstructured.Unstructured) bool) (recorded, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, g := range r.got {
		if g.obj.GetName() == name && match(g.obj) {
			return g, true
		}
	}
	return recorded{}, false
}

// all are the recorded versions of name, oldest first.
func (r *recorder) all(name string) []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []recorded
	for _, g := range r.got {
		if g.obj.GetName() == name {
			out = append(out, g)
		}
	}
	return out
}

var (
	deploymentGVK = appsv1.SchemeGroupVersion.WithKind("Deployment")
	modelGVK      = v1alpha1.GroupVersion.WithKind("OpenMedModel")
)

// templateHash is a Deployment's pod template manifest hash.
func templateHash(u *unstructured.Unstructured) string {
	h, _, _ := unstructured.NestedString(u.Object, "spec", "template", "metadata", "annotations", v1alpha1.ManifestHashAnnotation)
	return h
}

// hasRetained is true when a model's status.history holds version.
func hasRetained(version string) func(*unstructured.Unstructured) bool {
	return func(u *unstructured.Unstructured) bool {
		history, _, _ := unstructured.NestedSlice(u.Object, "status", "history")
		for _, item := range history {
			if h, ok := item.(map[string]any); ok && h["version"] == version {
				return true
			}
		}
		return false
	}
}

// templateHashes are the distinct template hashes a Deployment recorder
// saw, in order.
func templateHashes(r *recorder) []string {
	var out []string
	for _, g := range r.all(modelName) {
		if h := templateHash(g.obj); len(out) == 0 || out[len(out)-1] != h {
			out = append(out, h)
		}
	}
	return out
}

// fleetModel reads the ring's model.
func fleetModel(t *testing.T, r ring) *v1alpha1.OpenMedModel {
	t.Helper()
	m := &v1alpha1.OpenMedModel{}
	if err := r.c.Get(context.Background(), client.ObjectKey{Namespace: r.ns, Name: modelName}, m); err != nil {
		t.Fatalf("%s: %v", r, err)
	}
	return m
}

// retainedAt is when the ring's model retained version after its bake
// (its history's readyAt; zero if it has not).
func retainedAt(m *v1alpha1.OpenMedModel, version string) time.Time {
	for _, h := range m.Status.History {
		if h.Version == version {
			return h.ReadyAt.Time
		}
	}
	return time.Time{}
}

// waitRingServing waits until the ring's model serves version, retained
// after its bake, and is Ready at its generation.
func waitRingServing(t *testing.T, r ring, version string, timeout time.Duration) {
	t.Helper()
	testenv.Eventually(t, timeout, r.name+" serving "+version+" after its bake", func() (bool, string) {
		m := &v1alpha1.OpenMedModel{}
		if err := r.c.Get(context.Background(), client.ObjectKey{Namespace: r.ns, Name: modelName}, m); err != nil {
			return false, err.Error()
		}
		return m.Status.ObservedGeneration == m.Generation && m.Status.ActiveVersion == version &&
				apimeta.IsStatusConditionTrue(m.Status.Conditions, v1alpha1.ReadyCondition) && !retainedAt(m, version).IsZero(),
			fmt.Sprintf("phase %s, active %s, conditions %v", m.Status.Phase, m.Status.ActiveVersion, m.Status.Conditions)
	})
}

// progressingUntilBaked checks the stored versions of a ring's model that a
// faceWatch judged, from the first one with a generation above
// fromGeneration (the spec a sync wrote): each is Progressing in the Go and
// Lua faces and InProgress in kstatus and CEL until the model has retained
// version after its bake, and the one that first has is Healthy (Current)
// in all four. A ring judged on any version in between would see the
// step as not done. It returns how many versions it judged.
func progressingUntilBaked(t *testing.T, samples []faceSample, fromGeneration int64, version string) int {
	t.Helper()
	judged := 0
	for _, s := range samples {
		if s.generation <= fromGeneration {
			continue
		}
		judged++
		if s.err != "" {
			t.Errorf("a face could not judge the model: %s", s.err)
		}
		if slices.Contains(s.retained, version) {
			if len(s.argo) != 1 || !s.argo[health.Healthy] || len(s.ks) != 1 || !s.ks[kstatus.CurrentStatus] {
				t.Errorf("the first version that retained %s is not Healthy in every face: %v: %s", version, s.faces, s.summary)
			}
			return judged
		}
		if len(s.argo) != 1 || !s.argo[health.Progressing] || len(s.ks) != 1 || !s.ks[kstatus.InProgressStatus] {
			t.Errorf("before %s was retained after its bake: %v: %s", version, s.faces, s.summary)
		}
	}
	t.Errorf("no stored version of the model with a generation above %d retained %s (%d judged)", fromGeneration, version, judged)
	return judged
}

// startFleet starts the second control plane and an operator for the
// models labelled operatorLabel=operator on each cluster, and creates the
// three rings with their Deployments.
func startFleet(t *testing.T, operator string) (*remote, []ring) {
	t.Helper()
	rem := startRemote(t, operator)
	op, err := launchOperator(context.Background(), operator, operatorLabel+"="+operator)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = op.Kill() })
	rings := fleetRings(t, rem)
	for _, r := range rings {
		createTargetOn(t, r.c, r.ns, nil)
	}
	return rem, rings
}

// waitRolledBack waits until the ring's model rolled back to version and
// is Stalled (the engine's reaction to the commit, the rollout, the crash
// and the rollback), and that its bake failed it.
func waitRolledBack(t *testing.T, r ring, version string) {
	t.Helper()
	testenv.Eventually(t, 4*time.Minute, r.name+" rolled back to "+version, func() (bool, string) {
		m := fleetModel(t, r)
		return m.Status.Phase == v1alpha1.PhaseRolledBack && m.Status.ActiveVersion == version &&
			apimeta.IsStatusConditionTrue(m.Status.Conditions, v1alpha1.StalledCondition), fmt.Sprintf("%s %s", m.Status.Phase, m.Status.ActiveVersion)
	})
	// The operator's RolloutFailed event names the restart its bake saw
	// (events are written after the status that says the same).
	testenv.Eventually(t, waitTimeout, r.name+"'s RolloutFailed event naming ContainerRestarted", func() (bool, string) {
		msgs := eventMessagesOn(t, r.c, r.ns, v1alpha1.RolloutFailedReason)
		return slices.ContainsFunc(msgs, func(m string) bool { return strings.Contains(m, "ContainerRestarted") }), fmt.Sprint(msgs)
	})
}

// checkHeld checks that the rings from the index from on kept version:
// their Deployments' pod templates never changed while w watched, and
// every version of their models stored meanwhile is at version.
func checkHeld(t *testing.T, w *fleetWatch, from int, version string) {
	t.Helper()
	for i, r := range w.rings[from:] {
		if got := templateHashes(w.templates[from+i]); len(got) != 1 || got[0] != hashOf(t, version) {
			t.Errorf("%s: pod templates %v after the ring before failed, want only %s's", r, got, version)
		}
		for _, g := range w.models[from+i].all(modelName) {
			if v, _, _ := unstructured.NestedString(g.obj.Object, "spec", "version"); v != version {
				t.Errorf("%s: a version of the model (resourceVersion %d) at %s, want %s all along", r, g.rv, v, version)
			}
		}
		if m := fleetModel(t, r); m.Spec.Version != version || m.Status.ActiveVersion != version {
			t.Errorf("%s: the model is at %s (serving %s), want %s", r, m.Spec.Version, m.Status.ActiveVersion, version)
		}
	}
}

// fleetWatch records every stored version of each ring's Deployment and
// model.
type fleetWatch struct {
	rings     []ring
	templates []*recorder
	models    []*recorder
}

// watchFleet starts recording each ring's Deployment and model.
func watchFleet(t *testing.T, rings []ring) *fleetWatch {
	t.Helper()
	w := &fleetWatch{rings: rings}
	for _, r := range rings {
		w.templates = append(w.templates, record(t, r.c, deploymentGVK, r.ns))
		w.models = append(w.models, record(t, r.c, modelGVK, r.ns))
	}
	return w
}

// wave is one ring's passage of a version: when its Deployment's template
// first carried the version and when its model first retained the version
// after its bake (when the watch delivered them, and their
// resourceVersions).
type wave struct {
	ring              ring
	applied, retained recorded
}

// waves reads each ring's wave of version (template hash) and checks the
// order of consecutive rings on the same control plane: a ring's Deployment
// changes only after the ring before it retained the version after its
// bake, by their resourceVersions (exact, whatever the watches' delays).
// Across control planes the engines' own objects show it (their tests).
func (w *fleetWatch) waves(t *testing.T, hash, version string) []wave {
	t.Helper()
	var out []wave
	for i, r := range w.rings {
		applied, ok := w.templates[i].first(modelName, func(u *unstructured.Unstructured) bool { return templateHash(u) == hash })
		if !ok {
			t.Fatalf("%s: the Deployment never carried %s", r, version)
		}
		retained, ok := w.models[i].first(modelName, hasRetained(version))
		if !ok {
			t.Fatalf("%s: the model never retained %s", r, version)
		}
		out = append(out, wave{ring: r, applied: applied, retained: retained})
	}
	for i := 1; i < len(out); i++ {
		if out[i].ring.cluster == out[i-1].ring.cluster && out[i].applied.rv <= out[i-1].retained.rv {
			t.Errorf("%s's Deployment carried %s at resourceVersion %d, not after %s retained it after its bake (%d)",
				out[i].ring, version, out[i].applied.rv, out[i-1].ring, out[i-1].retained.rv)
		}
	}
	return out
}

// retainedBefore checks that the ring's model retained version (its
// recorded versions) before the first recorded version of obj that match
// accepts: both stored by the same API server, ordered by resourceVersion.
func retainedBefore(t *testing.T, w *fleetWatch, ring int, version string, rec *recorder, obj, what string, match func(*unstructured.Unstructured) bool) {
	t.Helper()
	retained, ok := w.models[ring].first(modelName, hasRetained(version))
	if !ok {
		t.Fatalf("%s: the model never retained %s", w.rings[ring], version)
	}
	g, ok := rec.first(obj, match)
	if !ok {
		t.Fatalf("%s: no version where %s", obj, what)
	}
	if g.rv <= retained.rv {
		t.Errorf("%s: %s at resourceVersion %d, before %s retained %s after its bake (%d)", obj, what, g.rv, w.rings[ring], version, retained.rv)
	}
}

// reportWaves logs each wave's times from the commit.
func reportWaves(t *testing.T, engine string, committed time.Time, waves []wave) {
	t.Helper()
	for _, w := range waves {
		t.Logf("%s %s: applied %s after the commit, retained after its bake %s later",
			engine, w.ring.name, w.applied.at.Sub(committed).Round(100*time.Millisecond), w.retained.at.Sub(w.applied.at).Round(100*time.Millisecond))
	}
}

// fleetFiguresEnv names the file `make bench-fleet` has the fleet tests
// write their figures to (docs/fleet/waves.json); unset, they write none.
const fleetFiguresEnv = "OPENMED_FLEET_JSON"

// writeFleetFigures puts run into the figures file, replacing the
// engine's earlier run, when the test passed and fleetFiguresEnv is set.
func writeFleetFigures(t *testing.T, run figures.FleetRun, committed time.Time, waves []wave) {
	t.Helper()
	path := os.Getenv(fleetFiguresEnv)
	if path == "" || t.Failed() {
		return
	}
	for _, w := range waves {
		run.Waves = append(run.Waves, figures.Wave{Ring: w.ring.name,
			AppliedSeconds: w.applied.at.Sub(committed).Seconds(), RetainedSeconds: w.retained.at.Sub(w.applied.at).Seconds()})
	}
	f, err := figures.Read(path)
	if errors.Is(err, fs.ErrNotExist) {
		f, err = &figures.File{}, nil
	}
	if err != nil {
		t.Fatal(err)
	}
	f.Date, f.Go, f.CPUs = time.Now().UTC().Format(time.RFC3339), runtime.Version(), runtime.NumCPU()
	f.Fleet = slices.DeleteFunc(f.Fleet, func(r figures.FleetRun) bool { return r.Engine == run.Engine })
	f.Fleet = append(f.Fleet, run)
	slices.SortFunc(f.Fleet, func(a, b figures.FleetRun) int { return strings.Compare(a.Engine, b.Engine) })
	if err := f.Write(path); err != nil {
		t.Fatal(err)
	}
	t.Logf("figures written to %s", path)
}
