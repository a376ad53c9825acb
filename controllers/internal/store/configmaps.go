package store

import (
	"context"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// The manifest ConfigMaps are not in the manager's cache either: a cached
// *corev1.ConfigMap costs about 1.1 KiB with the cache's indexes (its
// structs alone are 0.3 KiB, whatever is pruned), and a model has two of
// them once it upgraded. The ConfigMap store is an informer of its own that
// keeps a keptConfigMap per ConfigMap, held by its owner (ownerMap), and a
// source that wakes a ConfigMap's owner, as Owns would.

// The store watches the ConfigMaps as metadata only: whoever may create a
// ConfigMap may label it as the operator's, with 1 MiB of data, in any
// namespace; the operator receives none of that data. What a manifest
// ConfigMap holds is known from the model's record of the ConfigMaps the
// operator wrote or read (status.verifiedConfigMaps, by UID), or read from
// the API server, one ConfigMap, when a pass needs it
// (rollout.Plan.ReadConfigMaps).

// keptConfigMap is a manifest ConfigMap as the ConfigMap store keeps it:
// its identity, its controller reference of kind OpenMedModel and, in a
// shard, its shard labels; configMap returns it as a *corev1.ConfigMap
// without data.
type keptConfigMap struct {
	namespace, name, resourceVersion string
	uid                              types.UID
	created                          metav1.Time
	deleted                          *metav1.Time
	ownerReferences                  []metav1.OwnerReference
	// labels is the shared map of its shard labels (sharedLabels), nil
	// outside a shard.
	labels map[string]string
}

// The values the kept pointers to booleans point at: read only.
var (
	keptTrue  = true
	keptFalse = false
)

// sharedBool returns a pointer to a shared true or false for b, nil for nil.
func sharedBool(b *bool) *bool {
	switch {
	case b == nil:
		return nil
	case *b:
		return &keptTrue
	default:
		return &keptFalse
	}
}

// keepConfigMap is the ConfigMap store's transform: a ConfigMap's metadata
// (*metav1.PartialObjectMetadata, or a *corev1.ConfigMap's) becomes the
// *keptConfigMap of it, with
// the shard label keys shard; anything else (a tombstone) is returned as
// it is. Of the owner references only the controller reference of kind
// OpenMedModel is kept, whatever else the ConfigMap carries.
func keepConfigMap(obj any, shard []string) (any, error) {
	var m *metav1.ObjectMeta
	switch o := obj.(type) {
	case *metav1.PartialObjectMetadata:
		m = &o.ObjectMeta
	case *corev1.ConfigMap:
		m = &o.ObjectMeta
	default:
		return obj, nil
	}
	k := &keptConfigMap{namespace: intern(m.Namespace), name: m.Name, resourceVersion: m.ResourceVersion, uid: m.UID,
		created: m.CreationTimestamp, deleted: m.DeletionTimestamp}
	if len(shard) > 0 {
		k.labels = sharedLabels(m.Labels, shard)
	}
	for _, ref := range m.OwnerReferences {
		if ref.Controller != nil && *ref.Controller {
			if ref.Kind == "OpenMedModel" {
				k.ownerReferences = []metav1.OwnerReference{{APIVersion: intern(ref.APIVersion), Kind: intern(ref.Kind), Name: ref.Name, UID: ref.UID,
					Controller: sharedBool(ref.Controller), BlockOwnerDeletion: sharedBool(ref.BlockOwnerDeletion)}}
			}
			break
		}
	}
	return k, nil
}

// configMap returns the kept ConfigMap as a *corev1.ConfigMap without data,
// a copy the caller may change.
func (k *keptConfigMap) configMap() *corev1.ConfigMap {
	cm := &corev1.ConfigMap{TypeMeta: configMapTypeMeta}
	k.objectMeta().DeepCopyInto(&cm.ObjectMeta)
	return cm
}

// configMapTypeMeta is the kind of every ConfigMap the store returns.
var configMapTypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}

// objectMeta returns the kept metadata, sharing its slices and maps.
func (k *keptConfigMap) objectMeta() *metav1.ObjectMeta {
	return &metav1.ObjectMeta{Namespace: k.namespace, Name: k.name, UID: k.uid, ResourceVersion: k.resourceVersion,
		CreationTimestamp: k.created, DeletionTimestamp: k.deleted, OwnerReferences: k.ownerReferences, Labels: k.labels}
}

// GetObjectMeta makes a kept ConfigMap an object to client-go's store (its
// key and index functions read it with meta.Accessor).
func (k *keptConfigMap) GetObjectMeta() metav1.Object { return k.objectMeta() }

// controllerRef is k's controller owner reference of kind OpenMedModel, or
// nil. The API server lets an object have one controller reference only.
func (k *keptConfigMap) controllerRef() *metav1.OwnerReference {
	for i, ref := range k.ownerReferences {
		if ref.Controller != nil && *ref.Controller && ref.Kind == "OpenMedModel" {
			return &k.ownerReferences[i]
		}
	}
	return nil
}

// controllerUID returns the uid of the OpenMedModel that controls the kept
// ConfigMap, "" for none.
func (k *keptConfigMap) controllerUID() types.UID {
	if ref := k.controllerRef(); ref != nil {
		return ref.UID
	}
	return ""
}

// controller is the OpenMedModel whose controller owner reference k
// carries (an OpenMedModel of openmed.ai/v1alpha1, the version the CRD
// serves; namespaced, so in k's namespace), or false.
func (k *keptConfigMap) controller() (types.NamespacedName, bool) {
	ref := k.controllerRef()
	if ref == nil {
		return types.NamespacedName{}, false
	}
	if gv, err := schema.ParseGroupVersion(ref.APIVersion); err != nil || gv != v1alpha1.GroupVersion {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: k.namespace, Name: ref.Name}, true
}

