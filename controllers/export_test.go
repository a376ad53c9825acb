package controllers

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/openmed/openmed-operator/pkg/rollout"
)

// HoldsDeployment reports whether the reconciler's Deployment store
// (deployments.go) holds the Deployment key: what the operator keeps in
// memory of Deployments, for the tests of package controllers_test.
func (r *OpenMedModelReconciler) HoldsDeployment(key types.NamespacedName) bool {
	return r.deployments != nil && r.deployments.get(key) != nil
}

// HoldsConfigMap reports whether the reconciler's ConfigMap store
// (configmaps.go) holds the ConfigMap key.
func (r *OpenMedModelReconciler) HoldsConfigMap(key types.NamespacedName) bool {
	if r.configMaps == nil {
		return false
	}
	_, ok, err := r.configMaps.informer.GetIndexer().GetByKey(key.String())
	return ok && err == nil
}

// KeptAndPruned returns d as the Deployment store hands it out (kept
// compact, then rebuilt) and as pruning alone leaves it: the two must be
// the same.
func KeptAndPruned(d *appsv1.Deployment) (kept, pruned *appsv1.Deployment) {
	k, _ := keepDeployment(d.DeepCopy(), nil, rollout.DefaultFieldManager)
	return k.(*keptDeployment).deployment(), pruneDeployment(d.DeepCopy(), nil, rollout.DefaultFieldManager)
}

// StopPodEvents removes the bake pod store's event handler: the store keeps
// the pods as it last saw them, as a store whose watch broke does, and no
// pod event wakes a model.
func (r *OpenMedModelReconciler) StopPodEvents() error {
	return r.pods.informer.RemoveEventHandler(r.pods.registration)
}

// HoldsPod reports whether the reconciler's bake pod store (pods.go)
// holds the pod key.
func (r *OpenMedModelReconciler) HoldsPod(key types.NamespacedName) bool {
	if r.pods == nil {
		return false
	}
	_, ok, err := r.pods.informer.GetIndexer().GetByKey(key.String())
	return ok && err == nil
}

// KeptBakePods returns the pods the bake pod store holds for the model
// owner ("namespace/name"), as its event handler last put them.
func (r *OpenMedModelReconciler) KeptBakePods(owner string) []corev1.Pod {
	if r.pods == nil {
		return nil
	}
	return r.pods.pods(owner)
}
