package store

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// TestConfigMapWakesWhatOwnsWould: the ConfigMap store wakes a ConfigMap's
// model itself, without the REST mapping controller-runtime's owner
// handler makes on every event (7 % of the operator's allocations at
// 10,000 models). controller-runtime's handler, as Owns uses it, is the
// oracle: for every owner reference shape both wake the same models.
func TestConfigMapWakesWhatOwnsWould(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(v1alpha1.GroupVersion.WithKind("OpenMedModel"), meta.RESTScopeNamespace)
	owns := handler.EnqueueRequestForOwner(scheme, mapper, &v1alpha1.OpenMedModel{}, handler.OnlyControllerOwner())

	model := func(apiVersion, kind, name string, controller *bool) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name, UID: "u-" + types.UID(name), Controller: controller}
	}
	for _, tc := range []struct {
		name string
		refs []metav1.OwnerReference
	}{
		{"the model controls it", []metav1.OwnerReference{model("openmed.ai/v1alpha1", "OpenMedModel", "svc", ptr.To(true))}},
		{"another version of the group", []metav1.OwnerReference{model("openmed.ai/v1", "OpenMedModel", "svc", ptr.To(true))}},
		{"owned, not controlled", []metav1.OwnerReference{model("openmed.ai/v1alpha1", "OpenMedModel", "svc", nil)}},
		{"controller false", []metav1.OwnerReference{model("openmed.ai/v1alpha1", "OpenMedModel", "svc", ptr.To(false))}},
		{"a kind of that name in another group", []metav1.OwnerReference{model("other.example.com/v1", "OpenMedModel", "svc", ptr.To(true))}},
		{"another kind", []metav1.OwnerReference{model("apps/v1", "Deployment", "svc", ptr.To(true))}},
		{"no owner", nil},
		{"an owner, then the controller", []metav1.OwnerReference{
			model("apps/v1", "Deployment", "svc", nil), model("openmed.ai/v1alpha1", "OpenMedModel", "other", ptr.To(true))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "svc-model-manifest-1", OwnerReferences: tc.refs,
				Labels: map[string]string{v1alpha1.ManagedByLabel: v1alpha1.ManagedByValue}}, Data: map[string]string{"k": "v"}}
			kept, err := keepConfigMap(cm.DeepCopy(), nil)
			if err != nil {
				t.Fatal(err)
			}
			ours := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
			theirs := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
			defer ours.ShutDown()
			defer theirs.ShutDown()
			wakeController(ours, kept.(*keptConfigMap), false)
			owns.Create(context.Background(), event.CreateEvent{Object: cm}, theirs)
			if got, want := drain(ours), drain(theirs); !equalRequests(got, want) {
				t.Errorf("the store wakes %v, Owns' handler %v", got, want)
			}
		})
	}
}

func drain(q workqueue.TypedRateLimitingInterface[reconcile.Request]) []reconcile.Request {
	var out []reconcile.Request
	for q.Len() > 0 {
		r, _ := q.Get()
		q.Done(r)
		out = append(out, r)
	}
	return out
}

func equalRequests(a, b []reconcile.Request) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
