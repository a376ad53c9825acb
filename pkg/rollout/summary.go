package rollout

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// summarize writes what is happening into the Reconciling or Stalled
// condition, the one kstatus, `flux get`, Argo CD and `kubectl openmed`
// show: the desired and active versions, the target, the rollback target
// and the Deployment controller's progress with the version being rolled.
// Only coordinates go in (versions, names, counts), never an API answer or
// other text from the cluster. The four conditions keep their fixed
// messages. The summary is the one the state of the condition's reason
// declared (states.go).
//
// Progress counts change as pods roll, so a rollout writes its status once
// per change of the counts; a pass whose counts did not move writes nothing.
func (d *decider) summarize() {
	for _, typ := range []string{v1alpha1.ReconcilingCondition, v1alpha1.StalledCondition} {
		c := meta.FindStatusCondition(d.st.Conditions, typ)
		if c == nil {
			continue
		}
		if summary := summaries[c.Reason]; summary != nil {
			if m := summary(d, typ); m != "" {
				c.Message = m
			}
		}
	}
}

// servingNote is "; serving " and the active version when it is not the
// desired one, else "".
func (d *decider) servingNote() string {
	if active := d.st.ActiveVersion; active != "" && active != d.st.DesiredVersion {
		return "; serving " + active
	}
	return ""
}

// rollbackVersion is the version a rollback restores, or "".
func (d *decider) rollbackVersion() string {
	if d.st.RollbackSpec == nil {
		return ""
	}
	return d.st.RollbackSpec.Version
}

// The summaries of the states (summaryFunc), by Ready reason.

func (d *decider) rollingSummary(string) string {
	desired, target := d.st.DesiredVersion, TargetName(d.obj)
	if desired == "" {
		return ""
	}
	if d.st.Phase == v1alpha1.PhaseReady {
		// Another manager's change of a Deployment already serving the
		// desired version, not yet seen by the Deployment controller.
		return fmt.Sprintf("Waiting for the Deployment controller to observe Deployment %s; serving %s", target, desired)
	}
	return fmt.Sprintf("Rolling out %s on Deployment %s%s%s%s", desired, target, d.progress(d.st.ManifestHash), d.refusalNote(), d.servingNote())
}

func (d *decider) rolledBackSummary(typ string) string {
	desired, active, target := d.st.DesiredVersion, d.st.ActiveVersion, TargetName(d.obj)
	switch {
	case d.manualHold():
		return fmt.Sprintf("Held at %s on Deployment %s by the %s annotation; remove it to roll out %s",
			active, target, v1alpha1.RollbackToAnnotation, desired)
	case typ == v1alpha1.StalledCondition:
		return fmt.Sprintf("%s failed on Deployment %s%s; serving the retained %s; change the spec or set %s to retry",
			desired, target, d.failureCauseNote(), active, v1alpha1.ResetRequestAnnotation)
	default:
		return fmt.Sprintf("Rolling back Deployment %s to %s after %s failed%s%s%s", target, d.rollbackVersion(), desired, d.progress(d.rollbackHash()),
			d.heldBackNote(d.rollbackHash()), d.inPlaceRollbackNote())
	}
}

func (d *decider) manualRollbackSummary(string) string {
	return fmt.Sprintf("Rolling back Deployment %s to %s (%s)%s%s", TargetName(d.obj), d.rollbackVersion(), v1alpha1.RollbackToAnnotation,
		d.progress(d.rollbackHash()), d.heldBackNote(d.rollbackHash()))
}

func (d *decider) replacingInPlaceSummary(string) string {
	return d.inPlaceSummary(d.st.DesiredVersion, TargetName(d.obj), d.st.ManifestHash, d.servingNote())
}

// heldBackSummary is the summary of a rollout whose new pod is held back
// (Unschedulable, PodCreationRefused, SchedulingGated): its progress and
// what holds the pod (heldBackNote, in the order rolling chose the state).
func (d *decider) heldBackSummary(string) string {
	return fmt.Sprintf("Rolling out %s on Deployment %s%s%s%s", d.st.DesiredVersion, TargetName(d.obj), d.progress(d.st.ManifestHash),
		d.heldBackNote(d.st.ManifestHash), d.servingNote())
}

