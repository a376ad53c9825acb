package rollout

import (
	"fmt"
	"reflect"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// A state is one situation a pass reports, declared once, here: its four
// conditions (a tuple) and the summary, the message of the kstatus
// condition (Reconciling or Stalled), which repeats Ready's reason. A new
// state is one declare; the summary of a reason is found by the reason the
// status carries (summarize), so the states of one Ready reason share one
// summary, and declare refuses two.

// summaryFunc returns the message of the kstatus condition typ, or "" to
// keep the message the pass set; nil keeps it always.
type summaryFunc func(d *decider, typ string) string

// summaries are the declared summaries by Ready reason.
var summaries = map[string]summaryFunc{}

// declare records tp's summary under its Ready reason and returns tp. It
// panics, when the package is initialized, on a reason declared with two
// summaries.
func declare(summary summaryFunc, tp tuple) tuple {
	declareSummary(tp.ready.reason, summary)
	return tp
}

func declareSummary(reason string, summary summaryFunc) {
	if old, ok := summaries[reason]; ok && funcPointer(old) != funcPointer(summary) {
		panic(fmt.Sprintf("rollout: reason %s is declared with two summaries", reason))
	}
	summaries[reason] = summary
}

func funcPointer(f summaryFunc) uintptr {
	if f == nil {
		return 0
	}
	return reflect.ValueOf(f).Pointer()
}

var notRequested = f(v1alpha1.NotRequestedReason, MsgNoRollback)
var healthy = f(v1alpha1.HealthyReason, MsgHealthy)

// The states a pass reports, each declared once: its conditions and the
// summary of the kstatus condition (declare).
var (
	readyTuple = declare(nil, tuple{
		ready:       t(v1alpha1.RolloutSucceededReason, MsgAvailable),
		progressing: f(v1alpha1.RolloutCompleteReason, MsgRolloutComplete),
		degraded:    healthy,
		rolledBack:  notRequested,
	})
	rollingTuple = declare((*decider).rollingSummary, tuple{
		ready:       f(v1alpha1.RolloutInProgressReason, MsgNotAvailableYet),
		progressing: t(v1alpha1.DeploymentProgressingReason, MsgDeploymentProgressing),
		degraded:    healthy,
		rolledBack:  notRequested,
	})
	targetNotFoundTuple = declare((*decider).targetNotFoundSummary, tuple{
		ready:       f(v1alpha1.TargetNotFoundReason, MsgTargetNotFound),
		progressing: f(v1alpha1.BlockedReason, MsgWaitingForTarget),
		degraded:    t(v1alpha1.TargetNotFoundReason, MsgTargetNotFound),
		rolledBack:  notRequested,
	})
	containerNotFoundTuple = declare((*decider).containerNotFoundSummary, tuple{
		ready:       f(v1alpha1.ContainerNotFoundReason, MsgContainerNotFound),
		progressing: f(v1alpha1.BlockedReason, MsgCannotUpdateTarget),
		degraded:    t(v1alpha1.ContainerNotFoundReason, MsgContainerNotFound),
		rolledBack:  notRequested,
	})
	targetConflictTuple = declare((*decider).targetConflictSummary, tuple{
		ready:       f(v1alpha1.TargetConflictReason, MsgTargetConflict),
		progressing: f(v1alpha1.BlockedReason, MsgCannotClaimTarget),
		degraded:    t(v1alpha1.TargetConflictReason, MsgTargetConflict),
		rolledBack:  notRequested,
	})
	manifestConflictTuple = declare((*decider).manifestConflictSummary, tuple{
		ready:       f(v1alpha1.ManifestConflictReason, MsgManifestConflict),
		progressing: f(v1alpha1.BlockedReason, MsgCannotWriteManifest),
		degraded:    t(v1alpha1.ManifestConflictReason, MsgManifestConflict),
		rolledBack:  notRequested,
	})
	manifestMismatchTuple = declare((*decider).manifestMismatchSummary, tuple{
		ready:       f(v1alpha1.ManifestMismatchReason, MsgManifestMismatch),
		progressing: f(v1alpha1.BlockedReason, MsgCannotTrustManifest),
		degraded:    t(v1alpha1.ManifestMismatchReason, MsgManifestMismatch),
		rolledBack:  notRequested,
	})
	autoRollbackTuple = declare((*decider).rolledBackSummary, tuple{
		ready:       f(v1alpha1.RolledBackReason, MsgAutoRolledBack),
		progressing: t(v1alpha1.RollbackInProgressReason, MsgRestoringLast),
		degraded:    t(v1alpha1.RolloutFailedReason, MsgDidNotBecomeAvailable),
		rolledBack:  f(v1alpha1.RollbackInProgressReason, MsgRestoringLast),
	})
	failedTuple = declare((*decider).rolloutFailedSummary, tuple{
		ready:       f(v1alpha1.RolloutFailedReason, MsgDidNotBecomeAvailable),
		progressing: f(v1alpha1.ProgressDeadlineExceededReason, MsgRolloutStopped),
		degraded:    t(v1alpha1.RolloutFailedReason, MsgDidNotBecomeAvailable),
		rolledBack:  f(v1alpha1.RollbackDisabledReason, MsgRollbackDisabled),
	})
	rollbackFailedTuple = declare((*decider).rollbackFailedSummary, tuple{
		ready:       f(v1alpha1.RollbackFailedReason, MsgNoRetainedReady),
		progressing: f(v1alpha1.ProgressDeadlineExceededReason, MsgRollbackStopped),
		degraded:    t(v1alpha1.RollbackFailedReason, MsgRetainedNotRestored),
		rolledBack:  f(v1alpha1.RollbackFailedReason, MsgRetainedNotRestored),
	})
	rollbackSucceededTuple = declare((*decider).rolledBackSummary, tuple{
		ready:       f(v1alpha1.RolledBackReason, MsgRetainedAvailable),
		progressing: f(v1alpha1.RollbackCompleteReason, MsgRollbackComplete),
		degraded:    t(v1alpha1.DesiredVersionFailedReason, MsgHeldAtRetained),
		rolledBack:  t(v1alpha1.RollbackSucceededReason, MsgRetainedRestored),
	})
	rollbackMonitorTuple = declare((*decider).rolledBackSummary, tuple{
		ready:       f(v1alpha1.RolledBackReason, MsgDesiredNotActive),
		progressing: t(v1alpha1.RollbackInProgressReason, MsgRestoringRetained),
		degraded:    t(v1alpha1.DesiredVersionFailedReason, MsgHeldAtRetained),
		rolledBack:  f(v1alpha1.RollbackInProgressReason, MsgRestoringRetained),
	})
	rollbackRejectedTuple = declare(nil, tuple{
		ready:       f(v1alpha1.RollbackTargetUnavailableReason, MsgTargetNotRetained),
		progressing: f(v1alpha1.BlockedReason, MsgManualCannotStart),
		degraded:    t(v1alpha1.RollbackTargetUnavailableReason, MsgTargetNotRetained),
		rolledBack:  f(v1alpha1.RollbackRejectedReason, MsgManualRejected),
	})
	manualRollbackTuple = declare((*decider).manualRollbackSummary, tuple{
		ready:       f(v1alpha1.ManualRollbackReason, MsgManualInProgress),
		progressing: t(v1alpha1.RollbackInProgressReason, MsgRestoringRequested),
		degraded:    t(v1alpha1.ManualRollbackReason, MsgHeldAtRetained),
		rolledBack:  f(v1alpha1.RollbackInProgressReason, MsgRestoringRequested),
	})
	// A manual hold is not a failure of the desired spec (docs/decisions.md): Degraded
	// names the manual rollback, and Ready says how to release the hold.
	manualHeldTuple = declare((*decider).rolledBackSummary, tuple{
		ready:       f(v1alpha1.RolledBackReason, MsgManualHeld),
		progressing: f(v1alpha1.RollbackCompleteReason, MsgRollbackComplete),
		degraded:    t(v1alpha1.ManualRollbackReason, MsgHeldAtRetained),
		rolledBack:  t(v1alpha1.RollbackSucceededReason, MsgRetainedRestored),
	})
	deploymentRollingTuple = declare((*decider).deploymentRollingSummary, tuple{
		ready:       f(v1alpha1.DeploymentRollingReason, MsgDeploymentRolling),
		progressing: t(v1alpha1.DeploymentRollingReason, MsgDeploymentRolling),
		degraded:    healthy,
		rolledBack:  notRequested,
	})
	targetPausedTuple = declare((*decider).targetPausedSummary, tuple{
		ready:       f(v1alpha1.TargetPausedReason, MsgTargetPaused),
		progressing: f(v1alpha1.TargetPausedReason, MsgTargetPaused),
		degraded:    healthy,
		rolledBack:  notRequested,
	})
	waitingTuple = declare((*decider).rollingSummary, tuple{
		ready:       f(v1alpha1.RolloutInProgressReason, MsgWaitingForController),
		progressing: t(v1alpha1.DeploymentProgressingReason, MsgWaitingForController),
		degraded:    healthy,
		rolledBack:  notRequested,
	})
	bakingTuple = declare((*decider).bakingSummary, tuple{
		ready:       f(v1alpha1.BakingReason, MsgBaking),
		progressing: t(v1alpha1.BakingReason, MsgBaking),
		degraded:    healthy,
		rolledBack:  notRequested,
	})
	// The bake waits out a node that is not Ready: the version is not
	// judged by pods the cluster lost, and is not Ready while they are.
	bakingNodeNotReadyTuple = declare((*decider).bakingSummary, tuple{
		ready:       f(v1alpha1.BakingReason, MsgBakingNodeNotReady),
		progressing: t(v1alpha1.BakingReason, MsgBakingNodeNotReady),
		degraded:    healthy,
		rolledBack:  notRequested,
	})
	// The bake waits for a pod of the version to serve: a version that no
	// pod runs (replicas 0) or whose pods the operator cannot see is not
	// judged, so it does not pass either.
	bakingNoPodsTuple = declare((*decider).bakingSummary, tuple{
		ready:       f(v1alpha1.BakingReason, MsgBakingNoPods),
		progressing: t(v1alpha1.BakingReason, MsgBakingNoPods),
		degraded:    healthy,
		rolledBack:  notRequested,
	})
	replacingInPlaceTuple = declare((*decider).replacingInPlaceSummary, tuple{
		ready:       f(v1alpha1.ReplacingInPlaceReason, MsgReplacingInPlace),
		progressing: t(v1alpha1.ReplacingInPlaceReason, MsgReplacingInPlace),
		degraded:    healthy,
		rolledBack:  notRequested,
	})
	unschedulableTuple = declare((*decider).heldBackSummary, tuple{
		ready:       f(v1alpha1.UnschedulableReason, MsgUnschedulable),
		progressing: t(v1alpha1.UnschedulableReason, MsgUnschedulable),
		degraded:    healthy,
		rolledBack:  notRequested,
	})
	podCreationRefusedTuple = declare((*decider).heldBackSummary, tuple{
		ready:       f(v1alpha1.PodCreationRefusedReason, MsgPodCreationRefused),
		progressing: t(v1alpha1.PodCreationRefusedReason, MsgPodCreationRefused),
		degraded:    healthy,
		rolledBack:  notRequested,
	})
	schedulingGatedTuple = declare((*decider).heldBackSummary, tuple{
		ready:       f(v1alpha1.SchedulingGatedReason, MsgSchedulingGated),
		progressing: t(v1alpha1.SchedulingGatedReason, MsgSchedulingGated),
		degraded:    healthy,
		rolledBack:  notRequested,
	})
	verifyingTuple = declare((*decider).heldBackSummary, tuple{
		ready:       f(v1alpha1.VerifyingReason, MsgVerifying),
		progressing: t(v1alpha1.VerifyingReason, MsgVerifying),
		degraded:    healthy,
		rolledBack:  notRequested,
	})
	scalingTuple = declare((*decider).scalingSummary, tuple{
		ready:       f(v1alpha1.ScalingReason, MsgScaling),
		progressing: t(v1alpha1.ScalingReason, MsgScaling),
		degraded:    healthy,
		rolledBack:  notRequested,
	})
	deploymentUnavailableTuple = declare((*decider).deploymentUnavailableSummary, tuple{
		ready:       f(v1alpha1.DeploymentUnavailableReason, MsgDeploymentUnavailable),
		progressing: f(v1alpha1.DeploymentUnavailableReason, MsgNoModelRollout),
		degraded:    t(v1alpha1.DeploymentUnavailableReason, MsgDeploymentUnavailable),
		rolledBack:  notRequested,
	})
)

// startState is the start-rollout state; its Progressing reason is the
// cause (startTuple).
var startState = declare((*decider).rollingSummary, tuple{
	ready:       f(v1alpha1.RolloutStartedReason, MsgNotAvailableYet),
	progressing: t("", MsgRolloutStarted),
	degraded:    healthy,
	rolledBack:  notRequested,
})

// startTuple is the start-rollout tuple for a Progressing reason
// (SpecChanged, InitialRollout or DriftCorrected).
func startTuple(reason string) tuple {
	tp := startState
	tp.progressing.reason = reason
	return tp
}

// invalidState is the InvalidSpec state; its message names the field
// (invalidTuple), which the summary keeps. RolledBack is Unknown: with an
// invalid spec the operator does not look at the target, so it cannot say
// whether a rollback holds it.
var invalidState = declare(nil, tuple{
	ready:       f(v1alpha1.InvalidSpecReason, ""),
	progressing: f(v1alpha1.BlockedReason, MsgReconciliationBlocked),
	degraded:    t(v1alpha1.InvalidSpecReason, ""),
	rolledBack:  cond{metav1.ConditionUnknown, v1alpha1.InvalidSpecReason, MsgRollbackNotEvaluated},
})

// invalidTuple is the InvalidSpec tuple with message.
func invalidTuple(message string) tuple {
	tp := invalidState
	tp.ready.message, tp.degraded.message = message, message
	return tp
}

// Two states overlay the verdict under them instead of setting all four
// conditions: suspension (Ready only, deletion.go) and an ownership
// conflict (Ready, Degraded and Stalled, conflicts.go). Their messages
// stay as they set them.
func init() {
	declareSummary(v1alpha1.SuspendedReason, nil)
	declareSummary(v1alpha1.OwnershipConflictReason, nil)
}