// wakeController enqueues the model that controls k, as Owns' handler
// (EnqueueRequestForOwner, OnlyControllerOwner) does, without its REST
// mapping of the owner's kind on every event: the first list's at low
// priority when the queue has priorities.
// It reports whether k has a controller model.
func wakeController(q workqueue.TypedRateLimitingInterface[reconcile.Request], k *keptConfigMap, initialList bool) bool {
	model, ok := k.controller()
	if !ok {
		return false
	}
	req := reconcile.Request{NamespacedName: model}
	if pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request]); ok && initialList {
		pq.AddWithOpts(priorityqueue.AddOpts{Priority: ptr.To(handler.LowPriority)}, req)
		return true
	}
	q.Add(req)
	return true
}

// ConfigMaps is an informer of the manifest ConfigMaps the operator
// created (the managed-by label and the shard's requirements), in the
// manager's namespace or all of them, each kept as a keptConfigMap and held
// by its controller OpenMedModel's uid (byOwner); as a source it wakes that
// model when one was added, changed or went, and makes the controller wait
// for its first list.
type ConfigMaps struct {
	informer toolscache.SharedIndexInformer
	byOwner  *ownerMap[ownerKey, *keptConfigMap]
	// registration is Start's event handler.
	registration toolscache.ResourceEventHandlerRegistration
	woke         func()
}

const configMapStoreDescription = "manifest ConfigMaps"

// newConfigMaps builds the store on a watching client: the ConfigMaps
// selector picks, with the shard label keys shard. It starts with the
// controller (Start) and stops with it.
func newConfigMaps(c client.WithWatch, namespace string, selector labels.Selector, shard []string) (*ConfigMaps, error) {
	lw := listWatch(c, namespace, metav1.ListOptions{LabelSelector: selector.String()}, func() client.ObjectList {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMapList"))
		return list
	})
	inf := toolscache.NewSharedIndexInformerWithOptions(lw, &metav1.PartialObjectMetadata{}, toolscache.SharedIndexInformerOptions{
		ObjectDescription: configMapStoreDescription,
	})
	if err := inf.SetTransform(func(obj any) (any, error) { return keepConfigMap(obj, shard) }); err != nil {
		return nil, err
	}
	return &ConfigMaps{informer: inf, byOwner: newOwnerMap[ownerKey, *keptConfigMap]()}, nil
}

// ownerKey files a kept ConfigMap under its namespace and its controller's
// UID: a ConfigMap of another namespace that names a model's UID in its
// owner reference (no controller of Kubernetes honours one across
// namespaces) is not filed with the model's own.
type ownerKey struct {
	namespace string
	uid       types.UID
}

// owned returns the kept ConfigMaps whose controller is the OpenMedModel
// uid of namespace, by name, as pruned *corev1.ConfigMaps.
func (s *ConfigMaps) Owned(namespace string, uid types.UID) []corev1.ConfigMap {
	kept := s.byOwner.get(ownerKey{namespace, uid})
	if len(kept) == 0 {
		return nil
	}
	out := make([]corev1.ConfigMap, 0, len(kept))
	for _, k := range kept {
		out = append(out, *k.configMap())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Versions calls f with the name and resourceVersion of each kept
// ConfigMap whose controller is the OpenMedModel uid of namespace.
func (s *ConfigMaps) Versions(namespace string, uid types.UID, f func(name, version string)) {
	for _, k := range s.byOwner.get(ownerKey{namespace, uid}) {
		f(k.name, k.resourceVersion)
	}
}

// put holds k under its controller (none: not at all), in place of its
// earlier version; gone drops it.
func (s *ConfigMaps) put(k *keptConfigMap, gone bool) {
	uid := k.controllerUID()
	if uid == "" {
		return
	}
	same := func(o *keptConfigMap) bool { return o.name == k.name }
	if gone {
		s.byOwner.remove(ownerKey{k.namespace, uid}, same)
		return
	}
	s.byOwner.put(ownerKey{k.namespace, uid}, k, same)
}

var _ source.TypedSyncingSource[reconcile.Request] = (*ConfigMaps)(nil)

// Start runs the informer until ctx ends and hands every ConfigMap added,
// changed or gone to its controller OpenMedModel (wakeController), as Owns would: those of the first
// list at low priority.
func (s *ConfigMaps) Start(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	reg, err := s.informer.AddEventHandler(toolscache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, isInInitialList bool) {
			if k, ok := obj.(*keptConfigMap); ok {
				s.put(k, false)
				if wakeController(q, k, isInInitialList) {
					s.woke()
				}
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(*keptConfigMap)
			n, ok2 := newObj.(*keptConfigMap)
			if ok1 && ok2 {
				if o.controllerUID() != n.controllerUID() {
					s.put(o, true)
				}
				s.put(n, false)
				if woke := wakeController(q, o, false); wakeController(q, n, false) || woke {
					s.woke()
				}
			}
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if k, ok := obj.(*keptConfigMap); ok {
				s.put(k, true)
				if wakeController(q, k, false) {
					s.woke()
				}
			}
		},
	})
	if err != nil {
		return fmt.Errorf("watch %s: %w", configMapStoreDescription, err)
	}
	s.registration = reg
	go s.informer.RunWithContext(ctx)
	return nil
}

// WaitForSync waits for the first list and for its events to be handed
// over (waitForStore).
func (s *ConfigMaps) WaitForSync(ctx context.Context) error {
	return waitForStore(ctx, configMapStoreDescription, s.informer, s.registration)
}

func (s *ConfigMaps) String() string { return configMapStoreDescription }
