package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"unique"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/rollout"
)

// The Deployments the operator claimed are not in the manager's cache
// either: a cached *appsv1.Deployment costs about 4 KiB however much is
// pruned from it (its structs alone are 1.6 KiB, its label and annotation
// maps and its managedFields most of the rest). The Deployment store is an
// informer of its own that keeps a keptDeployment per Deployment — what
// PruneDeployment keeps, about a third of the size — and a source that
// wakes the models of a Deployment that changed.

// keptDeployment is a Deployment as the Deployment store keeps it: exactly
// what PruneDeployment keeps, in a smaller shape; deployment returns it as
// the pruned *appsv1.Deployment.
type keptDeployment struct {
	// storedMeta, UID and Generation are the namespace, name, uid,
	// resourceVersion, generation and the creation and deletion times:
	// what it keeps of the metadata but its labels, annotations and
	// managedFields.
	storedMeta
	UID        types.UID
	Generation int64

	// labels, annotations, templateLabels and templateAnnotations are the
	// kept labels and annotations as key, value pairs sorted by key.
	labels, annotations, templateLabels, templateAnnotations []string

	// managedFields are the pruned managedFields entries.
	managedFields []keptFields

	// replicas and progressDeadlineSeconds are the spec's, set when has*:
	// values, not pointers, as the strategy's and the env entries' fields
	// below and the interned strings are: every pointer the store keeps is
	// one more object the collector visits at each cycle, per Deployment.
	replicas, progressDeadlineSeconds       int32
	hasReplicas, hasProgressDeadlineSeconds bool
	paused                                  bool
	strategy                                keptStrategy
	// containers are each container's name and preload env entry.
	containers []keptContainer
	// readinessGates are the pod template's readiness gates' condition
	// types.
	readinessGates []corev1.PodConditionType
	status         appsv1.DeploymentStatus
	// selector is spec.selector as a label selector string: the pass that
	// ends a bake lists the version's pods by it (podSelector).
	selector string
}

// keptFields is a pruned managedFields entry. Its field set is stored once
// for all the entries that have the same one (unique.Handle): the entries
// of one manager on Deployments of one shape are alike.
type keptFields struct {
	manager, apiVersion, fieldsType, subresource string
	operation                                    metav1.ManagedFieldsOperationType
	time                                         metav1.Time
	fields                                       unique.Handle[string]
	// hasTime, hasFields: the entry had a time, a field set (fields is
	// its JSON).
	hasTime, hasFields bool
}

// keptStrategy is a DeploymentStrategy without its pointers.
type keptStrategy struct {
	typ appsv1.DeploymentStrategyType
	// rolling: the strategy has a rollingUpdate, whose fields are set
	// when has*.
	rolling, hasMaxUnavailable, hasMaxSurge bool
	maxUnavailable, maxSurge                intstr.IntOrString
}

func keepStrategy(s appsv1.DeploymentStrategy) keptStrategy {
	k := keptStrategy{typ: appsv1.DeploymentStrategyType(intern(string(s.Type)))}
	if r := s.RollingUpdate; r != nil {
		k.rolling = true
		if r.MaxUnavailable != nil {
			k.hasMaxUnavailable, k.maxUnavailable = true, internIntOrString(*r.MaxUnavailable)
		}
		if r.MaxSurge != nil {
			k.hasMaxSurge, k.maxSurge = true, internIntOrString(*r.MaxSurge)
		}
	}
	return k
}

func (k keptStrategy) strategy() appsv1.DeploymentStrategy {
	s := appsv1.DeploymentStrategy{Type: k.typ}
	if k.rolling {
		s.RollingUpdate = &appsv1.RollingUpdateDeployment{}
		if k.hasMaxUnavailable {
			s.RollingUpdate.MaxUnavailable = ptr.To(k.maxUnavailable)
		}
		if k.hasMaxSurge {
			s.RollingUpdate.MaxSurge = ptr.To(k.maxSurge)
		}
	}
	return s
}

func internIntOrString(v intstr.IntOrString) intstr.IntOrString {
	v.StrVal = intern(v.StrVal)
	return v
}

// keptContainer is a container's name and its preload env entries.
type keptContainer struct {
	name string
	env  []keptEnv
}

// maxKeptEnvValue bounds the literal value of a kept env entry.
const maxKeptEnvValue = 256

// keptEnv is an env entry. The operator's (a ConfigMap key reference) is
// kept as its ConfigMap's name and key; any other source as it is.
type keptEnv struct {
	name, value string
	// configMap and key are valueFrom.configMapKeyRef's name and key when
	// byKey (and the Kopf operator's status has no optional field).
	byKey          bool
	configMap, key string
	other          *corev1.EnvVarSource
}

