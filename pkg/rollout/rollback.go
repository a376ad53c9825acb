package rollout

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// Rolling back: a failed desired spec, automatic rollback to the newest
// retained version, a manual one (openmed.ai/rollback-to), and holding a
// failed spec until it changes or a reset asks for it again.

// rolloutFailed handles a failed rollout of a new desired spec: roll back to
// the newest retained spec when allowed, else fail. The failed spec is held
// until the spec changes or a reset is requested.
//
// A rollback is only recorded here, not applied: the status that says the
// spec failed must be durable before the pointer moves, or a lost status
// write would let the next pass apply the failed spec again. The next pass
// reads the record and applies the rollback (monitor).
func (d *decider) rolloutFailed() {
	if cause, reason, ok := d.refusalCause(d.st.ManifestHash, d.desired.Version); ok {
		// The deadline passed while a pod of the version waited for a
		// node, was refused or held by a gate: the failure names it.
		d.rolloutFailedWith(EventMsgRolloutFailedPrefix+cause, reason, MsgUnschedulableFailedPrefix+cause)
		return
	}
	d.rolloutFailedWith(EventMsgRolloutFailed, "", "")
}

// failureCause keeps, while the failed spec is held, the cause a failed
// rollout recorded in Degraded (a pod that could not be scheduled), in
// place of the tuple's general one: the status says why the version
// failed for as long as it holds it, not only in the pass that saw it.
func (d *decider) failureCause(tp tuple) tuple {
	c := apimeta.FindStatusCondition(d.old.Conditions, v1alpha1.DegradedCondition)
	if c != nil && c.Status == metav1.ConditionTrue && refusalReason(c.Reason) && d.st.FailedSpecHash == d.hash {
		tp.degraded = t(c.Reason, c.Message)
	}
	return verificationStopped(tp)
}

// rolloutFailedWith is rolloutFailed with the event's message and, when
// degradedReason is set, the Degraded condition's reason and message (a
// failed bake says so).
func (d *decider) rolloutFailedWith(eventMsg, degradedReason, degradedMsg string) {
	d.event(corev1.EventTypeWarning, v1alpha1.RolloutFailedReason, eventMsg)
	d.clearAttempt()
	d.st.FailedSpecHash = d.hash
	tp, ks := failedTuple, stalled
	r, rollback := AutomaticRollback(d.desired, d.history)
	if rollback {
		tp, ks = autoRollbackTuple, reconciling
	}
	if degradedReason != "" {
		tp.degraded = t(degradedReason, degradedMsg)
	}
	tp = verificationStopped(tp)
	if rollback {
		d.st.Phase = v1alpha1.PhaseRolledBack
		d.st.ActiveVersion = r.Version
		d.st.RollbackSpec = r.DeepCopy()
		d.st.RollbackRequest = AutomaticRollbackPrefix + r.Version
		d.st.RollbackCount++
		d.conditions(tp, ks)
		d.event(corev1.EventTypeNormal, v1alpha1.RollbackStartedReason, EventMsgAutoRollbackStarted)
		d.plan.Requeue = true
		return
	}
	d.st.Phase = v1alpha1.PhaseFailed
	d.conditions(tp, ks)
	d.prune()
}

// heldAfterFailure is a pass over a desired spec that failed: the rollback
// that holds it is applied or watched, or the failure is reported again.
// Nothing re-applies the failed spec.
func (d *decider) heldAfterFailure() {
	if d.st.RollbackSpec != nil {
		d.monitorAutomatic(*d.st.RollbackSpec)
		return
	}
	tp := d.failureCause(failedTuple)
	if conditionIs(d.old, v1alpha1.DegradedCondition, metav1.ConditionTrue, v1alpha1.BakeFailedReason) {
		// The spec failed its bake: every pass that holds it says so.
		tp.degraded = t(v1alpha1.BakeFailedReason, MsgBakeFailed)
	}
	d.st.Phase = v1alpha1.PhaseFailed
	d.conditions(tp, stalled)
	d.prune()
}

// rollbackStates are the states a rollback reports while it runs, once it
// holds and when it failed.
type rollbackStates struct{ inProgress, done, failed tuple }

// monitorAutomatic is monitor for the automatic rollback of a failed
// spec to r: its states keep the failure's cause.
func (d *decider) monitorAutomatic(r v1alpha1.NormalizedSpec) bool {
	return d.monitor(r, rollbackStates{d.failureCause(rollbackMonitorTuple), d.failureCause(rollbackSucceededTuple), d.failureCause(rollbackFailedTuple)})
}

