package store

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/rollout"
)

// The pods of baking versions are not in the manager's cache: a cached
// *corev1.Pod costs about 2 KiB however much of it is pruned (the struct
// alone is 1.2 KiB), and an operator whose models all bake holds every pod
// of every target. The pod store is an informer of its own that keeps a
// bakePod per pod — what the bake reads, about a fifth of the size — and a
// source that wakes the model of a pod when that changes.

// bakePod is a pod as the operator's pod store keeps it: its identity, the
// operator's owner and manifest-hash annotations, its controller (a
// ReplicaSet) and pod-template-hash label, its node, creation and deletion
// times, whether it failed (an eviction) or is a disruption target, its
// Ready condition and, for its containers, their start and terminations.
// That is everything the bake judges (see rollout.BakeVersion.Judge); pod
// returns it as a corev1.Pod.
type bakePod struct {
	storedMeta

	// owner is the openmed.ai/model-resource annotation ("namespace/name"),
	// manifestHash the openmed.ai/model-manifest-hash annotation.
	owner, manifestHash string

	// replicaSet is the name of the pod's controller when it is a
	// ReplicaSet and replicaSetUID its UID, templateHash its
	// pod-template-hash label, node its node.
	replicaSet, templateHash, node string
	replicaSetUID                  types.UID

	// failed: phase Failed (the kubelet evicted or stopped the pod);
	// disrupted: a DisruptionTarget condition is True.
	failed, disrupted bool

	// ready is the pod's Ready condition, when it has one.
	ready *bakeCondition

	// containers are the containers that started running or show a
	// termination, in the pod's order; the others are not kept.
	containers []bakeContainer

	// gate is set when the pod's spec has the operator's readiness gate
	// (v1alpha1.VerifiedCondition): what the golden request needs of it.
	// Nil for the other pods, which so cost one pointer more.
	gate *gateState
}

// gateState is what a pod store keeps of a gated pod for the golden
// request: its IP, the named ports of its containers, whether its
// containers are ready and the gate's condition.
type gateState struct {
	containersReady bool
	ip              string
	ports           []namedPort
	verified        *verifiedCondition
}

// same reports whether two gate states say the same.
func (g *gateState) same(o *gateState) bool {
	if g == nil || o == nil {
		return g == o
	}
	return g.containersReady == o.containersReady && g.ip == o.ip && slices.Equal(g.ports, o.ports) &&
		(g.verified == nil) == (o.verified == nil) && (g.verified == nil || *g.verified == *o.verified)
}

// namedPort is a named container port of a gated pod.
type namedPort struct {
	name string
	port int32
}

// verifiedCondition is a gated pod's v1alpha1.VerifiedCondition: its
// status, reason, when it was last probed and changed and, when False, its message
// (bounded by the operator that wrote it).
type verifiedCondition struct {
	status                            corev1.ConditionStatus
	reason                            string
	message                           string
	lastProbeTime, lastTransitionTime metav1.Time
}

// bakeCondition is the pod's Ready condition: its status and when it last
// changed.
type bakeCondition struct {
	status             corev1.ConditionStatus
	lastTransitionTime metav1.Time
}

// bakeContainer is a container that started or terminated: when it started
// running, and the reasons and ends of its last termination and of its
// current state, when they are terminations.
type bakeContainer struct {
	name           string
	started        bool
	runningSince   metav1.Time
	lastTerminated bool
	lastReason     string
	lastFinished   metav1.Time
	terminated     bool
	reason         string
	finished       metav1.Time
}

