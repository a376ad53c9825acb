package rollout

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// The ways a shared cluster says no to a new pod of the version, besides a
// scheduler that finds no node (unschedulable.go):
//   - the API server refuses to create it: a namespace ResourceQuota, a
//     LimitRange or an admission webhook. The ReplicaSet controller
//     reports FailedCreate, the Deployment controller copies it as
//     ReplicaFailure=True. The pod does not exist, so only the Deployment
//     says so.
//   - a scheduling gate holds it (spec.schedulingGates; Kueue's admission
//     gate): the scheduler does not look at it until whatever added the
//     gate removes it.
//
// Each is progress that waits, named in the status within one watch event
// (the Deployment's, the pending pod's), never a failure before the
// progress deadline; the failure at the deadline names it. A quota that
// refuses the surge pod is a case for replacing pods in place (an old pod
// that goes frees what the new one needs); a webhook's refusal and a gate
// are not: removing an old pod first would not let the new one in.

// MaxRefusalMessage bounds what the status and the events carry of the API
// server's answer to a refused pod (a webhook may say a lot).
const MaxRefusalMessage = 300

// quotaRefusal is the text the API server's ResourceQuota admission puts
// in its refusal: `pods "x" is forbidden: exceeded quota: gpu, requested:
// requests.nvidia.com/gpu=1, used: requests.nvidia.com/gpu=2, limited:
// requests.nvidia.com/gpu=2`.
const quotaRefusal = "exceeded quota: "

// refusal is the Deployment controller's report that the ReplicaSets of
// the model's target cannot create pods, for the Deployment's current
// generation.
type refusal struct {
	// message is the API server's answer, bounded (MaxRefusalMessage).
	message string
	// since is when the ReplicaSet controller first failed (the
	// condition's transition, kube-controller-manager's clock).
	since time.Time
	// quota says a ResourceQuota refused the pod.
	quota bool
}

// podRefusal is the target's current refusal to create pods, or nil. Read
// only while the model rolls out (or back). The Deployment controller
// reports the new ReplicaSet's refusal over an old one's, but keeps the
// condition it has (its message and time) while the reason stays
// FailedCreate: a refusal that began before the operator's last apply (an
// HPA's scale-up that hit the quota) may still show its first answer.
func (d *decider) podRefusal() *refusal {
	dep := d.obs.Deployment
	if dep == nil {
		return nil
	}
	c := replicaFailureCondition(dep)
	if c == nil {
		return nil
	}
	msg := Shorten(c.Message, MaxRefusalMessage)
	return &refusal{
		message: msg,
		since:   c.LastTransitionTime.Time,
		quota:   strings.Contains(msg, quotaRefusal),
	}
}

// refusalNote is what a rollout's or rollback's message adds while the
// Deployment cannot create pods.
func (d *decider) refusalNote() string {
	r := d.podRefusal()
	if r == nil {
		return ""
	}
	return fmt.Sprintf("; the Deployment controller cannot create pods: %s%s", r.message, d.inPlaceNote)
}

// gatedPod names the pod of the template carrying manifestHash that a
// scheduling gate holds, the oldest first, and its gates; "" when none is
// held.
func (d *decider) gatedPod(manifestHash string) (pod, gates string) {
	p, _ := d.oldestHeld(manifestHash, SchedulingGated)
	if p == nil {
		return "", ""
	}
	return p.Name, GateNames(p)
}

// gatedNote is what a rollout's or rollback's message adds while a pod of
// the template carrying manifestHash is held by a scheduling gate.
func (d *decider) gatedNote(manifestHash string) string {
	pod, gates := d.gatedPod(manifestHash)
	if pod == "" {
		return ""
	}
	return fmt.Sprintf("; pod %s waits for admission: scheduling gate %s", pod, gates)
}

