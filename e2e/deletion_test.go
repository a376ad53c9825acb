package e2e_test

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/localrun"
	"github.com/openmed/openmed-operator/pkg/rollout"
)

// TestDeletion: deleting the model releases the Deployment (pointer and
// annotations gone, replicas kept, pods rolled once to the chart's own
// configuration) and removes the manifest ConfigMaps, while the chart's own
// ConfigMap stays.
func TestDeletion(t *testing.T) {
	requireCluster(t)
	t.Parallel()
	ns := newNamespace(t)
	readyModel(t, ns, v1, "", nil)
	setVersion(t, ns, v2)
	waitServing(t, ns, v2)
	if n := len(manifestConfigMaps(t, ns)); n != 2 {
		t.Fatalf("%d manifest ConfigMaps before deletion, want 2 (v1 retained, v2 active)", n)
	}

	s := read(t, ns)
	m := s.m
	strategy := s.d.Spec.Strategy
	// The operator deletes its ConfigMaps before it lets the model go; the
	// garbage collector (their owner references) would delete them only
	// after. The API server's revisions order the two.
	deletions := watchDeletions(t, ns)
	if err := k8s.Delete(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	eventually(t, "model gone", func() (bool, string) { return isGone(t, m), "still there" })
	eventually(t, "manifest ConfigMaps gone", func() (bool, string) {
		cms := manifestConfigMaps(t, ns)
		return len(cms) == 0, fmt.Sprintf("%d left", len(cms))
	})
	gone := deletions.stop(t)
	modelGone, ok := gone["OpenMedModel/"+modelName]
	if !ok {
		t.Fatalf("no deletion of the model seen: %v", gone)
	}
	cmDeleted := 0
	for key, rv := range gone {
		if strings.HasPrefix(key, "ConfigMap/") {
			cmDeleted++
			if rv > modelGone {
				t.Errorf("%s was deleted at revision %d, after the model went at %d: the garbage collector's work, not the operator's", key, rv, modelGone)
			}
		}
	}
	if cmDeleted != 2 {
		t.Errorf("%d manifest ConfigMap deletions seen, want 2: %v", cmDeleted, gone)
	}

	d := &appsv1.Deployment{}
	eventually(t, "the released Deployment rolled out", func() (bool, string) {
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: modelName}, d); err != nil {
			t.Fatal(err)
		}
		return settled(d), fmt.Sprintf("%+v", d.Status)
	})
	if p := pointer(d); p != nil {
		t.Errorf("the pointer env entry is left: %+v", p)
	}
	if _, ok := d.Annotations[v1alpha1.ModelResourceAnnotation]; ok {
		t.Errorf("owner annotation left on the Deployment")
	}
	for _, k := range []string{v1alpha1.ModelResourceAnnotation, v1alpha1.ManifestHashAnnotation} {
		if _, ok := d.Spec.Template.Annotations[k]; ok {
			t.Errorf("pod template annotation %s left", k)
		}
	}
	for _, mf := range d.ManagedFields {
		if mf.Manager == rollout.DefaultFieldManager {
			t.Errorf("managedFields still holds %s", mf.Manager)
		}
	}
	if got := ptr.Deref(d.Spec.Replicas, 0); got != 2 {
		t.Errorf("replicas = %d after the release, want 2 kept", got)
	}
	if !equality.Semantic.DeepEqual(d.Spec.Strategy, strategy) {
		t.Errorf("strategy %+v after the release, %+v before: want it kept", d.Spec.Strategy, strategy)
	}
	if got := podHashes(t, ns); got[""] != 2 || len(got) != 1 {
		t.Errorf("pods by manifest hash = %v, want 2 without one", got)
	}
	if isGone(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: modelName + "-config"}}) {
		t.Error("the chart's own ConfigMap was deleted")
	}
}

// TestDeletionAfterRetarget: the model moves to a second Deployment, then
// is deleted. The real Deployment controller writes each Deployment's
// status right after the release's template change, between the release's
// two requests; each release is finished all the same: the previous target
// once the retarget settled, the new one once the model is gone, both with
// nothing of the operator left and their replicas kept.
func TestDeletionAfterRetarget(t *testing.T) {
	requireCluster(t)
	t.Parallel()
	ctx := context.Background()
	ns := newNamespace(t)
	readyModel(t, ns, v1, "", nil)
	const second = modelName + "-b"
	createSecondTarget(t, ns, second)

	m := read(t, ns).m
	base := m.DeepCopy()
	m.Spec.TargetRef.Name = second
	if err := k8s.Patch(ctx, m, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "serving from the second Deployment, the first released", func() (bool, string) {
		s := read(t, ns)
		d := deploymentNamed(t, ns, second)
		return s.m.Status.Phase == v1alpha1.PhaseReady && s.m.Status.TargetName == second && settled(d) && pointer(d) != nil &&
				releasedDeployment(t, ns, modelName, 2) == "",
			fmt.Sprintf("%s; first: %s", s, releasedDeployment(t, ns, modelName, 2))
	})
	if err := k8s.Delete(ctx, read(t, ns).m); err != nil {
		t.Fatal(err)
	}
	eventually(t, "model gone", func() (bool, string) { return isGone(t, m), "still there" })
	// The finalizer goes only once nothing of the operator is left; the
	// pods of the released template then roll out.
	eventually(t, "both Deployments released and rolled out", func() (bool, string) {
		why := releasedDeployment(t, ns, modelName, 2) + releasedDeployment(t, ns, second, 2)
		return why == "", why
	})
}