// compactPod is the pod store's transform: a *corev1.Pod becomes a
// *bakePod; anything else (a bakePod already, a tombstone) is returned as
// it is.
func compactPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	owner, manifestHash := podAnnotations(p)
	out := &bakePod{owner: owner, manifestHash: manifestHash}
	out.Namespace, out.Name, out.ResourceVersion = intern(p.Namespace), p.Name, p.ResourceVersion
	if owner == "" {
		// No model's pod (another workload's, or a copy of a model's
		// pod template in another namespace): nothing is read of it,
		// only its key is kept.
		return out, nil
	}
	out.CreationTimestamp, out.DeletionTimestamp = p.CreationTimestamp, p.DeletionTimestamp
	out.replicaSet, out.replicaSetUID = PodReplicaSet(p)
	out.templateHash, out.node = intern(p.Labels[appsv1.DefaultDeploymentUniqueLabelKey]), intern(p.Spec.NodeName)
	out.failed = p.Status.Phase == corev1.PodFailed
	for _, c := range p.Status.Conditions {
		switch {
		case c.Type == corev1.PodReady:
			out.ready = &bakeCondition{status: corev1.ConditionStatus(intern(string(c.Status))), lastTransitionTime: c.LastTransitionTime}
		case c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue:
			out.disrupted = true
		}
	}
	keepVerification(out, p)
	for _, c := range p.Status.ContainerStatuses {
		last, state, running := c.LastTerminationState.Terminated, c.State.Terminated, c.State.Running
		started := running != nil && c.Started != nil && *c.Started
		if last == nil && state == nil && !started {
			continue
		}
		bc := bakeContainer{name: intern(c.Name), started: started}
		if started {
			bc.runningSince = running.StartedAt
		}
		if last != nil {
			bc.lastTerminated, bc.lastReason, bc.lastFinished = true, intern(last.Reason), last.FinishedAt
		}
		if state != nil {
			bc.terminated, bc.reason, bc.finished = true, intern(state.Reason), state.FinishedAt
		}
		out.containers = append(out.containers, bc)
	}
	return out, nil
}

// awaitsVerification reports whether p is a pod of the pod store that
// waits for the operator's golden request (bakePod.awaitsVerification).
func awaitsVerification(p keptPod) bool {
	b, ok := p.(*bakePod)
	return ok && b.awaitsVerification()
}

// maxVerifiedMessage bounds the message kept of a pod's verified
// condition: the operator writes at most rollout.MaxRefusalMessage bytes,
// but anyone who may patch the pod's status can write more.
const maxVerifiedMessage = 512

// keepVerification keeps, for a pod gated by the operator's readiness
// gate, what verifying it needs.
func keepVerification(out *bakePod, p *corev1.Pod) {
	if !slices.ContainsFunc(p.Spec.ReadinessGates, func(g corev1.PodReadinessGate) bool { return g.ConditionType == v1alpha1.VerifiedCondition }) {
		return
	}
	g := &gateState{ip: p.Status.PodIP}
	out.gate = g
	for _, c := range p.Spec.Containers {
		for _, port := range c.Ports {
			if port.Name != "" {
				g.ports = append(g.ports, namedPort{name: intern(port.Name), port: port.ContainerPort})
			}
		}
	}
	for _, c := range p.Status.Conditions {
		switch c.Type {
		case corev1.ContainersReady:
			g.containersReady = c.Status == corev1.ConditionTrue
		case v1alpha1.VerifiedCondition:
			v := &verifiedCondition{status: corev1.ConditionStatus(intern(string(c.Status))), reason: intern(c.Reason),
				lastProbeTime: c.LastProbeTime, lastTransitionTime: c.LastTransitionTime}
			if c.Status != corev1.ConditionTrue {
				v.message = c.Message
				if len(v.message) > maxVerifiedMessage {
					v.message = v.message[:maxVerifiedMessage]
				}
			}
			g.verified = v
		}
	}
}

// awaitsVerification reports whether the pod waits for the operator to
// verify it: gated, its containers ready, with an IP, not going, and no
// verdict yet. Such a pod wakes its model whether or not the model's pass
// asked to watch its pods: nothing else would make it Ready.
func (b *bakePod) awaitsVerification() bool {
	g := b.gate
	return g != nil && g.containersReady && g.ip != "" && g.verified == nil && b.DeletionTimestamp == nil && !b.failed
}