// SchedulingGated returns the pod's PodScheduled condition when a
// scheduling gate holds it (status False, reason SchedulingGated) and the
// pod has no node yet; otherwise nil.
func SchedulingGated(p *corev1.Pod) *corev1.PodCondition {
	if p.Spec.NodeName != "" || p.DeletionTimestamp != nil || len(p.Spec.SchedulingGates) == 0 {
		return nil
	}
	for i, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonSchedulingGated {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// GateNames is the names of the pod's scheduling gates, comma-separated and
// bounded (MaxSchedulerMessage).
func GateNames(p *corev1.Pod) string {
	names := make([]string, len(p.Spec.SchedulingGates))
	for i, g := range p.Spec.SchedulingGates {
		names[i] = g.Name
	}
	return Shorten(strings.Join(names, ", "), MaxSchedulerMessage)
}

// refusalCause names, for the failure at the progress deadline, what held
// the version's pods back: a pod the scheduler could not place, a refused
// pod, a gated pod; with the Degraded reason that says which. ok is false
// when nothing did.
func (d *decider) refusalCause(manifestHash, version string) (cause, reason string, ok bool) {
	if pod, msg := d.unschedulable(manifestHash); pod != "" {
		return fmt.Sprintf("pod %s of %s could not be scheduled: %s", pod, version, msg), v1alpha1.UnschedulableReason, true
	}
	if r := d.podRefusal(); r != nil {
		return fmt.Sprintf("pods of %s could not be created: %s", version, r.message), v1alpha1.PodCreationRefusedReason, true
	}
	if pod, gates := d.gatedPod(manifestHash); pod != "" {
		return fmt.Sprintf("pod %s of %s waited for admission: scheduling gate %s", pod, version, gates), v1alpha1.SchedulingGatedReason, true
	}
	return "", "", false
}

// refusalReason reports a Degraded reason that names a cause of
// refusalCause.
func refusalReason(reason string) bool {
	switch reason {
	case v1alpha1.UnschedulableReason, v1alpha1.PodCreationRefusedReason, v1alpha1.SchedulingGatedReason, v1alpha1.VerificationFailedReason:
		return true
	}
	return false
}

// heldBackNote is what a rollout's or rollback's message adds about what
// holds a pod of the template carrying manifestHash back: a node it cannot
// get, a refusal, a gate (the first that applies), or "".
func (d *decider) heldBackNote(manifestHash string) string {
	if n := d.unschedulableNote(manifestHash); n != "" {
		return n
	}
	if n := d.refusalNote(); n != "" {
		return n
	}
	if n := d.gatedNote(manifestHash); n != "" {
		return n
	}
	return d.verifyingNote(manifestHash)
}

// noRoomSince is when the rollout of the template carrying manifestHash
// first found no room for a new pod that replacing pods in place makes:
// the oldest of a pod the scheduler reports unschedulable and a quota that
// refuses the pods. why says which. ok is false when neither. A quota's
// refusal counts only when it began no earlier than the operator's last
// apply: an older one (an HPA's scale-up that hit the quota) is kept by
// the Deployment controller with its first answer while the reason stays
// FailedCreate, so it does not say what refuses the rollout's pod (a
// webhook that replacing in place would not get past); such a rollout
// waits, and its deadline names the refusal.
func (d *decider) noRoomSince(manifestHash string) (since time.Time, why string, ok bool) {
	if pod, _, at := d.unschedulablePod(manifestHash); pod != "" {
		since, why, ok = at, "no node has what a new pod of %s needs", true
	}
	if r := d.podRefusal(); r != nil && r.quota && !r.since.Before(appliedAt(d.obs.Deployment, d.opts.FieldManager)) {
		at := r.since
		if !ok || at.Before(since) {
			since, why, ok = at, "the namespace's quota refuses a new pod of %s", true
		}
	}
	return since, why, ok
}

// capitalize is s with its first letter upper case (ASCII).
func capitalize(s string) string {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return s
	}
	return string(s[0]-'a'+'A') + s[1:]
}
