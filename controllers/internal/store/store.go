// Package store holds the OpenMedModel reconciler's own informers: the
// claimed Deployments, the manifest ConfigMaps, the pods of baking
// versions, the pods waiting for a node and the ReplicaSets of baking
// versions, each kept in the smallest shape a decision reads. They are
// what the operator remembers of other people's objects, so their shape is
// its memory: see docs/scale.md for the figures.
//
// Each store is a controller-runtime source: it wakes the models its
// objects belong to (through the callbacks of Config) and makes the
// controller wait for its first list. A pass reads them through Stores;
// nothing in a store decides anything.
package store

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/rollout"
)

// Config is what the stores are built from.
type Config struct {
	// Client lists and watches.
	Client client.WithWatch
	// Namespace is the one namespace watched, "" for all.
	Namespace string
	// Models is the shard's selector of OpenMedModels (nil: all): the
	// stores select what the operator wrote for those models only.
	Models labels.Selector
	// FieldManager is the operator's field manager on the Deployments: the
	// Deployment store keeps the managedFields entries that attribute the
	// fields a decision reads.
	FieldManager string
	// DeploymentModels maps a Deployment's metadata to the models its
	// events wake.
	DeploymentModels func(context.Context, client.Object) []reconcile.Request
	// InShard, when set, says whether a model is this shard's: the pods of
	// other shards' models wake nothing.
	InShard func(types.NamespacedName) bool
	// PodsWatched, when set, says whether a model wants the events of the
	// pods of its baking version.
	PodsWatched func(types.NamespacedName) bool
	// Woke, when set, counts a model woken by the store of kind (one of
	// the Woke* constants).
	Woke func(kind string)
}

// The kinds of store that wake a model, as Config.Woke names them.
const (
	WokeByDeployment = "deployment"
	WokeByConfigMap  = "manifest-configmap"
	WokeByBakePod    = "bake-pod"
	WokeByPendingPod = "pending-pod"
)

// Stores are the reconciler's stores.
type Stores struct {
	// Deployments are the claimed Deployments (deployments.go).
	Deployments *Deployments
	// ConfigMaps are the manifest ConfigMaps (configmaps.go).
	ConfigMaps *ConfigMaps
	// BakePods are the pods of baking versions (pods.go), PendingPods the
	// pods waiting for a node (pending.go).
	BakePods, PendingPods *Pods
	// ReplicaSets are the ReplicaSets of baking versions (replicasets.go).
	ReplicaSets *ReplicaSets

	deployments, configMaps, bakePods labels.Selector
}

// New builds the stores; they start with the controller they are sources
// of (Sources) and stop with it.
func New(cfg Config) (*Stores, error) {
	s := &Stores{
		deployments: shardSelector(cfg.Models, v1alpha1.ClaimedLabel, "true"),
		configMaps:  shardSelector(cfg.Models, v1alpha1.ManagedByLabel, v1alpha1.ManagedByValue),
		bakePods:    bakePodSelector(cfg.Models),
	}
	shard := rollout.ShardLabels(cfg.Models)
	var err error
	if s.Deployments, err = newDeployments(cfg.Client, cfg.Namespace, s.deployments, shard, cfg.FieldManager, cfg.DeploymentModels); err != nil {
		return nil, err
	}
	if s.ConfigMaps, err = newConfigMaps(cfg.Client, cfg.Namespace, s.configMaps, shard); err != nil {
		return nil, err
	}
	if s.BakePods, err = newBakePods(cfg.Client, cfg.Namespace, s.bakePods); err != nil {
		return nil, err
	}
	// The ReplicaSets of baking versions carry the bake label and the
	// shard's requirements as their pods do.
	if s.ReplicaSets, err = newReplicaSets(cfg.Client, cfg.Namespace, s.bakePods); err != nil {
		return nil, err
	}
	if s.PendingPods, err = newPendingPods(cfg.Client, cfg.Namespace); err != nil {
		return nil, err
	}
	if len(shard) > 0 {
		s.BakePods.models, s.PendingPods.models = cfg.InShard, cfg.InShard
	}
	s.BakePods.watched = cfg.PodsWatched
	woke := func(kind string) func() {
		if cfg.Woke == nil {
			return func() {}
		}
		return func() { cfg.Woke(kind) }
	}
	s.Deployments.woke, s.ConfigMaps.woke = woke(WokeByDeployment), woke(WokeByConfigMap)
	s.BakePods.woke, s.PendingPods.woke = woke(WokeByBakePod), woke(WokeByPendingPod)
	return s, nil
}

// Sources are the stores as the sources of a controller (WatchesRawSource).
func (s *Stores) Sources() []source.TypedSource[reconcile.Request] {
	return []source.TypedSource[reconcile.Request]{s.ConfigMaps, s.Deployments, s.BakePods, s.PendingPods, s.ReplicaSets}
}

// SelectsDeployment reports whether the Deployment store holds a
// Deployment with these labels.
func (s *Stores) SelectsDeployment(l map[string]string) bool {
	return s.deployments.Matches(labels.Set(l))
}

// SelectsConfigMap reports whether the ConfigMap store holds a ConfigMap
// with these labels.
func (s *Stores) SelectsConfigMap(l map[string]string) bool {
	return s.configMaps.Matches(labels.Set(l))
}

// SelectsBakePod reports whether the bake pod store holds a pod with these
// labels.
func (s *Stores) SelectsBakePod(l map[string]string) bool { return s.bakePods.Matches(labels.Set(l)) }

// Holds reports whether the ConfigMap store holds the ConfigMap key.
func (s *ConfigMaps) Holds(key types.NamespacedName) bool {
	_, ok, err := s.informer.GetIndexer().GetByKey(key.String())
	return ok && err == nil
}

// Holds reports whether the pod store holds the pod key.
func (s *Pods) Holds(key types.NamespacedName) bool {
	_, ok, err := s.informer.GetIndexer().GetByKey(key.String())
	return ok && err == nil
}

// StopEvents removes the pod store's event handler: the store keeps the
// pods as it last saw them, as a store whose watch broke does, and no pod
// event wakes a model. The tests of a broken watch use it.
func (s *Pods) StopEvents() error {
	return s.informer.RemoveEventHandler(s.registration)
}

// KeptAndPruned returns d as the Deployment store hands it out (kept
// compact, then rebuilt) and as pruning alone leaves it (PruneDeployment):
// the two must be the same. The tests of the pruning use it.
func KeptAndPruned(d *appsv1.Deployment, manager string) (kept, pruned *appsv1.Deployment) {
	k, _ := keepDeployment(d.DeepCopy(), nil, manager)
	return k.(*keptDeployment).deployment(), pruneDeployment(d.DeepCopy(), nil, manager)
}
