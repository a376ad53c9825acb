package controllers

import (
	"context"
	"fmt"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/openmed/openmed-operator/pkg/rollout"
)

// A pod changes a model's verdict (a bake, a pod the scheduler cannot
// place, the switch to replacing pods in place) only when it belongs to the
// target as Kubernetes' own controllers decide it: it is in the model's
// namespace and its controller is a ReplicaSet whose controller is the
// target Deployment, by UID (rollout.OwnedByTarget). The pod stores file
// pods by their owner annotation, which anyone who may create a pod can
// copy; the UIDs of that chain cannot be copied.
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

// controllingDeployment returns the UID of the Deployment that controls
// an object with these owner references, "" for none.
func controllingDeployment(refs []metav1.OwnerReference) types.UID {
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
	k := &keptReplicaSet{uid: m.UID, deployment: controllingDeployment(m.OwnerReferences)}
	k.Namespace, k.Name, k.ResourceVersion = intern(m.Namespace), m.Name, m.ResourceVersion
	k.CreationTimestamp, k.DeletionTimestamp = m.CreationTimestamp, m.DeletionTimestamp
	return k, nil
}

// replicaSetStore is an informer of the ReplicaSets its selector picks, as
// metadata, each kept as a keptReplicaSet. As a source it wakes nothing
// (the Deployment's and the pods' events do) but makes the controller wait
// for its first list.
type replicaSetStore struct {
	informer     toolscache.SharedIndexInformer
	registration toolscache.ResourceEventHandlerRegistration
}

const replicaSetStoreDescription = "ReplicaSets of baking versions"

// newReplicaSetStore builds the store on a watching client: the ReplicaSets
// selector picks in namespace ("" for all), as metadata.
func newReplicaSetStore(c client.WithWatch, namespace string, selector labels.Selector) (*replicaSetStore, error) {
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
	return &replicaSetStore{informer: inf}, nil
}

// get returns the kept ReplicaSet namespace/name, or nil.
func (s *replicaSetStore) get(namespace, name string) *keptReplicaSet {
	obj, ok, err := s.informer.GetStore().GetByKey(namespace + "/" + name)
	if err != nil || !ok {
		return nil
	}
	k, _ := obj.(*keptReplicaSet)
	return k
}

var _ source.TypedSyncingSource[reconcile.Request] = (*replicaSetStore)(nil)

// Start runs the informer until ctx ends.
func (s *replicaSetStore) Start(ctx context.Context, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
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
func (s *replicaSetStore) WaitForSync(ctx context.Context) error {
	return waitForStore(ctx, replicaSetStoreDescription, s.informer, s.registration)
}

func (s *replicaSetStore) String() string { return replicaSetStoreDescription }

// replicaSetVerdicts keeps, per model, whether the ReplicaSets read from
// the API server (those the store did not hold) are its target's: by the
// ReplicaSet's UID, for the target Deployment's UID.
type replicaSetVerdicts struct {
	mu     sync.Mutex
	models map[types.NamespacedName]*modelReplicaSets
}

// modelReplicaSets are one model's verdicts on ReplicaSets read from the
// API server, for the target Deployment deployment.
type modelReplicaSets struct {
	deployment types.UID
	owned      map[types.UID]bool
}

// maxReplicaSetVerdicts bounds a model's verdicts: pods of the model's
// namespace may name any number of ReplicaSets.
const maxReplicaSetVerdicts = 16

func newReplicaSetVerdicts() *replicaSetVerdicts {
	return &replicaSetVerdicts{models: map[types.NamespacedName]*modelReplicaSets{}}
}

// get returns the verdict on the ReplicaSet uid for model's target
// deployment, and whether there is one.
func (v *replicaSetVerdicts) get(model types.NamespacedName, deployment, uid types.UID) (owned, ok bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	m := v.models[model]
	if m == nil || m.deployment != deployment {
		return false, false
	}
	owned, ok = m.owned[uid]
	return owned, ok
}

// put keeps the verdict on the ReplicaSet uid for model's target
// deployment.
func (v *replicaSetVerdicts) put(model types.NamespacedName, deployment, uid types.UID, owned bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	m := v.models[model]
	if m == nil || m.deployment != deployment || len(m.owned) >= maxReplicaSetVerdicts {
		m = &modelReplicaSets{deployment: deployment, owned: map[types.UID]bool{}}
		v.models[model] = m
	}
	m.owned[uid] = owned
}

func (v *replicaSetVerdicts) forget(model types.NamespacedName) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.models, model)
}

// targetReplicaSets returns the UIDs of the target Deployment's
// ReplicaSets (rollout.Observed.ReplicaSets) among the controllers of the
// pods of target's namespace in pods: from the ReplicaSet store, or read
// from the API server when the store does not hold one (read then reports
// true). A ReplicaSet of that name with another UID, or one that does not
// exist, is not the target's.
func (r *OpenMedModelReconciler) targetReplicaSets(ctx context.Context, model types.NamespacedName, target *appsv1.Deployment, pods ...[]corev1.Pod) (out []types.UID, read bool, err error) {
	decided := map[types.UID]bool{}
	for _, list := range pods {
		for i := range list {
			p := &list[i]
			name, uid := podReplicaSet(p)
			if p.Namespace != target.Namespace || name == "" || uid == "" {
				continue
			}
			if _, ok := decided[uid]; ok {
				continue
			}
			owned, ok := false, false
			if k := r.replicaSets.get(p.Namespace, name); k != nil && k.uid == uid {
				owned, ok = k.deployment == target.UID, true
			} else {
				owned, ok = r.rsVerdicts.get(model, target.UID, uid)
			}
			if !ok {
				read = true
				if owned, err = r.readReplicaSet(ctx, p.Namespace, name, uid, target.UID); err != nil {
					return nil, read, err
				}
				r.rsVerdicts.put(model, target.UID, uid, owned)
			}
			decided[uid] = owned
			if owned {
				out = append(out, uid)
			}
		}
	}
	return out, read, nil
}

// readReplicaSet reads the ReplicaSet namespace/name from the API server,
// as metadata, and reports whether it is the one of UID uid and the
// Deployment of UID deployment controls it.
func (r *OpenMedModelReconciler) readReplicaSet(ctx context.Context, namespace, name string, uid, deployment types.UID) (bool, error) {
	rs := &metav1.PartialObjectMetadata{}
	rs.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, rs); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("read the ReplicaSet %s/%s of a pod of the target: %w", namespace, name, err)
	}
	return rs.UID == uid && controllingDeployment(rs.OwnerReferences) == deployment, nil
}

// judgedPods are the pods whose ReplicaSets a pass verifies: every bake
// pod, and of the pods waiting for a node those the scheduler could not
// place (rollout.Unschedulable), the only ones a decision reads.
func judgedPods(bake, pending []corev1.Pod) [][]corev1.Pod {
	var unplaced []corev1.Pod
	for i := range pending {
		if rollout.Unschedulable(&pending[i]) != nil {
			unplaced = append(unplaced, pending[i])
		}
	}
	return [][]corev1.Pod{bake, unplaced}
}
