package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/health/snapshot"
	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/localrun"
	"github.com/openmed/openmed-operator/pkg/rollout"
	"github.com/openmed/openmed-operator/pkg/testenv"
)

const (
	// deadlineSeconds is the models' progress deadline: short, so a
	// never-ready version fails in seconds.
	deadlineSeconds = 8
	// waitTimeout bounds each wait; two shared cores and parallel tests
	// make things slow, so it is generous.
	waitTimeout = 90 * time.Second
	// helmManager creates the targets, as `helm install` would.
	helmManager = "helm"
	// modelName is the name of the example model and its target.
	modelName = "openmed-service"
)

// newNamespace creates a namespace of its own for a test.
func newNamespace(t *testing.T) string {
	t.Helper()
	name := "e2e-" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
	if len(name) > 50 {
		name = name[:50]
	}
	name = strings.TrimRight(name, "-") + "-" + rand.String(5)
	if err := k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	// Namespace deletion takes seconds; nobody waits for it.
	t.Cleanup(func() {
		_ = k8s.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	})
	return name
}

// createTarget creates examples/target-deployment.yaml (the chart ConfigMap
// and Deployment) in ns as field manager helm, after mutate changed the
// Deployment.
func createTarget(t *testing.T, ns string, mutate func(*appsv1.Deployment)) {
	t.Helper()
	createTargetOn(t, k8s, ns, mutate)
}

// createTargetOn is createTarget on the cluster c reaches.
func createTargetOn(t *testing.T, c client.Client, ns string, mutate func(*appsv1.Deployment)) {
	t.Helper()
	objs, err := localrun.ReadObjects(filepath.Join(localrun.ExamplesDir(), localrun.TargetExample))
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range objs {
		u.SetNamespace(ns)
		var obj client.Object = u
		if u.GetKind() == "Deployment" {
			d := &appsv1.Deployment{}
			if err := fromUnstructured(u, d); err != nil {
				t.Fatal(err)
			}
			if mutate != nil {
				mutate(d)
			}
			obj = d
		}
		if err := c.Create(context.Background(), obj, client.FieldOwner(helmManager)); err != nil {
			t.Fatal(err)
		}
	}
}

// newModel is examples/openmedmodel.yaml in ns at version, with the test
// progress deadline; with operator set it belongs to that test operator.
func newModel(t *testing.T, ns, version, operator string) *v1alpha1.OpenMedModel {
	t.Helper()
	m, err := exampleModel()
	if err != nil {
		t.Fatal(err)
	}
	m.Namespace = ns
	m.Spec.Version = version
	m.Spec.RolloutStrategy.ProgressDeadlineSeconds = ptr.To[int32](deadlineSeconds)
	if operator != "" {
		m.Labels = map[string]string{operatorLabel: operator}
	}
	return m
}

// readyModel creates the target and the model at version and waits until
// the model is Ready.
func readyModel(t *testing.T, ns, version, operator string, mutate func(*appsv1.Deployment)) {
	t.Helper()
	createTarget(t, ns, mutate)
	if err := k8s.Create(context.Background(), newModel(t, ns, version, operator)); err != nil {
		t.Fatal(err)
	}
	waitServing(t, ns, version)
}

// state is one reading of the model and its target.
type state struct {
	m    *v1alpha1.OpenMedModel
	d    *appsv1.Deployment
	snap snapshot.Snapshot
}

func (s state) String() string { return s.snap.String() }

func read(t *testing.T, ns string) state {
	t.Helper()
	ctx := context.Background()
	s := state{m: &v1alpha1.OpenMedModel{}, d: &appsv1.Deployment{}}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: modelName}, s.m); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: modelName}, s.d); err != nil {
		t.Fatal(err)
	}
	snap, err := snapshot.Observe(s.m, s.d)
	if err != nil {
		t.Fatal(err)
	}
	s.snap = snap
	return s
}

// waitState polls until cond holds for the model and its target.
func waitState(t *testing.T, ns, what string, cond func(state) bool) state {
	t.Helper()
	return waitStateWithin(t, ns, what, waitTimeout, cond)
}

// waitStateWithin is waitState with its own timeout.
func waitStateWithin(t *testing.T, ns, what string, timeout time.Duration, cond func(state) bool) state {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		s := read(t, ns)
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s; last state: %s\nshared operator log:\n%s", timeout, what, s, localrun.Tail(shared.LogPath(), 20))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// eventually polls cond until it holds or waitTimeout passes.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	testenv.Eventually(t, waitTimeout, what, cond)
}

// settled is true when every replica of the target runs its current template
// and is available.
func settled(d *appsv1.Deployment) bool {
	want := ptr.Deref(d.Spec.Replicas, 1)
	st := d.Status
	return st.ObservedGeneration == d.Generation && st.Replicas == want && st.UpdatedReplicas == want &&
		st.ReadyReplicas == want && st.AvailableReplicas == want
}

