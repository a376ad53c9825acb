package v1alpha1

import "github.com/fluxcd/pkg/apis/meta"

// Condition types. Ready, Reconciling and Stalled are Flux's (kstatus reads
// them); Progressing, Degraded and RolledBack are the reference operator's.
const (
	ReadyCondition       = meta.ReadyCondition
	ReconcilingCondition = meta.ReconcilingCondition
	StalledCondition     = meta.StalledCondition
	ProgressingCondition = "Progressing"
	DegradedCondition    = "Degraded"
	RolledBackCondition  = "RolledBack"
)

// Condition reasons. One name for one thing: status, events and docs use these.
const (
	// Blockers, re-evaluated on every pass.
	TargetNotFoundReason            = "TargetNotFound"
	ContainerNotFoundReason         = "ContainerNotFound"
	TargetConflictReason            = "TargetConflict"
	ManifestConflictReason          = "ManifestConflict"
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
