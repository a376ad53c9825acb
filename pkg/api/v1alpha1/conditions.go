package v1alpha1

import "github.com/fluxcd/pkg/apis/meta"

// Condition types. Ready, Reconciling and Stalled are Flux's (kstatus reads
// them); Progressing, Degraded and RolledBack are those of the Python (Kopf)
// operator this one replaces.
const (
	ReadyCondition       = meta.ReadyCondition
	ReconcilingCondition = meta.ReconcilingCondition
	StalledCondition     = meta.StalledCondition
	ProgressingCondition = "Progressing"
	DegradedCondition    = "Degraded"
	RolledBackCondition  = "RolledBack"
	// OwnershipConflictCondition is True, and present only then, while
	// another field manager keeps reverting a field the operator owns on
	// the target Deployment.
	OwnershipConflictCondition = "OwnershipConflict"
)

// NegativePolarityConditions are the condition types whose True status is
// abnormal, in the sense of Flux's condition checker
// (fluxcd/pkg/runtime/conditions/check): everything but Ready and
// Progressing.
var NegativePolarityConditions = []string{
	StalledCondition, ReconcilingCondition, DegradedCondition, RolledBackCondition, OwnershipConflictCondition,
}

// Condition reasons. One name for one thing: status, events and docs use these.
const (
	// Blockers, re-evaluated on every pass.
	TargetNotFoundReason    = "TargetNotFound"
	ContainerNotFoundReason = "ContainerNotFound"
	TargetConflictReason    = "TargetConflict"
	ManifestConflictReason  = "ManifestConflict"
	// ManifestMismatchReason: a manifest ConfigMap the resource owns, of
	// the name the target points at (or is about to), holds other content
	// than the manifest the operator writes (deleted and created again by
	// someone else, or created before the operator under the next
	// version's name): the operator deletes it and writes it again, and
	// never points the target at it.
	ManifestMismatchReason          = "ManifestMismatch"
	InvalidSpecReason               = "InvalidSpec"
	BlockedReason                   = "Blocked"
	RollbackTargetUnavailableReason = "RollbackTargetUnavailable"
	RollbackRejectedReason          = "RollbackRejected"

	// Rollout of the desired spec.
	SpecChangedReason              = "SpecChanged"
	InitialRolloutReason           = "InitialRollout"
	DriftCorrectedReason           = "DriftCorrected"
	RolloutStartedReason           = "RolloutStarted"
	RolloutInProgressReason        = "RolloutInProgress"
	DeploymentProgressingReason    = "DeploymentProgressing"
	RolloutSucceededReason         = "RolloutSucceeded"
	RolloutCompleteReason          = "RolloutComplete"
	RolloutFailedReason            = "RolloutFailed"
	ProgressDeadlineExceededReason = "ProgressDeadlineExceeded"
	HealthyReason                  = "Healthy"
	DeploymentUnavailableReason    = "DeploymentUnavailable"
	// DeploymentRollingReason: the target rolls out a change another
	// field manager made (an image upgrade); the model did not change.
	DeploymentRollingReason = "DeploymentRolling"
	// ScalingReason: the target serves the desired version and brings up
	// pods of its current template (a scale-up by the model or an HPA,
	// minReadySeconds, a replaced pod): Kubernetes and Argo CD call that
	// progress, not a failure.
	ScalingReason = "Scaling"
	// BakingReason: the model's own rollout of a new version completed and
	// the version bakes (spec.rolloutStrategy.bakeSeconds) before it is
	// Ready and retained.
	BakingReason = "Baking"
	// BakeFailedReason: a pod of the baking version restarted a container,
	// was OOM-killed or stayed unready: a failed rollout.
	BakeFailedReason = "BakeFailed"
	// UnschedulableReason: a pod of the version being rolled out (or
	// rolled back to) waits for a node: the scheduler reports it
	// unschedulable (PodScheduled=False, reason Unschedulable), most often
	// because no node has the resources it requests free (a GPU). Progress
	// that waits, not a failure, until the progress deadline passes.
	UnschedulableReason = "Unschedulable"
	// PodCreationRefusedReason: the Deployment controller cannot create a
	// pod of the version being rolled out (or rolled back to): the API
	// server refused it (ReplicaFailure=True, FailedCreate), most often a
	// namespace ResourceQuota, else a LimitRange or an admission webhook,
	// named in the message. Progress that waits, not a failure, until the
	// progress deadline passes.
	PodCreationRefusedReason = "PodCreationRefused"
	// SchedulingGatedReason: a pod of the version being rolled out (or
	// rolled back to) is held by a scheduling gate (spec.schedulingGates,
	// PodScheduled=False, reason SchedulingGated), such as the admission
	// gate of Kueue, until whatever added the gate removes it. Progress
	// that waits, not a failure, until the progress deadline passes.
	SchedulingGatedReason = "SchedulingGated"
	// VerifyingReason: a pod of the version being rolled out (or rolled
	// back to) is ready but for the operator's readiness gate: the
	// operator sends it the golden request (spec.verification).
	VerifyingReason = "Verifying"
	// VerificationFailedReason: a pod of the version answered the golden
	// request wrongly, or not at all, on every attempt, during the
	// rollout or its bake: the rollout failed at once, without waiting for
	// its deadline. The message names the pod and what the answer lacked.
	VerificationFailedReason = "VerificationFailed"
	// ReplacingInPlaceReason: a pod of the version being rolled out (or
	// back to) stayed unschedulable, and spec.rolloutStrategy.whenUnschedulable
	// is ReplaceInPlace: the Deployment replaces pods in place (maxSurge 0)
	// until the rollout completes, then the declared strategy is restored.
	ReplacingInPlaceReason = "ReplacingInPlace"
	// TargetPausedReason: the target Deployment is paused, so the model's
	// rollout waits until its owner resumes it.
	TargetPausedReason = "TargetPaused"
	// RetryRequestedReason: reconcile.fluxcd.io/resetAt asked for the failed
	// desired spec to be tried again.
	RetryRequestedReason = "RetryRequested"
	// Sharing the target with other field managers.
	FieldReplacedReason     = "FieldReplaced"
	OwnershipConflictReason = "OwnershipConflict"
	// A step of a pass failed; the pass reports it and retries.
	ManifestFailedReason = "ManifestFailed"
	ApplyFailedReason    = "ApplyFailed"
	ApplyRejectedReason  = "ApplyRejected"
	ReleaseFailedReason  = "ReleaseFailed"
	PruneFailedReason    = "PruneFailed"
	InternalErrorReason  = "InternalError"
	// AccessDenied: the API server's authorization refused a write (the
	// model's ServiceAccount, or the operator, may not make it).
	AccessDeniedReason = "AccessDenied"
	// VerdictWriteFailedReason: a Warning event when the operator could
	// not write a pod's verdict of the golden request (a ServiceAccount
	// without patch on pods/status): the pod stays unready.
	VerdictWriteFailedReason = "VerdictWriteFailed"

	// Rollback.
	NotRequestedReason         = "NotRequested"
	RolledBackReason           = "RolledBack"
	RollbackStartedReason      = "RollbackStarted"
	RollbackInProgressReason   = "RollbackInProgress"
	RollbackCompleteReason     = "RollbackComplete"
	RollbackSucceededReason    = "RollbackSucceeded"
	RollbackFailedReason       = "RollbackFailed"
	RollbackDisabledReason     = "RollbackDisabled"
	ManualRollbackReason       = "ManualRollback"
	DesiredVersionFailedReason = "DesiredVersionFailed"

	// Suspension and deletion.
	SuspendedReason           = "Suspended"
	ModelRemovedReason        = "ModelRemoved"
	ModelRemovalSkippedReason = "ModelRemovalSkipped"
)

// The reasons of a pod's v1alpha1.VerifiedCondition.
const (
	// PodVerifiedReason: the pod answered the golden request correctly.
	PodVerifiedReason = "Verified"
	// PodVerificationFailedReason: the pod failed every attempt.
	PodVerificationFailedReason = "VerificationFailed"
	// PodNotVerifiedReason: the model no longer declares a golden request
	// while the pod template still carries the gate: the pod passes
	// without one.
	PodNotVerifiedReason = "NotVerified"
)
