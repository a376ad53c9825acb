package rollout

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// MaxSchedulerMessage bounds the scheduler's message in the status and the
// event: it lists every reason of every node pool ("0/40 nodes are
// available: 12 Insufficient nvidia.com/gpu, 28 node(s) had untolerated
// taint …"), which is long on a large cluster.
const MaxSchedulerMessage = 300

// Unschedulable returns the pod's PodScheduled condition when the
// scheduler reported it unschedulable (status False, reason Unschedulable)
// and the pod is still waiting for a node; otherwise nil.
func Unschedulable(p *corev1.Pod) *corev1.PodCondition {
	if p.Spec.NodeName != "" || p.DeletionTimestamp != nil {
		return nil
	}
	for i, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// unschedulable names the pod of the template carrying manifestHash that
// has waited longest for a node the scheduler could not find, and the
// scheduler's message (bounded), or "" when no such pod waits.
func (d *decider) unschedulable(manifestHash string) (pod, message string) {
	pod, message, _ = d.unschedulablePod(manifestHash)
	return pod, message
}

// unschedulablePod is unschedulable with the time the scheduler first
// reported that pod unschedulable.
func (d *decider) unschedulablePod(manifestHash string) (pod, message string, since time.Time) {
	p, c := d.oldestHeld(manifestHash, Unschedulable)
	if p == nil {
		return "", "", time.Time{}
	}
	message = Shorten(c.Message, MaxSchedulerMessage)
	if claims := ClaimNames(p); claims != "" {
		// The scheduler says "cannot allocate all claims"; the status
		// says which.
		message += " (DRA claims: " + claims + ")"
	}
	return p.Name, message, c.LastTransitionTime.Time
}

// oldestHeld is, of the pending pods of the model's own template carrying
// manifestHash (its owner annotation and a ReplicaSet of the target, by
// UID), the one held back longest by what held reports (the condition
// that says so, nil when the pod is not held), the first by name among
// equals, with that condition; nil when none is held.
func (d *decider) oldestHeld(manifestHash string, held func(*corev1.Pod) *corev1.PodCondition) (*corev1.Pod, *corev1.PodCondition) {
	if manifestHash == "" {
		return nil, nil
	}
	var pod *corev1.Pod
	var cond *corev1.PodCondition
	for i := range d.obs.PendingPods {
		p := &d.obs.PendingPods[i]
		if p.Annotations[v1alpha1.ManifestHashAnnotation] != manifestHash || p.Annotations[v1alpha1.ModelResourceAnnotation] != OwnerKey(d.obj) ||
			!OwnedByTarget(p, namespaceOf(d.obj), d.obs.ReplicaSets) {
			continue
		}
		c := held(p)
		if c == nil {
			continue
		}
		since := c.LastTransitionTime.Time
		if pod == nil || since.Before(cond.LastTransitionTime.Time) || (since.Equal(cond.LastTransitionTime.Time) && p.Name < pod.Name) {
			pod, cond = p, c
		}
	}
	return pod, cond
}

// unschedulableNote is what a rollout's or rollback's message adds while a
// pod of the template carrying manifestHash cannot be scheduled.
func (d *decider) unschedulableNote(manifestHash string) string {
	pod, msg := d.unschedulable(manifestHash)
	if pod == "" {
		return ""
	}
	return fmt.Sprintf("; pod %s cannot be scheduled: %s%s", pod, msg, d.inPlaceNote)
}

// ClaimNames is the pod's DRA resource claims, each with the template it
// is made from or the claim it shares ("gpu from template gpu-claim,
// cache as ResourceClaim model-cache"), bounded (MaxSchedulerMessage); ""
// when it claims none.
func ClaimNames(p *corev1.Pod) string {
	names := make([]string, 0, len(p.Spec.ResourceClaims))
	for _, c := range p.Spec.ResourceClaims {
		switch {
		case c.ResourceClaimTemplateName != nil:
			names = append(names, c.Name+" from template "+*c.ResourceClaimTemplateName)
		case c.ResourceClaimName != nil:
			names = append(names, c.Name+" as ResourceClaim "+*c.ResourceClaimName)
		default:
			names = append(names, c.Name)
		}
	}
	return Shorten(strings.Join(names, ", "), MaxSchedulerMessage)
}
