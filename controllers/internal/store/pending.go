package store

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/rollout"
)

// The pods that wait for a node are in a store of their own, so that a
// rollout whose new pod the scheduler cannot place (no GPU free) says so
// within one watch event. The API server filters them by field
// (spec.nodeName empty, phase Pending): a pod leaves the store the moment
// it is bound, and a cluster whose pods all run keeps nothing. Pending pods
// of other workloads pass the filter too; the store keeps of them only
// their key (about 150 bytes each) and wakes nothing for them.

// pendingSelector picks the pods no node was assigned to yet.
const pendingSelector = "spec.nodeName=,status.phase=Pending"

// pendingPod is a pod without a node as the pending-pod store keeps it: its
// identity, the operator's owner and manifest-hash annotations (empty for a
// pod of another workload) and its PodScheduled condition.
type pendingPod struct {
	storedMeta

	owner, manifestHash string

	// replicaSet and replicaSetUID name the pod's controller when it is
	// a ReplicaSet.
	replicaSet    string
	replicaSetUID types.UID

	// scheduled is the pod's PodScheduled condition, when it has one.
	scheduled *pendingCondition

	// gates are the names of the pod's scheduling gates, comma-separated
	// and bounded (rollout.GateNames); "" when none holds it.
	gates string

	// claims names the pod's DRA resource claims, bounded
	// (rollout.ClaimNames); "" when it claims none.
	claims string
}

// pendingCondition is a PodScheduled condition; the message is bounded
// (rollout.MaxSchedulerMessage).
type pendingCondition struct {
	status             corev1.ConditionStatus
	reason, message    string
	lastTransitionTime metav1.Time
}

// compactPendingPod is the pending-pod store's transform.
func compactPendingPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	out := &pendingPod{}
	out.Namespace, out.Name, out.ResourceVersion = intern(p.Namespace), p.Name, p.ResourceVersion
	owner, manifestHash := podAnnotations(p)
	if owner == "" {
		return out, nil
	}
	out.owner, out.manifestHash = owner, manifestHash
	out.replicaSet, out.replicaSetUID = PodReplicaSet(p)
	out.CreationTimestamp, out.DeletionTimestamp = p.CreationTimestamp, p.DeletionTimestamp
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			out.scheduled = &pendingCondition{status: c.Status, reason: intern(c.Reason),
				message: rollout.Shorten(c.Message, rollout.MaxSchedulerMessage), lastTransitionTime: c.LastTransitionTime}
		}
	}
	if len(p.Spec.SchedulingGates) > 0 {
		out.gates = intern(rollout.GateNames(p))
	}
	if len(p.Spec.ResourceClaims) > 0 {
		out.claims = intern(rollout.ClaimNames(p))
	}
	return out, nil
}

func (p *pendingPod) ownerKey() string { return p.owner }

// wakes: only a pod the scheduler reported unschedulable, or one a
// scheduling gate holds, wakes its model (when it comes, changes or goes);
// a pod bound at once wakes nothing.
func (p *pendingPod) wakes() bool {
	return p.owner != "" && p.scheduled != nil && p.scheduled.status == corev1.ConditionFalse &&
		(p.scheduled.reason == corev1.PodReasonUnschedulable || p.scheduled.reason == corev1.PodReasonSchedulingGated)
}

func (p *pendingPod) pod() corev1.Pod {
	out := corev1.Pod{}
	out.Namespace, out.Name, out.ResourceVersion = p.Namespace, p.Name, p.ResourceVersion
	out.CreationTimestamp, out.DeletionTimestamp = p.CreationTimestamp, p.DeletionTimestamp
	out.Annotations = map[string]string{v1alpha1.ModelResourceAnnotation: p.owner}
	if p.manifestHash != "" {
		out.Annotations[v1alpha1.ManifestHashAnnotation] = p.manifestHash
	}
	out.OwnerReferences = replicaSetRef(p.replicaSet, p.replicaSetUID)
	out.Status.Phase = corev1.PodPending
	if p.gates != "" {
		// One gate whose name lists them all: what the status says of them.
		out.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: p.gates}}
	}
	if p.claims != "" {
		// One claim whose name lists them all, as ClaimNames said them.
		out.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: p.claims}}
	}
	if c := p.scheduled; c != nil {
		out.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: c.status, Reason: c.reason,
			Message: c.message, LastTransitionTime: c.lastTransitionTime}}
	}
	return out
}

// sameAs: only the PodScheduled condition, the annotations and the
// deletion matter; the scheduler's retries that change nothing wake no
// model.
func (p *pendingPod) sameAs(other keptPod) bool {
	o, ok := other.(*pendingPod)
	if !ok || p.owner != o.owner || p.manifestHash != o.manifestHash || p.replicaSetUID != o.replicaSetUID || !p.DeletionTimestamp.Equal(o.DeletionTimestamp) || p.gates != o.gates || p.claims != o.claims ||
		(p.scheduled == nil) != (o.scheduled == nil) {
		return false
	}
	return p.scheduled == nil || *p.scheduled == *o.scheduled
}

// newPendingPods is the store of the pods without a node, kept as
// pendingPods.
func newPendingPods(c client.WithWatch, namespace string) (*Pods, error) {
	s, err := newPodStore(c, namespace, metav1.ListOptions{FieldSelector: pendingSelector}, compactPendingPod, "pods waiting for a node")
	if err != nil {
		return nil, err
	}
	s.wakesSome = true
	return s, nil
}