// createSecondTarget creates the chart's Deployment once more under name,
// with labels and a selector of its own, as field manager helm.
func createSecondTarget(t *testing.T, ns, name string) {
	t.Helper()
	objs, err := localrun.ReadObjects(filepath.Join(localrun.ExamplesDir(), localrun.TargetExample))
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range objs {
		if u.GetKind() != "Deployment" {
			continue
		}
		d := &appsv1.Deployment{}
		if err := fromUnstructured(u, d); err != nil {
			t.Fatal(err)
		}
		d.Namespace, d.Name = ns, name
		d.Spec.Selector.MatchLabels["app.kubernetes.io/instance"] = name
		d.Spec.Template.Labels["app.kubernetes.io/instance"] = name
		if err := k8s.Create(context.Background(), d, client.FieldOwner(helmManager)); err != nil {
			t.Fatal(err)
		}
	}
}

func deploymentNamed(t *testing.T, ns, name string) *appsv1.Deployment {
	t.Helper()
	d := &appsv1.Deployment{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, d); err != nil {
		t.Fatal(err)
	}
	return d
}

// releasedDeployment says what of the operator is left on the Deployment,
// or "" when nothing is and it rolled out with replicas kept.
func releasedDeployment(t *testing.T, ns, name string, replicas int32) string {
	t.Helper()
	d := deploymentNamed(t, ns, name)
	var left []string
	for _, mf := range d.ManagedFields {
		if mf.Manager == rollout.DefaultFieldManager {
			left = append(left, "managedFields entry "+string(mf.Operation))
		}
	}
	if pointer(d) != nil {
		left = append(left, "preload entry")
	}
	if d.Annotations[v1alpha1.ModelResourceAnnotation] != "" || d.Spec.Template.Annotations[v1alpha1.ModelResourceAnnotation] != "" ||
		d.Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation] != "" {
		left = append(left, "an annotation of the operator")
	}
	if got := ptr.Deref(d.Spec.Replicas, 0); got != replicas {
		left = append(left, fmt.Sprintf("replicas %d, want %d kept", got, replicas))
	}
	if !settled(d) {
		left = append(left, "not rolled out")
	}
	if len(left) == 0 {
		return ""
	}
	return fmt.Sprintf("Deployment %s not released: %v", name, left)
}

// TestGarbageCollection: with no operator running (uninstalled, say) and its
// finalizer removed by hand, deleting the model leaves the manifest
// ConfigMaps to the real garbage collector, through their controller
// ownerReferences: foreground deletion removes them before the model.
func TestGarbageCollection(t *testing.T) {
	requireCluster(t)
	t.Parallel()
	ctx := context.Background()
	op, err := launchOperator(ctx, "gc", operatorLabel+"=gc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = op.Kill() })
	ns := newNamespace(t)
	readyModel(t, ns, v1, "gc", nil)
	cms := manifestConfigMaps(t, ns)
	if len(cms) == 0 {
		t.Fatal("no manifest ConfigMap")
	}
	if err := op.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}

	m := read(t, ns).m
	if err := k8s.Patch(ctx, m, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Delete(ctx, m, client.PropagationPolicy(metav1.DeletePropagationForeground)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the garbage collector removed the ConfigMaps and the model", func() (bool, string) {
		left := manifestConfigMaps(t, ns)
		return len(left) == 0 && isGone(t, m), fmt.Sprintf("%d ConfigMaps left", len(left))
	})
}

// deletionWatch records the revision at which each ConfigMap and
// OpenMedModel of a namespace was deleted.
type deletionWatch struct {
	mu   sync.Mutex
	gone map[string]int64
	ws   []watch.Interface
	done sync.WaitGroup
}

func watchDeletions(t *testing.T, ns string) *deletionWatch {
	t.Helper()
	dw := &deletionWatch{gone: map[string]int64{}}
	for _, list := range []client.ObjectList{&corev1.ConfigMapList{}, &v1alpha1.OpenMedModelList{}} {
		if err := k8s.List(context.Background(), list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		rv := list.(metav1.ListInterface).GetResourceVersion()
		w, err := k8s.Watch(context.Background(), list, client.InNamespace(ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv}})
		if err != nil {
			t.Fatal(err)
		}
		dw.ws = append(dw.ws, w)
		dw.done.Add(1)
		go func() {
			defer dw.done.Done()
			for ev := range w.ResultChan() {
				if ev.Type != watch.Deleted {
					continue
				}
				obj, ok := ev.Object.(client.Object)
				if !ok {
					continue
				}
				kind := "ConfigMap/"
				if _, ok := obj.(*v1alpha1.OpenMedModel); ok {
					kind = "OpenMedModel/"
				} else if obj.GetLabels()[v1alpha1.ManagedByLabel] != v1alpha1.ManagedByValue {
					continue // the chart's own ConfigMap
				}
				rv, _ := strconv.ParseInt(obj.GetResourceVersion(), 10, 64)
				dw.mu.Lock()
				dw.gone[kind+obj.GetName()] = rv
				dw.mu.Unlock()
			}
		}()
	}
	t.Cleanup(func() { _ = dw.stop(t) })
	return dw
}

// stop ends the watches and returns the deletions, "Kind/name" to revision.
func (dw *deletionWatch) stop(t *testing.T) map[string]int64 {
	for _, w := range dw.ws {
		w.Stop()
	}
	dw.done.Wait()
	dw.mu.Lock()
	defer dw.mu.Unlock()
	return maps.Clone(dw.gone)
}