// pod returns the kept fields as a corev1.Pod, the way rollout.Observed
// takes pods.
func (b *bakePod) pod() corev1.Pod {
	p := corev1.Pod{}
	p.Namespace, p.Name, p.ResourceVersion = b.Namespace, b.Name, b.ResourceVersion
	p.CreationTimestamp, p.DeletionTimestamp = b.CreationTimestamp, b.DeletionTimestamp
	p.Annotations = map[string]string{}
	if b.owner != "" {
		p.Annotations[v1alpha1.ModelResourceAnnotation] = b.owner
	}
	if b.manifestHash != "" {
		p.Annotations[v1alpha1.ManifestHashAnnotation] = b.manifestHash
	}
	p.OwnerReferences = replicaSetRef(b.replicaSet, b.replicaSetUID)
	if b.templateHash != "" {
		p.Labels = map[string]string{appsv1.DefaultDeploymentUniqueLabelKey: b.templateHash}
	}
	p.Spec.NodeName = b.node
	if b.failed {
		p.Status.Phase = corev1.PodFailed
	}
	if b.ready != nil {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: b.ready.status, LastTransitionTime: b.ready.lastTransitionTime}}
	}
	if b.disrupted {
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue})
	}
	if g := b.gate; g != nil {
		p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: v1alpha1.VerifiedCondition}}
		p.Status.PodIP = g.ip
		if len(g.ports) > 0 {
			c := corev1.Container{}
			for _, port := range g.ports {
				c.Ports = append(c.Ports, corev1.ContainerPort{Name: port.name, ContainerPort: port.port})
			}
			p.Spec.Containers = []corev1.Container{c}
		}
		ready := corev1.ConditionFalse
		if g.containersReady {
			ready = corev1.ConditionTrue
		}
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.ContainersReady, Status: ready})
		if v := g.verified; v != nil {
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: v1alpha1.VerifiedCondition, Status: v.status,
				Reason: v.reason, Message: v.message, LastProbeTime: v.lastProbeTime, LastTransitionTime: v.lastTransitionTime})
		}
	}
	for _, c := range b.containers {
		cs := corev1.ContainerStatus{Name: c.name}
		if c.started {
			cs.Started = ptr.To(true)
			cs.State.Running = &corev1.ContainerStateRunning{StartedAt: c.runningSince}
		}
		if c.lastTerminated {
			cs.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{Reason: c.lastReason, FinishedAt: c.lastFinished}
		}
		if c.terminated {
			cs.State.Terminated = &corev1.ContainerStateTerminated{Reason: c.reason, FinishedAt: c.finished}
		}
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, cs)
	}
	return p
}

func (b *bakePod) ownerKey() string { return b.owner }

func (b *bakePod) wakes() bool { return true }

// sameAs reports whether two kept pods say the same to the bake: an update
// that changes nothing the bake reads (a new IP, a phase, a restart count
// of a container whose termination is already kept) wakes no model.
func (b *bakePod) sameAs(other keptPod) bool {
	o, ok := other.(*bakePod)
	if !ok {
		return false
	}
	if b.owner != o.owner || b.manifestHash != o.manifestHash || b.replicaSet != o.replicaSet || b.replicaSetUID != o.replicaSetUID || b.templateHash != o.templateHash ||
		b.node != o.node || b.failed != o.failed || b.disrupted != o.disrupted ||
		!b.CreationTimestamp.Equal(&o.CreationTimestamp) || !b.DeletionTimestamp.Equal(o.DeletionTimestamp) ||
		(b.ready == nil) != (o.ready == nil) || len(b.containers) != len(o.containers) {
		return false
	}
	if b.ready != nil && (b.ready.status != o.ready.status || !b.ready.lastTransitionTime.Equal(&o.ready.lastTransitionTime)) {
		return false
	}
	if !b.gate.same(o.gate) {
		return false
	}
	for i := range b.containers {
		x, y := b.containers[i], o.containers[i]
		if x.name != y.name || x.started != y.started || !x.runningSince.Equal(&y.runningSince) ||
			x.lastTerminated != y.lastTerminated || x.lastReason != y.lastReason || !x.lastFinished.Equal(&y.lastFinished) ||
			x.terminated != y.terminated || x.reason != y.reason || !x.finished.Equal(&y.finished) {
			return false
		}
	}
	return true
}

