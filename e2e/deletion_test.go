package e2e_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
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

	m := read(t, ns).m
	if err := k8s.Delete(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	eventually(t, "model gone", func() (bool, string) { return isGone(t, m), "still there" })
	eventually(t, "manifest ConfigMaps gone", func() (bool, string) {
		cms := manifestConfigMaps(t, ns)
		return len(cms) == 0, fmt.Sprintf("%d left", len(cms))
	})

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
	if got := podHashes(t, ns); got[""] != 2 || len(got) != 1 {
		t.Errorf("pods by manifest hash = %v, want 2 without one", got)
	}
	if isGone(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: modelName + "-config"}}) {
		t.Error("the chart's own ConfigMap was deleted")
	}
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
