package rollout

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// failureReport is how a failed step reads in the status.
type failureReport struct {
	reason, message string
	ks              kstatus
}

// reportFor maps a failed step to its reason, fixed message and kstatus
// verdict: a rejected request needs a person (Stalled), everything else is
// retried by itself (Reconciling). Both are retried with a short backoff.
func reportFor(f Failure) failureReport {
	ks := reconciling
	if f.Kind == Rejected {
		ks = stalled
	}
	switch {
	case f.Kind == NameTaken:
		return failureReport{v1alpha1.ManifestConflictReason, MsgManifestConflict, reconciling}
	case f.Step == StepManifest:
		return failureReport{v1alpha1.ManifestFailedReason, MsgManifestFailed, ks}
	case f.Step == StepApply && f.Kind == Rejected:
		return failureReport{v1alpha1.ApplyRejectedReason, MsgApplyRejected, ks}
	case f.Step == StepApply:
		return failureReport{v1alpha1.ApplyFailedReason, MsgApplyFailed, ks}
	case f.Step == StepRelease:
		return failureReport{v1alpha1.ReleaseFailedReason, MsgReleaseFailed, ks}
	case f.Step == StepPrune:
		return failureReport{v1alpha1.PruneFailedReason, MsgPruneFailed, ks}
	default:
		return failureReport{v1alpha1.InternalErrorReason, MsgInternalError, reconciling}
	}
}

// failed reports a step of this pass that failed. The rollout bookkeeping
// stays as the last successful pass left it, so the next pass decides again
// from what the cluster shows; only the conditions say what failed. A
// failure that needs a person marks the generation observed (kstatus then
// reads Failed); a transient one leaves it, so kstatus keeps waiting.
// One event is recorded per new failure.
func (d *decider) failed(fail Failure) {
	r := reportFor(fail)
	if d.st.Phase == "" {
		d.st.Phase = v1alpha1.PhasePending
	}
	if r.ks == stalled || fail.Kind == NameTaken {
		d.st.ObservedGeneration = d.gen
	}
	set := func(typ string, c cond) {
		meta.SetStatusCondition(&d.st.Conditions, metav1.Condition{
			Type: typ, Status: c.status, Reason: c.reason, Message: c.message,
			ObservedGeneration: d.gen, LastTransitionTime: d.now,
		})
	}
	set(v1alpha1.ReadyCondition, f(r.reason, r.message))
	if r.ks == stalled {
		set(v1alpha1.DegradedCondition, t(r.reason, r.message))
		meta.RemoveStatusCondition(&d.st.Conditions, v1alpha1.ReconcilingCondition)
		set(v1alpha1.StalledCondition, t(r.reason, r.message))
	} else {
		meta.RemoveStatusCondition(&d.st.Conditions, v1alpha1.StalledCondition)
		set(v1alpha1.ReconcilingCondition, t(r.reason, r.message))
	}
	d.eventOnChange(corev1.EventTypeWarning, r.reason, r.message, r.reason)
}

// ownedCondition reports whether the operator writes conditions of type t.
func ownedCondition(t string) bool {
	switch t {
	case v1alpha1.ReadyCondition, v1alpha1.ReconcilingCondition, v1alpha1.StalledCondition,
		v1alpha1.ProgressingCondition, v1alpha1.DegradedCondition, v1alpha1.RolledBackCondition,
		v1alpha1.OwnershipConflictCondition:
		return true
	}
	return false
}
