package store

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// A pod changes a model's verdict only when its controller is a
// ReplicaSet whose controller is the target Deployment, by UID (see the
// reconciler's replicasets.go).
//
// The ReplicaSets of baking versions are in a store of their own, as
// metadata, selected as the baking pods are (the bake label, which the
// Deployment controller copies from the pod template onto the ReplicaSet,
// and the shard's requirements): a bake's pods are verified with no
// request. A pod whose ReplicaSet the store does not hold (a version
// without a bake whose pod waits for a node, a model that moved between
// shards, a store behind its watch) has its ReplicaSet read once, by name,
// and the verdict is kept for the model.

// keptReplicaSet is a ReplicaSet as the ReplicaSet store keeps it: its
// identity and its controller's UID when that is a Deployment.
type keptReplicaSet struct {
	storedMeta
	uid types.UID
	// deployment is the UID of the ReplicaSet's controller when it is a
	// Deployment of apps/v1, else "".
	deployment types.UID
}

// deploymentAPIVersion is the apiVersion of a Deployment reference.
var deploymentAPIVersion = appsv1.SchemeGroupVersion.String()

// ControllingDeployment returns the UID of the Deployment that controls
// an object with these owner references, "" for none.
func ControllingDeployment(refs []metav1.OwnerReference) types.UID {
	for _, ref := range refs {
		if ref.Controller != nil && *ref.Controller {
			if ref.Kind == "Deployment" && ref.APIVersion == deploymentAPIVersion {
				return ref.UID
			}
			return ""
		}
	}
	return ""
}

// keepReplicaSet is the ReplicaSet store's transform.
func keepReplicaSet(obj any) (any, error) {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return obj, nil
	}
	k := &keptReplicaSet{uid: m.UID, deployment: ControllingDeployment(m.OwnerReferences)}
	k.Namespace, k.Name, k.ResourceVersion = intern(m.Namespace), m.Name, m.ResourceVersion
	k.CreationTimestamp, k.DeletionTimestamp = m.CreationTimestamp, m.DeletionTimestamp
	return k, nil
}

// ReplicaSets is an informer of the ReplicaSets its selector picks, as
// metadata, each kept as a keptReplicaSet. As a source it wakes nothing
// (the Deployment's and the pods' events do) but makes the controller wait
// for its first list.
type ReplicaSets struct {
	informer     toolscache.SharedIndexInformer
	registration toolscache.ResourceEventHandlerRegistration
}

const replicaSetStoreDescription = "ReplicaSets of baking versions"

// newReplicaSets builds the store on a watching client: the ReplicaSets
// selector picks in namespace ("" for all), as metadata.
func newReplicaSets(c client.WithWatch, namespace string, selector labels.Selector) (*ReplicaSets, error) {
	lw := listWatch(c, namespace, metav1.ListOptions{LabelSelector: selector.String()}, func() client.ObjectList {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind("ReplicaSetList"))
		return list
	})
	inf := toolscache.NewSharedIndexInformerWithOptions(lw, &metav1.PartialObjectMetadata{}, toolscache.SharedIndexInformerOptions{
		ObjectDescription: replicaSetStoreDescription,
	})
	if err := inf.SetTransform(keepReplicaSet); err != nil {
		return nil, err
	}
	return &ReplicaSets{informer: inf}, nil
}

// get returns the kept ReplicaSet namespace/name, or nil.
func (s *ReplicaSets) get(namespace, name string) *keptReplicaSet {
	obj, ok, err := s.informer.GetStore().GetByKey(namespace + "/" + name)
	if err != nil || !ok {
		return nil
	}
	k, _ := obj.(*keptReplicaSet)
	return k
}

// Get returns the UID of the kept ReplicaSet namespace/name and the UID of
// the Deployment that controls it ("" for none), and whether the store
// holds it.
func (s *ReplicaSets) Get(namespace, name string) (uid, deployment types.UID, ok bool) {
	if k := s.get(namespace, name); k != nil {
		return k.uid, k.deployment, true
	}
	return "", "", false
}

var _ source.TypedSyncingSource[reconcile.Request] = (*ReplicaSets)(nil)

// Start runs the informer until ctx ends.
func (s *ReplicaSets) Start(ctx context.Context, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	// A handler of no events: its registration says when the first list
	// was handed over (waitForStore).
	reg, err := s.informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{})
	if err != nil {
		return fmt.Errorf("watch %s: %w", replicaSetStoreDescription, err)
	}
	s.registration = reg
	go s.informer.RunWithContext(ctx)
	return nil
}

// WaitForSync waits for the first list (waitForStore).
func (s *ReplicaSets) WaitForSync(ctx context.Context) error {
	return waitForStore(ctx, replicaSetStoreDescription, s.informer, s.registration)
}

func (s *ReplicaSets) String() string { return replicaSetStoreDescription }
