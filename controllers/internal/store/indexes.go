package store

import (
	"context"

	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/rollout"
)

// The reconciler's index of models is added to the manager's informer with
// each value under one key, "namespace/value". controller-runtime's
// IndexField keeps every value of a namespaced object twice (also under
// "__all_namespaces/value", for a List across namespaces, which the
// reconciler never makes), and every value of this index is one model's
// own, so each key costs a set of its own: about 0.3 KiB a model. It is
// read with the cache's List and client.MatchingFields in one namespace,
// which looks up "namespace/value" in the informer's index named "field:"
// and the field (controller-runtime's naming, see fieldIndexName). (The
// manifest ConfigMaps are indexed by owner in their own store,
// configmaps.go.)

// TargetIndexKey indexes OpenMedModels by the name of each Deployment they
// target or targeted.
const TargetIndexKey = ".openmed.targetName"

// fieldIndexName is the name controller-runtime's cache gives the index of
// a field (its internal.FieldIndexName): a List with
// client.MatchingFields{field: v} in namespace ns reads the key "ns/v" of
// it.
func fieldIndexName(field string) string { return "field:" + field }

// IndexModelsByTarget is TargetIndexKey's function.
func IndexModelsByTarget(obj any) ([]string, error) {
	m, ok := obj.(*v1alpha1.OpenMedModel)
	if !ok {
		return nil, nil
	}
	desired, previous := rollout.TargetNames(m)
	keys := make([]string, 0, 1+len(previous))
	for _, name := range append([]string{desired}, previous...) {
		keys = append(keys, m.Namespace+"/"+name)
	}
	return keys, nil
}

// AddIndex adds the index of field (f) to the manager cache's informer of
// obj's kind.
func AddIndex(ctx context.Context, c cache.Cache, obj client.Object, field string, f toolscache.IndexFunc) error {
	inf, err := c.GetInformer(ctx, obj, cache.BlockUntilSynced(false))
	if err != nil {
		return err
	}
	return inf.AddIndexers(toolscache.Indexers{fieldIndexName(field): f})
}