func (d *decider) rolloutFailedSummary(string) string {
	return fmt.Sprintf("%s failed on Deployment %s%s and no retained version is serving; change the spec or set %s to retry",
		d.st.DesiredVersion, TargetName(d.obj), d.failureCauseNote(), v1alpha1.ResetRequestAnnotation)
}

func (d *decider) rollbackFailedSummary(string) string {
	return fmt.Sprintf("Rollback of Deployment %s to %s failed after %s failed", TargetName(d.obj), d.rollbackVersion(), d.st.DesiredVersion)
}

func (d *decider) targetNotFoundSummary(string) string {
	return fmt.Sprintf("Waiting for Deployment %s", TargetName(d.obj))
}

func (d *decider) containerNotFoundSummary(string) string {
	return fmt.Sprintf("Deployment %s has no container %s", TargetName(d.obj), d.obj.Spec.TargetRef.ContainerName)
}

func (d *decider) targetConflictSummary(string) string {
	return fmt.Sprintf("Deployment %s is managed by another OpenMedModel", TargetName(d.obj))
}

func (d *decider) deploymentRollingSummary(string) string {
	return fmt.Sprintf("Deployment %s is rolling out a change the model did not make%s; serving %s", TargetName(d.obj), d.progress(""), d.st.ActiveVersion)
}

func (d *decider) targetPausedSummary(string) string {
	if d.st.Phase == v1alpha1.PhaseReady {
		return fmt.Sprintf("Deployment %s is paused (%s); serving %s", TargetName(d.obj), d.availability(), d.st.ActiveVersion)
	}
	return fmt.Sprintf("Deployment %s is paused; %s rolls out when it is resumed", TargetName(d.obj), d.st.DesiredVersion)
}

func (d *decider) deploymentUnavailableSummary(typ string) string {
	target, active := TargetName(d.obj), d.st.ActiveVersion
	switch {
	case typ == v1alpha1.StalledCondition:
		return fmt.Sprintf("Deployment %s reports a failed rollout the model did not start (%s); serving %s", target, d.availability(), active)
	case d.obs.Deployment != nil && replicaFailure(d.obs.Deployment):
		return fmt.Sprintf("Deployment %s cannot create pods (ReplicaFailure; %s); serving %s", target, d.availability(), active)
	}
	return fmt.Sprintf("Deployment %s lost availability (%s); serving %s", target, d.availability(), active)
}

func (d *decider) bakingSummary(string) string {
	desired, target := d.st.DesiredVersion, TargetName(d.obj)
	b := d.st.BakeStartedAt
	if b == nil {
		return fmt.Sprintf("Rolled out %s on Deployment %s; its bake of %ds begins once a pod of it is Ready where the operator sees it (none is: replicas 0, or pods without the %s label)%s",
			desired, target, d.desired.RolloutStrategy.BakeSeconds, v1alpha1.BakeLabel, d.servingNote())
	}
	end := b.Add(time.Duration(d.desired.RolloutStrategy.BakeSeconds) * time.Second).UTC().Format(time.RFC3339)
	wait := ""
	switch d.bakeWait {
	case bakeWaitNode:
		wait = "; a pod of it is unready on a node that is not Ready: the bake waits until the pod is Ready again or replaced"
	case bakeWaitNoPods:
		wait = "; no pod of it is Ready where the operator sees it: the bake ends only while one serves"
	}
	return fmt.Sprintf("Baking %s on Deployment %s until %s (%ds after its rollout completed)%s%s",
		desired, target, end, d.desired.RolloutStrategy.BakeSeconds, wait, d.servingNote())
}

func (d *decider) scalingSummary(string) string {
	return fmt.Sprintf("Deployment %s is bringing up pods (%s); serving %s", TargetName(d.obj), d.availability(), d.st.ActiveVersion)
}

func (d *decider) manifestConflictSummary(string) string {
	return fmt.Sprintf("The manifest ConfigMap name for %s is taken by an object this model does not own", d.st.DesiredVersion)
}

func (d *decider) manifestMismatchSummary(string) string {
	return fmt.Sprintf("A manifest ConfigMap of %s holds other content than the operator's manifest (replaced or created by someone else); it is deleted and written again before Deployment %s points at it",
		d.st.DesiredVersion, TargetName(d.obj))
}