func keepEnv(e corev1.EnvVar) keptEnv {
	k := keptEnv{name: intern(e.Name), value: e.Value}
	if len(k.value) > maxKeptEnvValue {
		// A literal value on the preload entry is another manager's,
		// which the operator replaces (its content is never read): a
		// digest keeps it distinct and bounded.
		k.value = rollout.Digest([]byte(k.value))
	}
	switch from := e.ValueFrom; {
	case from == nil:
	case from.ConfigMapKeyRef != nil && from.ConfigMapKeyRef.Optional == nil &&
		from.FieldRef == nil && from.ResourceFieldRef == nil && from.SecretKeyRef == nil && from.FileKeyRef == nil:
		k.byKey, k.configMap, k.key = true, from.ConfigMapKeyRef.Name, intern(from.ConfigMapKeyRef.Key)
	default:
		k.other = from.DeepCopy()
	}
	return k
}

func (k keptEnv) envVar() corev1.EnvVar {
	e := corev1.EnvVar{Name: k.name, Value: k.value}
	switch {
	case k.byKey:
		e.ValueFrom = &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: k.configMap}, Key: k.key}}
	case k.other != nil:
		e.ValueFrom = k.other.DeepCopy()
	}
	return e
}

// keepDeployment is the Deployment store's transform: a *appsv1.Deployment
// becomes the *keptDeployment of what pruneDeployment keeps (shard are the
// shard label keys, manager the operator's field manager); anything else (a
// tombstone) is returned as it is.
func keepDeployment(obj any, shard []string, manager string) (any, error) {
	d, ok := obj.(*appsv1.Deployment)
	if !ok {
		return obj, nil
	}
	p := pruneDeployment(d, shard, manager)
	k := &keptDeployment{
		labels:              pairs(p.Labels),
		annotations:         pairs(p.Annotations),
		templateLabels:      pairs(p.Spec.Template.Labels),
		templateAnnotations: pairs(p.Spec.Template.Annotations),
		paused:              p.Spec.Paused,
		strategy:            keepStrategy(p.Spec.Strategy),
		status:              p.Status,
	}
	if r := p.Spec.Replicas; r != nil {
		k.replicas, k.hasReplicas = *r, true
	}
	if s := p.Spec.ProgressDeadlineSeconds; s != nil {
		k.progressDeadlineSeconds, k.hasProgressDeadlineSeconds = *s, true
	}
	if sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector); err == nil && !sel.Empty() {
		k.selector = sel.String()
	}
	k.Namespace, k.Name, k.UID, k.ResourceVersion, k.Generation = p.Namespace, p.Name, p.UID, p.ResourceVersion, p.Generation
	k.CreationTimestamp, k.DeletionTimestamp = p.CreationTimestamp, p.DeletionTimestamp
	if n := len(p.ManagedFields); n > 0 {
		k.managedFields = make([]keptFields, n)
		for i, e := range p.ManagedFields {
			// A handful of managers write the Deployments of a
			// cluster: their names are interned.
			f := keptFields{manager: intern(e.Manager), apiVersion: intern(e.APIVersion), fieldsType: intern(e.FieldsType),
				subresource: intern(e.Subresource), operation: metav1.ManagedFieldsOperationType(intern(string(e.Operation)))}
			if e.Time != nil {
				f.time, f.hasTime = *e.Time, true
			}
			if e.FieldsV1 != nil {
				f.fields, f.hasFields = unique.Make(string(e.FieldsV1.Raw)), true
			}
			k.managedFields[i] = f
		}
	}
	for _, g := range p.Spec.Template.Spec.ReadinessGates {
		k.readinessGates = append(k.readinessGates, g.ConditionType)
	}
	if n := len(p.Spec.Template.Spec.Containers); n > 0 {
		k.containers = make([]keptContainer, n)
		for i, c := range p.Spec.Template.Spec.Containers {
			k.containers[i] = keptContainer{name: intern(c.Name)}
			if len(c.Env) > 0 {
				k.containers[i].env = make([]keptEnv, len(c.Env))
				for j, e := range c.Env {
					k.containers[i].env[j] = keepEnv(e)
				}
			}
		}
	}
	return k, nil
}

// pairs returns m's keys and values, sorted by key, in one slice; nil for
// an empty map. The strings are the interned ones operatorKeys kept.
func pairs(m map[string]string) []string {
	if len(m) == 0 {
		return nil
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]string, 0, 2*len(keys))
	for _, k := range keys {
		out = append(out, k, m[k])
	}
	return out
}

// toMap is the inverse of pairs.
func toMap(kv []string) map[string]string {
	if len(kv) == 0 {
		return nil
	}
	m := make(map[string]string, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// lookup returns the value of key in kv (pairs), "" when absent.
func lookup(kv []string, key string) string {
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i] == key {
			return kv[i+1]
		}
	}
	return ""
}

