package controllers

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/openmed/openmed-operator/controllers/internal/store"
	"github.com/openmed/openmed-operator/pkg/rollout"
)

// HoldsDeployment reports whether the reconciler's Deployment store
// holds the Deployment key: what the operator keeps in memory of
// Deployments, for the tests of package controllers_test.
func (r *OpenMedModelReconciler) HoldsDeployment(key types.NamespacedName) bool {
	return r.stores != nil && r.stores.Deployments.Get(key) != nil
}

// HoldsConfigMap reports whether the reconciler's ConfigMap store holds
// the ConfigMap key.
func (r *OpenMedModelReconciler) HoldsConfigMap(key types.NamespacedName) bool {
	return r.stores != nil && r.stores.ConfigMaps.Holds(key)
}

// KeptAndPruned returns d as the Deployment store hands it out (kept
// compact, then rebuilt) and as pruning alone leaves it: the two must be
// the same.
func KeptAndPruned(d *appsv1.Deployment) (kept, pruned *appsv1.Deployment) {
	return store.KeptAndPruned(d, rollout.DefaultFieldManager)
}

// PruneDeployment is the Deployment store's pruning.
var PruneDeployment = store.PruneDeployment

// StopPodEvents removes the bake pod store's event handler: the store keeps
// the pods as it last saw them, as a store whose watch broke does, and no
// pod event wakes a model.
func (r *OpenMedModelReconciler) StopPodEvents() error {
	return r.stores.BakePods.StopEvents()
}

// HoldsPod reports whether the reconciler's bake pod store holds the pod
// key.
func (r *OpenMedModelReconciler) HoldsPod(key types.NamespacedName) bool {
	return r.stores != nil && r.stores.BakePods.Holds(key)
}

// KeptBakePods returns the pods the bake pod store holds for the model
// owner ("namespace/name"), as its event handler last put them.
func (r *OpenMedModelReconciler) KeptBakePods(owner string) []corev1.Pod {
	if r.stores == nil {
		return nil
	}
	return r.stores.BakePods.Owned(owner)
}
