package rollout

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// The bake guard (spec.rolloutStrategy.bakeSeconds): after the model's own
// rollout of a new version completed, the version serves for that long
// before it is Ready and retained. The Kubernetes API already says when the
// containers of a new version restart; no metrics stack is needed.
//
// What fails a bake, for a pod of the baking version (its pod template
// carries the version's manifest hash) that is not being deleted:
//   - a container that terminated (a restart, an OOM kill), also before the
//     bake began: the pods of the version exist since its rollout, so a
//     crash while the rollout went on is a crash of the version;
//   - a pod that was running when the bake began, turned unready during it
//     and stayed unready for BakeUnreadyGrace;
//   - the Deployment reporting its progress deadline passed or a
//     ReplicaFailure (the same failure as during the rollout).
//
// What does not: pods created after the bake began being unready while they
// start (a scale-up), pods of another pod template, pods being deleted (an
// eviction, a drain, a scale-down) and pods that are gone.

// BakeUnreadyGrace is how long a pod of the baking version may stay unready
// before the bake fails: a readiness probe that fails once is no failure.
const BakeUnreadyGrace = 10 * time.Second

// Bake failures, by what the pods showed. They name the reason of the
// RolloutFailed event and the label of openmed_bake_failures_total.
const (
	BakeContainerRestarted = "ContainerRestarted"
	BakeOOMKilled          = "OOMKilled"
	BakePodUnready         = "PodUnready"
)

// BakeFailures lists every bake failure reason.
var BakeFailures = []string{BakeContainerRestarted, BakeOOMKilled, BakePodUnready}

// Bakes reports whether a rollout of desired, whose manifest hash is
// manifestHash, bakes before it is Ready: it asks for a bake and has not
// served from its target yet. history is the retained versions, newest
// first.
func Bakes(desired v1alpha1.NormalizedSpec, manifestHash string, history []v1alpha1.HistoryEntry) bool {
	if desired.RolloutStrategy.BakeSeconds <= 0 {
		return false
	}
	return len(history) == 0 || history[0].ManifestHash != manifestHash || history[0].Spec.TargetRef != desired.TargetRef
}

// bakes reports whether the desired spec bakes before it is Ready.
func (d *decider) bakes() bool {
	return Bakes(d.desired, d.st.ManifestHash, d.history)
}

// baking reports whether the status records the bake of the desired spec.
func (d *decider) baking() bool {
	return d.st.BakeStartedAt != nil && d.st.AppliedSpecHash == d.hash && d.bakes()
}

// bake judges the desired spec while it bakes: it fails on what the pods
// show, is Ready once the bake ended with the Deployment complete, and
// otherwise waits for the end of the bake (one timer) or a pod's grace.
func (d *decider) bake(complete bool) {
	if !d.baking() {
		now := d.now
		d.st.BakeStartedAt = &now
		// The target carries the desired pointer (rollout checked it):
		// the bake is of that spec. Without this, a pass whose Deployment
		// completed before any status recorded the apply (the apply's
		// status write was lost) would begin the bake again every pass.
		d.st.AppliedSpecHash = d.hash
	}
	start := d.st.BakeStartedAt.Time
	reason, recheck := BakeFailure(d.obs.Pods, d.st.ManifestHash, start, d.now.Time)
	if reason != "" {
		d.bakeFailed(reason)
		return
	}
	end := start.Add(time.Duration(d.desired.RolloutStrategy.BakeSeconds) * time.Second)
	if !d.now.Before(&metav1.Time{Time: end}) && complete {
		d.ready(true)
		return
	}
	if d.old.Phase != v1alpha1.PhaseRollingOut || !conditionIs(d.old, v1alpha1.ReconcilingCondition, metav1.ConditionTrue, v1alpha1.BakingReason) {
		d.event(corev1.EventTypeNormal, v1alpha1.BakingReason, EventMsgBaking)
	}
	d.st.Phase = v1alpha1.PhaseRollingOut
	d.conditions(bakingTuple, reconciling)
	// No polling: the end of the bake, or the end of a pod's grace; every
	// pod change wakes the resource through its watch.
	if wait := end.Sub(d.now.Time); wait > 0 {
		// The status keeps the start to the second, earlier than it was:
		// the pass this wakes finds the bake over.
		d.requeueWithin(wait + 100*time.Millisecond)
	}
	if recheck > 0 {
		d.requeueWithin(recheck)
	}
}

// bakeFailed is a failed bake: a failed rollout, rolled back to the newest
// retained version (which the baking version is not yet), with the reason
// in the event, the Degraded condition and the plan.
func (d *decider) bakeFailed(reason string) {
	d.plan.BakeFailure = reason
	d.rolloutFailedWith(fmt.Sprintf(EventMsgBakeFailed, reason), v1alpha1.BakeFailedReason, MsgBakeFailed)
}

// BakeFailure returns what fails the bake of the pods with manifestHash
// that began at start, or "", and how long until a pod's unready grace ends
// (0: none pending).
func BakeFailure(pods []corev1.Pod, manifestHash string, start, now time.Time) (reason string, recheck time.Duration) {
	for i := range pods {
		p := &pods[i]
		if p.DeletionTimestamp != nil || p.Annotations[v1alpha1.ManifestHashAnnotation] != manifestHash {
			continue
		}
		for _, c := range p.Status.ContainerStatuses {
			for _, t := range []*corev1.ContainerStateTerminated{c.LastTerminationState.Terminated, c.State.Terminated} {
				if t == nil {
					continue
				}
				if t.Reason == "OOMKilled" {
					return BakeOOMKilled, 0
				}
				return BakeContainerRestarted, 0
			}
		}
		if !p.CreationTimestamp.Time.Before(start) {
			// Started during the bake (a scale-up): warming up is no
			// failure. Both times have a resolution of a second; a pod of
			// the same second counts as new.
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type != corev1.PodReady || c.Status == corev1.ConditionTrue || c.LastTransitionTime.Time.Before(start) {
				continue
			}
			if left := c.LastTransitionTime.Add(BakeUnreadyGrace).Sub(now); left > 0 {
				if recheck == 0 || left < recheck {
					recheck = left
				}
				continue
			}
			return BakePodUnready, 0
		}
	}
	return "", recheck
}