// podAnnotations returns the pod's owner annotation (the model it belongs
// to, "namespace/name") and manifest-hash annotation as a pod store keeps
// them: the owner only when it names a model of the pod's own namespace,
// the hash only when it is a digest. A pod of another namespace that
// carries a model's owner annotation (a copy of its pod template) is no
// pod of that model, and no value is kept that was not checked: an
// annotation may hold 256 KiB.
func podAnnotations(p *corev1.Pod) (owner, manifestHash string) {
	owner = p.Annotations[v1alpha1.ModelResourceAnnotation]
	if ns, _, ok := rollout.ParseOwnerKey(owner); !ok || ns != p.Namespace {
		return "", ""
	}
	if h := p.Annotations[v1alpha1.ManifestHashAnnotation]; rollout.IsDigest(h) {
		manifestHash = intern(h)
	}
	return intern(owner), manifestHash
}

// PodReplicaSet returns the name and UID of the pod's controller when it
// is a ReplicaSet (of apps/v1).
func PodReplicaSet(p *corev1.Pod) (string, types.UID) {
	if ref := metav1.GetControllerOfNoCopy(p); ref != nil && ref.Kind == "ReplicaSet" && ref.APIVersion == replicaSetAPIVersion {
		// Interned: the pods of one ReplicaSet share its name and UID.
		return intern(ref.Name), types.UID(intern(string(ref.UID)))
	}
	return "", ""
}

// replicaSetAPIVersion is the apiVersion of a ReplicaSet reference.
var replicaSetAPIVersion = appsv1.SchemeGroupVersion.String()

// replicaSetRef is the controller reference to the ReplicaSet name (uid),
// none for "".
func replicaSetRef(name string, uid types.UID) []metav1.OwnerReference {
	if name == "" {
		return nil
	}
	return []metav1.OwnerReference{{APIVersion: replicaSetAPIVersion, Kind: "ReplicaSet", Name: name, UID: uid, Controller: ptr.To(true)}}
}

// storedMeta is the metadata the reconciler's stores keep of an object:
// its namespace, name, resourceVersion and creation and deletion times,
// under the names metav1.ObjectMeta gives them, without its other fields
// (a third of the size).
type storedMeta struct {
	Namespace, Name, ResourceVersion string
	CreationTimestamp                metav1.Time
	DeletionTimestamp                *metav1.Time
}

func (m *storedMeta) GetNamespace() string { return m.Namespace }

func (m *storedMeta) GetName() string { return m.Name }

func (m *storedMeta) version() string { return m.ResourceVersion }

// GetObjectMeta makes a kept object one to client-go's store (its key and
// index functions read it with meta.Accessor).
func (m *storedMeta) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Namespace: m.Namespace, Name: m.Name, ResourceVersion: m.ResourceVersion,
		CreationTimestamp: m.CreationTimestamp, DeletionTimestamp: m.DeletionTimestamp}
}

// keptPod is a pod as a pod store keeps it: a compact copy of what a
// decision reads.
type keptPod interface {
	GetNamespace() string
	GetName() string
	// version is the pod's resourceVersion.
	version() string
	// ownerKey is the pod's openmed.ai/model-resource annotation
	// ("namespace/name"), or "" for a pod of no model.
	ownerKey() string
	// pod returns the kept fields as a corev1.Pod.
	pod() corev1.Pod
	// sameAs reports an update that changes nothing the store keeps for
	// its decision: it wakes no model.
	sameAs(keptPod) bool
	// wakes reports whether the pod's arrival, change or departure wakes
	// its model.
	wakes() bool
}