// deploymentTypeMeta is the kind of every Deployment the store returns.
var deploymentTypeMeta = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}

// deployment returns the kept Deployment as the pruned *appsv1.Deployment
// (PruneDeployment's result), a copy the caller may change.
func (k *keptDeployment) deployment() *appsv1.Deployment {
	d := &appsv1.Deployment{TypeMeta: deploymentTypeMeta}
	d.Namespace, d.Name, d.UID, d.ResourceVersion, d.Generation = k.Namespace, k.Name, k.UID, k.ResourceVersion, k.Generation
	d.CreationTimestamp, d.DeletionTimestamp = k.CreationTimestamp, k.DeletionTimestamp.DeepCopy()
	d.Labels, d.Annotations = toMap(k.labels), toMap(k.annotations)
	if n := len(k.managedFields); n > 0 {
		d.ManagedFields = make([]metav1.ManagedFieldsEntry, n)
		for i, f := range k.managedFields {
			e := metav1.ManagedFieldsEntry{Manager: f.manager, Operation: f.operation, APIVersion: f.apiVersion,
				FieldsType: f.fieldsType, Subresource: f.subresource}
			if f.hasTime {
				e.Time = ptr.To(f.time)
			}
			if f.hasFields {
				e.FieldsV1 = &metav1.FieldsV1{Raw: []byte(f.fields.Value())}
			}
			d.ManagedFields[i] = e
		}
	}
	spec := &d.Spec
	if k.hasReplicas {
		spec.Replicas = ptr.To(k.replicas)
	}
	if k.hasProgressDeadlineSeconds {
		spec.ProgressDeadlineSeconds = ptr.To(k.progressDeadlineSeconds)
	}
	spec.Paused = k.paused
	spec.Strategy = k.strategy.strategy()
	spec.Template.Labels, spec.Template.Annotations = toMap(k.templateLabels), toMap(k.templateAnnotations)
	for _, g := range k.readinessGates {
		spec.Template.Spec.ReadinessGates = append(spec.Template.Spec.ReadinessGates, corev1.PodReadinessGate{ConditionType: g})
	}
	if n := len(k.containers); n > 0 {
		spec.Template.Spec.Containers = make([]corev1.Container, n)
		for i, c := range k.containers {
			out := &spec.Template.Spec.Containers[i]
			out.Name = c.name
			for _, e := range c.env {
				out.Env = append(out.Env, e.envVar())
			}
		}
	}
	k.status.DeepCopyInto(&d.Status)
	return d
}

// GetObjectMeta makes a kept Deployment an object to client-go's store.
func (k *keptDeployment) GetObjectMeta() metav1.Object {
	m := k.storedMeta.GetObjectMeta().(*metav1.ObjectMeta)
	m.UID, m.Generation = k.UID, k.Generation
	return m
}

// owner returns the kept openmed.ai/model-resource annotation.
func (k *keptDeployment) owner() string {
	return lookup(k.annotations, v1alpha1.ModelResourceAnnotation)
}

// Deployments is an informer of the Deployments the operator claimed
// (v1alpha1.ClaimedLabel and the shard's requirements), in the manager's
// namespace or all of them, each kept as a keptDeployment; as a source it
// wakes the models of a Deployment that was added, changed or went, and
// makes the controller wait for its first list.
type Deployments struct {
	informer toolscache.SharedIndexInformer
	// requests maps a Deployment's metadata (namespace, name, uid,
	// resourceVersion, generation, the owner annotation) to the models to
	// wake.
	requests func(context.Context, client.Object) []reconcile.Request
	// registration is Start's event handler.
	registration toolscache.ResourceEventHandlerRegistration
	woke         func()
}

const deploymentStoreDescription = "claimed Deployments"

// newDeployments builds the store on a watching client: the
// Deployments selector picks, pruned for the shard label keys shard and the
// operator's field manager. It starts with the controller (Start) and stops
// with it.
func newDeployments(c client.WithWatch, namespace string, selector labels.Selector, shard []string, manager string,
	requests func(context.Context, client.Object) []reconcile.Request) (*Deployments, error) {
	lw := listWatch(c, namespace, metav1.ListOptions{LabelSelector: selector.String()}, func() client.ObjectList { return &appsv1.DeploymentList{} })
	inf := toolscache.NewSharedIndexInformerWithOptions(lw, &appsv1.Deployment{}, toolscache.SharedIndexInformerOptions{
		ObjectDescription: deploymentStoreDescription,
	})
	if err := inf.SetTransform(func(obj any) (any, error) { return keepDeployment(obj, shard, manager) }); err != nil {
		return nil, err
	}
	return &Deployments{informer: inf, requests: requests}, nil
}

