package controllers

import (
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/controllers/internal/store"
	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/rollout"
)

// CacheByObject returns the cache settings the reconciler is built for; a
// manager that runs it should pass them in ctrl.Options.Cache.ByObject
// (models selects the OpenMedModels of a shard; nil means all). Every pass
// reads from the caches, so what they hold is the operator's memory:
//
//   - OpenMedModels are kept whole but for managedFields and the
//     annotations the operator does not read (a client-side apply's
//     last-applied-configuration); the strings every resource repeats
//     (condition types, reasons and messages) are stored once, and the
//     last and previous successful specs share the history entry that has
//     the same spec.
//   - ServiceAccounts are read by metadata, pruned to their names, and only
//     once a model names one (the informer starts with the first read):
//     the writes of a model are never made as one that does not exist.
//
// Deployments, manifest ConfigMaps and pods are not in the manager's cache:
// the reconciler keeps the claimed Deployments, the ConfigMaps it created
// and the pods of baking versions in stores of its own, in a smaller shape
// (package internal/store). A ConfigMap is watched as
// metadata and kept with its name, controller and version only
// (PruneConfigMap; in a shard, its shard labels too): what a manifest
// ConfigMap holds is known from the model's record of the ConfigMaps the
// operator wrote or read (status.verifiedConfigMaps, by UID), or read when
// a pass needs it. A Deployment is pruned
// to what a decision reads (PruneDeployment: the operator's annotations and
// labels, the shard labels, replicas, strategy, deadline, paused, the
// preload env entry of each container, status), and its managedFields to
// the entries and fields that attribute those: image, probes, resources,
// other labels and annotations (a client-side apply's
// last-applied-configuration can be the size of the object) are dropped.
//
// Deployments and ConfigMaps are selected by the labels the operator puts on
// what it writes (v1alpha1.ClaimedLabel on a Deployment's metadata, the
// managed-by label on a ConfigMap) and by the shard's requirements (the model's
// shard labels go with them): a Deployment no model of the shard targets
// is not held at all. The pods of baking versions are selected by the bake
// label and the shard's requirements, which the pod template carries from
// the apply that rolled it (bakePodSelector). The reconciler reads a target its store does not
// hold (not claimed yet, or claimed before the label existed) from the API
// server.
//
// The reconciler works on unpruned objects too; the pruning only saves
// memory.
func CacheByObject(models labels.Selector) map[client.Object]cache.ByObject {
	return map[client.Object]cache.ByObject{
		&v1alpha1.OpenMedModel{}:       {Label: models, Transform: store.PruneModel},
		store.ServiceAccountMetadata(): {Transform: store.PruneServiceAccount},
	}
}

// ShardLabels returns the label keys models (a shard's
// --watch-label-selector) selects on: the operator carries a model's values
// of them onto the Deployment and the manifest ConfigMaps it writes
// (rollout.Options.ShardLabels), so the shard's caches select those by the
// same requirements. Nil for no selector or one without requirements.
func ShardLabels(models labels.Selector) []string { return rollout.ShardLabels(models) }