// Pods is an informer of the pods a selector picks, in the manager's
// namespace or all of them, each kept compact (a keptPod) by its transform
// and held by model; as a source it wakes a pod's model and makes the
// controller wait for its first list.
type Pods struct {
	informer    toolscache.SharedIndexInformer
	description string
	// byOwner holds the kept pods by their owner annotation, as Start's
	// handler saw them.
	byOwner *ownerMap[string, keptPod]
	// registration is Start's event handler.
	registration toolscache.ResourceEventHandlerRegistration
	// wakesSome: only some of the kept pods wake their model (keptPod
	// wakes), so the store remembers which did.
	wakesSome bool
	// models, when set, says whether a model is this shard's: the pods of
	// other shards' models wake nothing. A pod seen before its model is
	// in the cache wakes nothing either; the model's own arrival starts
	// its first pass, which reads the store.
	models func(types.NamespacedName) bool
	// watched, when set, says whether a model's pass wants its pods'
	// events (podWatchers): the others' events are kept, not woken for.
	watched func(types.NamespacedName) bool
	woke    func()
}

// newPodStore builds the store on a watching client: the pods selector
// picks, kept by transform. It starts with the controller (Start) and stops
// with it.
func newPodStore(c client.WithWatch, namespace string, selector metav1.ListOptions, transform toolscache.TransformFunc, description string) (*Pods, error) {
	lw := listWatch(c, namespace, selector, func() client.ObjectList { return &corev1.PodList{} })
	inf := toolscache.NewSharedIndexInformerWithOptions(lw, &corev1.Pod{}, toolscache.SharedIndexInformerOptions{
		ObjectDescription: description,
	})
	if err := inf.SetTransform(transform); err != nil {
		return nil, err
	}
	return &Pods{informer: inf, byOwner: newOwnerMap[string, keptPod](), description: description}, nil
}

// listWatch lists and watches, with c, the objects of newList's kind that
// selector picks in namespace ("" for all).
func listWatch(c client.WithWatch, namespace string, selector metav1.ListOptions, newList func() client.ObjectList) *toolscache.ListWatch {
	options := func(o metav1.ListOptions) *client.ListOptions {
		o.LabelSelector, o.FieldSelector = selector.LabelSelector, selector.FieldSelector
		return &client.ListOptions{Namespace: namespace, Limit: o.Limit, Continue: o.Continue, Raw: &o}
	}
	return &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			list := newList()
			return list, c.List(ctx, list, options(o))
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return c.Watch(ctx, newList(), options(o))
		},
	}
}

// newBakePods is the store of the pods selector picks (the bake label
// and, in a shard, the shard's requirements: see bakePodSelector), kept as
// bakePods.
func newBakePods(c client.WithWatch, namespace string, selector labels.Selector) (*Pods, error) {
	return newPodStore(c, namespace, metav1.ListOptions{LabelSelector: selector.String()}, compactPod, "pods of baking versions")
}

// bakePodSelector picks the pods of baking versions of the models models
// selects (a shard's; nil: all): the bake label, and the shard's
// requirements, which the pod template carries as its model does (the
// operator puts the model's shard labels on the template when it rolls the
// pods anyway, rollout.Options.ShardLabels). A shard's pod store then holds
// its own models' pods, and no pod of another shard wakes it.
func bakePodSelector(models labels.Selector) labels.Selector {
	return shardSelector(models, v1alpha1.BakeLabel, "true")
}