// kept returns what the store holds of the Deployment key, or nil.
func (s *Deployments) kept(key types.NamespacedName) *keptDeployment {
	obj, ok, err := s.informer.GetIndexer().GetByKey(key.String())
	if err != nil || !ok {
		return nil
	}
	k, _ := obj.(*keptDeployment)
	return k
}

// get returns the kept Deployment namespace/name as a pruned
// *appsv1.Deployment, or nil when the store does not hold it.
func (s *Deployments) Get(key types.NamespacedName) *appsv1.Deployment {
	if k := s.kept(key); k != nil {
		return k.deployment()
	}
	return nil
}

// Gated reports whether the store holds the Deployment key and its pod
// template carries the readiness gate of the golden request
// (v1alpha1.VerifiedCondition), without building the Deployment.
func (s *Deployments) Gated(key types.NamespacedName) bool {
	k := s.kept(key)
	return k != nil && slices.Contains(k.readinessGates, corev1.PodConditionType(v1alpha1.VerifiedCondition))
}

// version returns the resourceVersion of the Deployment key as the store
// holds it, and whether it holds it.
func (s *Deployments) Version(key types.NamespacedName) (string, bool) {
	if k := s.kept(key); k != nil {
		return k.ResourceVersion, true
	}
	return "", false
}

// podSelector returns the spec.selector of the Deployment key as the store
// keeps it, or nil when it does not hold the Deployment.
func (s *Deployments) PodSelector(key types.NamespacedName) labels.Selector {
	k := s.kept(key)
	if k == nil || k.selector == "" {
		return nil
	}
	sel, err := labels.Parse(k.selector)
	if err != nil {
		return nil
	}
	return sel
}

var _ source.TypedSyncingSource[reconcile.Request] = (*Deployments)(nil)

// Start runs the informer until ctx ends and hands every Deployment added,
// changed or gone to controller-runtime's EnqueueRequestsFromMapFunc with
// requests, as a Watches of Deployments would: the models of the old and of
// the new version of a change are woken, those of the first list and of a
// relist (an update to the same resourceVersion) at low priority.
func (s *Deployments) Start(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	h := handler.EnqueueRequestsFromMapFunc(s.requests)
	reg, err := s.informer.AddEventHandler(toolscache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, isInInitialList bool) {
			if m := keptMeta(obj); m != nil {
				h.Create(ctx, event.CreateEvent{Object: m, IsInInitialList: isInInitialList}, q)
				s.woke()
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			if o, n := keptMeta(oldObj), keptMeta(newObj); o != nil && n != nil {
				h.Update(ctx, event.UpdateEvent{ObjectOld: o, ObjectNew: n}, q)
				s.woke()
			}
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if m := keptMeta(obj); m != nil {
				h.Delete(ctx, event.DeleteEvent{Object: m}, q)
				s.woke()
			}
		},
	})
	if err != nil {
		return fmt.Errorf("watch %s: %w", deploymentStoreDescription, err)
	}
	s.registration = reg
	go s.informer.RunWithContext(ctx)
	return nil
}

// keptMeta returns what requests reads of a kept Deployment (namespace,
// name, uid, resourceVersion, generation, the owner annotation), nil for
// anything else.
func keptMeta(obj any) *metav1.PartialObjectMetadata {
	k, ok := obj.(*keptDeployment)
	if !ok {
		return nil
	}
	m := &metav1.PartialObjectMetadata{TypeMeta: deploymentTypeMeta}
	m.Namespace, m.Name, m.UID = k.Namespace, k.Name, k.UID
	m.ResourceVersion, m.Generation = k.ResourceVersion, k.Generation
	if owner := k.owner(); owner != "" {
		m.Annotations = map[string]string{v1alpha1.ModelResourceAnnotation: owner}
	}
	return m
}

// WaitForSync waits for the first list and for its events to be handed
// over: no pass reads a target from a store that has not seen it yet
// (waitForStore).
func (s *Deployments) WaitForSync(ctx context.Context) error {
	return waitForStore(ctx, deploymentStoreDescription, s.informer, s.registration)
}

// waitForStore waits for a store's informer to have its first list and,
// once Start registered it (reg), for its event handler to have handed
// that list over. A cancelled ctx (the manager stopping) is not an error.
func waitForStore(ctx context.Context, description string, inf toolscache.SharedIndexInformer, reg toolscache.ResourceEventHandlerRegistration) error {
	synced := []toolscache.InformerSynced{inf.HasSynced}
	if reg != nil {
		synced = append(synced, reg.HasSynced)
	}
	if !toolscache.WaitForCacheSync(ctx.Done(), synced...) {
		if errors.Is(ctx.Err(), context.Canceled) {
			return nil
		}
		return fmt.Errorf("the store of %s did not sync", description)
	}
	return nil
}

func (s *Deployments) String() string { return deploymentStoreDescription }