func (d *decider) manifestFailedSummary(string) string {
	return fmt.Sprintf("Creating the manifest ConfigMap for %s failed%s; retrying", d.st.DesiredVersion, d.failureDetail())
}

func (d *decider) applyFailedSummary(string) string {
	return fmt.Sprintf("Applying the model pointer to Deployment %s failed; retrying", TargetName(d.obj))
}

func (d *decider) applyRejectedSummary(string) string {
	return fmt.Sprintf("The API server rejected the model pointer for Deployment %s%s; retrying until the cause is fixed", TargetName(d.obj), d.failureDetail())
}

func (d *decider) releaseFailedSummary(string) string {
	return fmt.Sprintf("Releasing Deployment %s failed%s; retrying", d.releasedTarget(), d.failureDetail())
}

// inPlaceRollbackNote is what a rollback's message adds while it replaces
// pods in place or restores the declared strategy.
func (d *decider) inPlaceRollbackNote() string {
	r := d.st.ReplaceInPlace
	switch {
	case r == nil || d.st.RollbackSpec == nil || r.SpecHash != SpecHash(*d.st.RollbackSpec):
		return ""
	case r.Restoring:
		return "; restoring the declared strategy"
	}
	return fmt.Sprintf("; replacing pods in place (maxSurge 0, maxUnavailable %d): no room for a new pod beside the old ones", r.MaxUnavailable)
}

// failureCauseNote is ": " and the cause of the desired version's failure
// that Degraded records (a pod that could not be scheduled), or "".
func (d *decider) failureCauseNote() string {
	if c := meta.FindStatusCondition(d.st.Conditions, v1alpha1.DegradedCondition); c != nil && c.Status == metav1.ConditionTrue &&
		refusalReason(c.Reason) {
		return ": " + strings.TrimPrefix(strings.TrimPrefix(c.Message, MsgUnschedulableFailedPrefix), MsgVerificationFailedPrefix)
	}
	return ""
}

// failureDetail is ": " and what the API server said about a rejected
// request of this pass, or "".
func (d *decider) failureDetail() string {
	if f := d.obs.Failure; f != nil && f.Detail != "" {
		return ": " + Shorten(f.Detail, MaxFailureDetail)
	}
	return ""
}

// Shorten cuts s to at most n bytes on a rune boundary, ending in "…"
// when it cut.
func Shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := max(n-len("…"), 0)
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}

// manualHold reports a hold by the rollback-to annotation (not a failure of
// the desired spec).
func (d *decider) manualHold() bool {
	return conditionIs(d.st, v1alpha1.DegradedCondition, metav1.ConditionTrue, v1alpha1.ManualRollbackReason)
}

// rollbackHash is the manifest hash of the version a rollback restores.
func (d *decider) rollbackHash() string {
	if d.st.RollbackSpec == nil {
		return ""
	}
	return ManifestHash(*d.st.RollbackSpec)
}

// releasedTarget names the Deployment a release is for: the one the status
// last pointed at (a retarget or a deletion), else the spec's.
func (d *decider) releasedTarget() string {
	if d.st.TargetName != "" {
		return d.st.TargetName
	}
	return TargetName(d.obj)
}

// progress is the Deployment controller's progress with the pod template
// carrying manifestHash ("" for any template): ": 1/2 pods updated, 3
// available". Nothing is said while the cached Deployment does not carry
// that template yet (the pass that applies it) or before the controller saw
// it: a message that changes only because the controller caught up would
// cost a status write per rollout and say nothing the counts do not.
func (d *decider) progress(manifestHash string) string {
	dep := d.obs.Deployment
	if dep == nil || (manifestHash != "" && dep.Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation] != manifestHash) {
		return ""
	}
	if !ControllerObserved(dep) {
		return ""
	}
	return fmt.Sprintf(": %d/%d pods updated, %d available", dep.Status.UpdatedReplicas, specReplicas(dep), dep.Status.AvailableReplicas)
}

// availability is "1/2 pods available".
func (d *decider) availability() string {
	dep := d.obs.Deployment
	if dep == nil {
		return "no Deployment"
	}
	return fmt.Sprintf("%d/%d pods available", dep.Status.AvailableReplicas, specReplicas(dep))
}
