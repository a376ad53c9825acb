package rollout

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// failureReport is how a failed step reads in the status.
type failureReport struct {
	reason, message string
	ks              kstatus
	// rejected starts the message of a rejected request whose answer said
	// what is wrong: the detail follows it.
	rejected string
}

// The reports of failed steps, each declared once with its summary
// (states.go). A step's kstatus verdict is reportFor's.
var (
	accessDeniedReport   = declareFailure(nil, failureReport{reason: v1alpha1.AccessDeniedReason, message: MsgAccessDenied})
	nameTakenReport      = declareFailure((*decider).manifestConflictSummary, failureReport{reason: v1alpha1.ManifestConflictReason, message: MsgManifestConflict, ks: reconciling})
	mismatchReport       = declareFailure((*decider).manifestMismatchSummary, failureReport{reason: v1alpha1.ManifestMismatchReason, message: MsgManifestMismatch, ks: stalled})
	manifestFailedReport = declareFailure((*decider).manifestFailedSummary, failureReport{reason: v1alpha1.ManifestFailedReason, message: MsgManifestFailed, rejected: MsgManifestRejectedBy})
	applyRejectedReport  = declareFailure((*decider).applyRejectedSummary, failureReport{reason: v1alpha1.ApplyRejectedReason, message: MsgApplyRejected, rejected: MsgApplyRejectedBy})
	applyFailedReport    = declareFailure((*decider).applyFailedSummary, failureReport{reason: v1alpha1.ApplyFailedReason, message: MsgApplyFailed})
	releaseFailedReport  = declareFailure((*decider).releaseFailedSummary, failureReport{reason: v1alpha1.ReleaseFailedReason, message: MsgReleaseFailed, rejected: MsgReleaseRejectedBy})
	pruneFailedReport    = declareFailure(nil, failureReport{reason: v1alpha1.PruneFailedReason, message: MsgPruneFailed, rejected: MsgPruneRejectedBy})
	internalErrorReport  = declareFailure(nil, failureReport{reason: v1alpha1.InternalErrorReason, message: MsgInternalError, ks: reconciling})
)

// declareFailure records r's summary under its reason and returns r.
func declareFailure(summary summaryFunc, r failureReport) failureReport {
	declareSummary(r.reason, summary)
	return r
}

// reportFor maps a failed step to its report and kstatus verdict: a
// rejected request needs a person (Stalled), everything else is retried by
// itself (Reconciling). Both are retried with a short backoff. A name
// taken, a mismatched manifest and an internal error have a verdict of
// their own.
func reportFor(f Failure) failureReport {
	ks := reconciling
	if f.Kind == Rejected || f.Kind == Denied {
		ks = stalled
	}
	var r failureReport
	switch {
	case f.Kind == NameTaken:
		return nameTakenReport
	case f.Kind == Mismatch:
		return mismatchReport
	case f.Kind == Denied:
		r = accessDeniedReport
	case f.Step == StepManifest:
		r = manifestFailedReport
	case f.Step == StepApply && f.Kind == Rejected:
		r = applyRejectedReport
	case f.Step == StepApply:
		r = applyFailedReport
	case f.Step == StepRelease:
		r = releaseFailedReport
	case f.Step == StepPrune:
		r = pruneFailedReport
	default:
		return internalErrorReport
	}
	r.ks = ks
	return r
}

// failed reports a step of this pass that failed. The rollout bookkeeping
// stays as the last successful pass left it, so the next pass decides again
// from what the cluster shows; only the conditions say what failed. A
// failure that needs a person marks the generation observed (kstatus then
// reads Failed); a transient one leaves it, so kstatus keeps waiting.
// One event is recorded per new failure.
func (d *decider) failed(fail Failure) {
	r := reportFor(fail)
	if fail.Kind == Rejected && fail.Detail != "" && r.rejected != "" {
		// The API server said what is wrong: the message says what to fix.
		r.message = r.rejected + ": " + Shorten(fail.Detail, MaxFailureDetail)
	}
	if fail.Kind == Denied {
		r.message = deniedMessage(fail, d.obj.Namespace, WritesAs(d.obj, d.opts.DefaultServiceAccount))
	}
	if d.st.Phase == "" {
		d.st.Phase = v1alpha1.PhasePending
	}
	newGeneration := d.st.ObservedGeneration != d.gen
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
		removeCondition(&d.st.Conditions, v1alpha1.ReconcilingCondition)
		set(v1alpha1.StalledCondition, t(r.reason, r.message))
	} else {
		removeCondition(&d.st.Conditions, v1alpha1.StalledCondition)
		set(v1alpha1.ReconcilingCondition, t(r.reason, r.message))
	}
	if newGeneration && d.st.ObservedGeneration == d.gen {
		// The status now describes this generation, but the pass never got
		// to judge the rollout or a rollback for it: those conditions say
		// so instead of carrying an older generation's verdict forward
		// under the new one.
		for _, typ := range []string{v1alpha1.ProgressingCondition, v1alpha1.RolledBackCondition} {
			if meta.FindStatusCondition(d.st.Conditions, typ) != nil {
				set(typ, cond{metav1.ConditionUnknown, r.reason, MsgNotEvaluated})
			}
		}
	}
	event := r.message
	if fail.Kind == Mismatch && fail.Detail != "" {
		// The ConfigMap's name: the only thing of it the event says.
		event = fmt.Sprintf(EventMsgManifestMismatch, fail.Detail)
	}
	d.eventOnChange(corev1.EventTypeWarning, r.reason, event, r.reason)
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

// deniedMessage says which write was denied, as whom, and what the API
// server's authorization answered (the user, the verb and the resource).
func deniedMessage(fail Failure, namespace, serviceAccount string) string {
	as := "the operator's own identity"
	if serviceAccount != "" {
		as = "ServiceAccount " + namespace + "/" + serviceAccount
	}
	msg := fmt.Sprintf(MsgAccessDeniedAs, deniedWrite[fail.Step], as)
	if fail.Detail != "" {
		msg += ": " + Shorten(fail.Detail, MaxFailureDetail)
	}
	return msg + "; retrying until the right is granted."
}

// deniedWrite names the write of each step in a denied write's message.
var deniedWrite = map[Step]string{
	StepManifest: "creation of the manifest ConfigMap",
	StepApply:    "apply of the model pointer to the target Deployment",
	StepRelease:  "release of a Deployment",
	StepPrune:    "deletion of a superseded manifest ConfigMap",
	StepInternal: "write",
}