// waitServing waits until the model is Ready at version and its target has
// rolled out completely.
func waitServing(t *testing.T, ns, version string) state {
	t.Helper()
	return waitState(t, ns, "Ready at "+version, func(s state) bool {
		return s.snap.Observed() && s.m.Status.Phase == v1alpha1.PhaseReady && s.m.Status.ActiveVersion == version && settled(s.d)
	})
}

// setVersion changes spec.version, as a commit to Git would.
func setVersion(t *testing.T, ns, version string) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"version":%q}}`, version)
	m := &v1alpha1.OpenMedModel{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: modelName}}
	if err := k8s.Patch(context.Background(), m, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
}

// annotate sets an annotation on the model; an empty value removes it.
func annotate(t *testing.T, ns, key, value string) {
	t.Helper()
	var v any = value
	if value == "" {
		v = nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{key: v}}})
	if err != nil {
		t.Fatal(err)
	}
	m := &v1alpha1.OpenMedModel{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: modelName}}
	if err := k8s.Patch(context.Background(), m, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
}

// pointer is the operator's env entry in the target container, or nil.
func pointer(d *appsv1.Deployment) *corev1.EnvVar {
	return rollout.PreloadEnv(d, v1alpha1.DefaultContainerName)
}

// pointerConfigMap is the manifest ConfigMap the target points at.
func pointerConfigMap(t *testing.T, d *appsv1.Deployment) *corev1.ConfigMap {
	t.Helper()
	p := pointer(d)
	if p == nil || p.ValueFrom == nil || p.ValueFrom.ConfigMapKeyRef == nil {
		t.Fatalf("no manifest pointer on Deployment %s/%s: %+v", d.Namespace, d.Name, p)
	}
	cm := &corev1.ConfigMap{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: d.Namespace, Name: p.ValueFrom.ConfigMapKeyRef.Name}, cm); err != nil {
		t.Fatal(err)
	}
	return cm
}

// manifestConfigMaps lists the operator's ConfigMaps in ns.
func manifestConfigMaps(t *testing.T, ns string) []corev1.ConfigMap {
	t.Helper()
	var list corev1.ConfigMapList
	if err := k8s.List(context.Background(), &list, client.InNamespace(ns),
		client.MatchingLabels{v1alpha1.ManagedByLabel: v1alpha1.ManagedByValue}); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// podHashes counts the target's live pods (not being deleted) by manifest
// hash, "" for pods without one.
func podHashes(t *testing.T, ns string) map[string]int {
	t.Helper()
	var pods corev1.PodList
	if err := k8s.List(context.Background(), &pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			out[p.Annotations[v1alpha1.ManifestHashAnnotation]]++
		}
	}
	return out
}

// eventMessages lists the messages of the model's events with reason.
func eventMessages(t *testing.T, ns, reason string) []string {
	t.Helper()
	return eventMessagesOn(t, k8s, ns, reason)
}

// eventMessagesOn is eventMessages on the cluster c reaches.
func eventMessagesOn(t *testing.T, c client.Client, ns, reason string) []string {
	t.Helper()
	var events corev1.EventList
	if err := c.List(context.Background(), &events, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range events.Items {
		if e.InvolvedObject.Name == modelName && e.InvolvedObject.Kind == "OpenMedModel" && e.Reason == reason {
			out = append(out, e.Message)
		}
	}
	return out
}

// recordedEvents waits until at least n of the model's events with reason
// are stored and returns their messages: the operator's recorder writes
// events asynchronously, after the status that says the same.
func recordedEvents(t *testing.T, ns, reason string, n int) []string {
	t.Helper()
	var msgs []string
	eventually(t, fmt.Sprintf("%d %s event(s)", n, reason), func() (bool, string) {
		msgs = eventMessages(t, ns, reason)
		return len(msgs) >= n, fmt.Sprint(msgs)
	})
	return msgs
}

// isGone is true when obj does not exist any more.
func isGone(t *testing.T, obj client.Object) bool {
	t.Helper()
	err := k8s.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return apierrors.IsNotFound(err)
}

func fromUnstructured(u *unstructured.Unstructured, obj any) error {
	return k8sruntime.DefaultUnstructuredConverter.FromUnstructured(u.Object, obj)
}

// watchDeployments calls record for the model's Deployment of ns as listed
// now and for every version of it the API server stores from then on,
// until the returned stop runs (it returns once the last record is done;
// the test's cleanup runs it too).
func watchDeployments(t *testing.T, ns string, record func(*appsv1.Deployment)) (stop func()) {
	t.Helper()
	var list appsv1.DeploymentList
	if err := k8s.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		if list.Items[i].Name == modelName {
			record(&list.Items[i])
		}
	}
	w, err := k8s.Watch(context.Background(), &appsv1.DeploymentList{}, client.InNamespace(ns),
		&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if d, ok := ev.Object.(*appsv1.Deployment); ok && d.Name == modelName {
				record(d)
			}
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { w.Stop(); <-done }) }
	t.Cleanup(stop)
	return stop
}