// monitorManual is monitor for the rollback to r the rollback-to
// annotation asks for: a hold, not a failure of the desired spec.
func (d *decider) monitorManual(r v1alpha1.NormalizedSpec) bool {
	return d.monitor(r, rollbackStates{manualRollbackTuple, manualHeldTuple, rollbackFailedTuple})
}

// monitor applies a rollback to r when the target does not carry it yet
// (the recorded decision, or another manager's change), then watches it,
// reporting states. It reports false when a manifest conflict blocks the
// rollback.
func (d *decider) monitor(r v1alpha1.NormalizedSpec, states rollbackStates) bool {
	dep := d.obs.Deployment
	inProgress, done, failed := states.inProgress, states.done, states.failed
	d.st.Phase = v1alpha1.PhaseRolledBack
	p := d.pointerFor(r)
	if !p.matches(dep) && p.onlyBookkeeping(dep) {
		// Only the cache's labels are missing (an upgraded install, a
		// shard move, a label somebody removed): they go back on, and the
		// rollback is judged as before.
		if !d.apply(r) {
			return false
		}
	} else if !p.matches(dep) {
		var drift []Drift
		if d.old.AppliedSpecHash == SpecHash(r) {
			drift = d.inPlaceIsNoDrift(p.drift(dep, d.opts.FieldManager), SpecHash(r))
		}
		if !d.apply(r) {
			return false
		}
		d.recordDrift(drift)
		d.conditions(inProgress, reconciling)
		d.inFlight()
		return true
	}
	d.st.ActiveVersion = r.Version
	d.st.AppliedSpecHash = SpecHash(r)
	switch {
	case !ControllerObserved(dep):
		d.conditions(inProgress, reconciling)
		d.inFlight()
	case d.deploymentFailed(dep, time.Time{}):
		d.st.Phase = v1alpha1.PhaseFailed
		d.eventOnChange(corev1.EventTypeWarning, v1alpha1.RollbackFailedReason, EventMsgRollbackFailed, v1alpha1.RollbackFailedReason)
		d.conditions(failed, stalled)
		d.prune()
	case d.replacingInPlace(SpecHash(r)) && RolloutComplete(dep):
		// The rollback replaced every pod in place: the declared strategy
		// goes back on (recorded first; the next pass applies it).
		d.restoreStrategy()
		d.conditions(inProgress, reconciling)
		d.inFlight()
	case RolloutComplete(dep):
		if !conditionIs(d.old, v1alpha1.RolledBackCondition, metav1.ConditionTrue, "") {
			d.event(corev1.EventTypeNormal, v1alpha1.RollbackSucceededReason, EventMsgRollbackSucceeded)
		}
		d.st.ReplaceInPlace = nil
		d.conditions(done, stalled)
		d.prune()
	default:
		// A rollback needs room for a new pod too: without a node for it,
		// it goes on in place like a rollout (whenUnschedulable).
		if !d.replacingInPlace(SpecHash(r)) && !d.restoringStrategy(SpecHash(r)) {
			d.switchInPlace(r, ManifestHash(r))
		}
		d.conditions(inProgress, reconciling)
		d.inFlight()
	}
	return true
}

// manualRollback serves openmed.ai/rollback-to: any retained version, the
// newest spec with it, on the current target. A rejected request changes
// nothing and clears as soon as the annotation does. An accepted one
// holds the resource at that version while the annotation stays; it does not
// mark the desired spec as failed, and once started it is only watched,
// so a failed manual rollback does not loop
// (docs/decisions.md, Manual rollback). The annotation itself is
// the durable record of the decision, so the rollback is applied at once.
func (d *decider) manualRollback(version string) {
	entry, found := findVersion(d.history, version)
	if !found {
		d.st.Phase = v1alpha1.PhaseFailed
		d.eventOnChange(corev1.EventTypeWarning, v1alpha1.RollbackRejectedReason, EventMsgRollbackRejected, v1alpha1.RollbackTargetUnavailableReason)
		d.conditions(rollbackRejectedTuple, stalled)
		return
	}
	r := onTarget(entry.Spec, d.desired)
	request := ManualRollbackPrefix + entry.Version
	if d.old.RollbackRequest == request && d.old.RollbackSpec != nil && SpecHash(*d.old.RollbackSpec) == SpecHash(r) {
		d.monitorManual(r)
		return
	}
	d.st.RollbackSpec = r.DeepCopy()
	d.st.RollbackRequest = request
	d.st.RollbackCount++
	d.st.RetryStartedAt = nil
	d.st.ActiveVersion = r.Version
	if d.monitorManual(r) {
		d.event(corev1.EventTypeNormal, v1alpha1.RollbackStartedReason, EventMsgManualRollback)
	}
}