// pods returns the kept pods of the model owner ("namespace/name"), by
// name.
func (s *Pods) Owned(owner string) []corev1.Pod {
	kept := s.byOwner.get(owner)
	if len(kept) == 0 {
		return nil
	}
	out := make([]corev1.Pod, 0, len(kept))
	for _, p := range kept {
		out = append(out, p.pod())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// KeptBakePod returns p as the bake pod store keeps it, and whether it is
// a pod of the model owner ("namespace/name"): a pod read from the API
// server is judged in the same shape as a pod of the store.
func KeptBakePod(p *corev1.Pod, owner string) (corev1.Pod, bool) {
	kept, _ := compactPod(p)
	if b, ok := kept.(*bakePod); ok && b.owner == owner {
		return b.pod(), true
	}
	return corev1.Pod{}, false
}

// Versions calls f with the name and resourceVersion of each kept pod of
// the model owner ("namespace/name").
func (s *Pods) Versions(owner string, f func(name, version string)) {
	for _, p := range s.byOwner.get(owner) {
		f(p.GetName(), p.version())
	}
}

var _ source.TypedSyncingSource[reconcile.Request] = (*Pods)(nil)

// Start runs the informer until ctx ends and enqueues the model of every
// pod that was added, changed what the store keeps, or went.
func (s *Pods) Start(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	// woke holds the pods that woke their model: their change or departure
	// wakes it again even when what the watch delivers last (a pod that
	// left the selection when it was bound) would not.
	var mu sync.Mutex
	woke := map[types.NamespacedName]bool{}
	handle := func(obj any, gone bool) {
		if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj, gone = t.Obj, true
		}
		p, ok := obj.(keptPod)
		if !ok {
			return
		}
		key := types.NamespacedName{Namespace: p.GetNamespace(), Name: p.GetName()}
		s.put(p, gone)
		mu.Lock()
		wake := p.wakes() || woke[key]
		if p.wakes() && !gone && s.wakesSome {
			woke[key] = true
		} else {
			delete(woke, key)
		}
		mu.Unlock()
		if !wake {
			return
		}
		if ns, name, ok := strings.Cut(p.ownerKey(), "/"); ok && ns == p.GetNamespace() {
			model := types.NamespacedName{Namespace: ns, Name: name}
			if s.models != nil && !s.models(model) {
				// Another shard's model: the pending pods are selected
				// by what they carry (no node), which says nothing of
				// the shard, and a baking pod keeps the shard label of
				// the template that made it after its model moved away.
				return
			}
			if s.watched != nil && !s.watched(model) && !awaitsVerification(p) {
				return
			}
			q.Add(reconcile.Request{NamespacedName: model})
			s.woke()
		}
	}
	reg, err := s.informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { handle(obj, false) },
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(keptPod)
			n, ok2 := newObj.(keptPod)
			if ok1 && ok2 {
				if o.ownerKey() != n.ownerKey() {
					s.put(o, true)
				}
				if n.sameAs(o) {
					// Nothing the decision reads changed: held, not woken.
					s.put(n, false)
					return
				}
			}
			handle(newObj, false)
		},
		DeleteFunc: func(obj any) { handle(obj, true) },
	})
	if err != nil {
		return fmt.Errorf("watch %s: %w", s.description, err)
	}
	s.registration = reg
	go s.informer.RunWithContext(ctx)
	return nil
}

// WaitForSync waits for the first list and for its events to be handed
// over: no pass judges pods on a store that has not seen them yet
// (waitForStore).
func (s *Pods) WaitForSync(ctx context.Context) error {
	return waitForStore(ctx, s.description, s.informer, s.registration)
}

// put holds p under its owner (none: not at all), in place of its earlier
// version; gone drops it.
func (s *Pods) put(p keptPod, gone bool) {
	owner := p.ownerKey()
	if owner == "" {
		return
	}
	same := func(o keptPod) bool { return o.GetName() == p.GetName() && o.GetNamespace() == p.GetNamespace() }
	if gone {
		s.byOwner.remove(owner, same)
		return
	}
	s.byOwner.put(owner, p, same)
}

func (s *Pods) String() string { return s.description }
