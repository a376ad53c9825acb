package v1alpha1

import (
	"github.com/fluxcd/pkg/apis/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ReplaceInPlaceStatus is a rollout that replaces pods in place.
type ReplaceInPlaceStatus struct {
	// SpecHash is the spec (the desired one, or a rollback's) whose rollout
	// replaces pods in place.
	//
	// +required
	SpecHash string `json:"specHash"`

	// MaxUnavailable is the Deployment's maxUnavailable meanwhile
	// (maxSurge is 0): replicas − minAvailable.
	//
	// +required
	MaxUnavailable int32 `json:"maxUnavailable"`

	// Restoring is true once the rollout completed: the declared strategy
	// goes back on the Deployment.
	//
	// +optional
	Restoring bool `json:"restoring,omitempty"`

	// StartedAt is when the pass decided it.
	//
	// +required
	StartedAt metav1.Time `json:"startedAt"`
}

// Phase is the coarse lifecycle state shown in the Phase printer column.
//
// +kubebuilder:validation:Enum=Pending;RollingOut;Ready;Failed;RolledBack;Suspended
type Phase string

// HistoryEntry is a spec that became Ready and is retained for rollback.
type HistoryEntry struct {
	// Version is the model pointer of Spec; history holds one entry per version.
	Version string `json:"version"`
	// SpecHash is the sha256 digest of Spec's canonical JSON.
	SpecHash string `json:"specHash"`
	// ManifestHash is the sha256 digest of Spec's manifest.
	ManifestHash string `json:"manifestHash"`
	// Spec is the normalized spec that became Ready.
	Spec NormalizedSpec `json:"spec"`
	// ReadyAt is when Spec became Ready.
	ReadyAt metav1.Time `json:"readyAt"`
}

// MaxVerifiedConfigMaps bounds status.verifiedConfigMaps: twice the most
// versions a model retains (MaxRevisionHistoryLimit), and the desired and a
// rollback's, each under a name and its legacy name.
const MaxVerifiedConfigMaps = 202

// VerifiedConfigMap is a manifest ConfigMap whose content the operator
// knows to be the manifest it writes: one it created (the create's answer
// names its UID), or one it read and found to hold exactly that manifest,
// immutable. A ConfigMap's UID is the API server's and never changes, and
// the data of an immutable ConfigMap cannot change either: the record stays
// true for as long as that ConfigMap exists.
type VerifiedConfigMap struct {
	// Name is the ConfigMap's name.
	Name string `json:"name"`
	// UID is the ConfigMap's UID.
	UID types.UID `json:"uid"`
	// ManifestHash is the digest of the manifest it holds.
	ManifestHash string `json:"manifestHash"`
}

// FieldCorrection counts the corrections of one owned target field that one
// other field manager keeps setting.
type FieldCorrection struct {
	// Field is the field path, e.g. "spec.replicas".
	Field string `json:"field"`
	// Manager is the field manager that had set the field, or "" when no
	// manager is on record (a removal).
	//
	// +optional
	Manager string `json:"manager,omitempty"`
	// Count is the number of corrections, each within an hour of the one
	// before.
	Count int32 `json:"count"`
	// FirstCorrectedAt is when the first of them happened.
	FirstCorrectedAt metav1.Time `json:"firstCorrectedAt"`
	// LastCorrectedAt is when the latest happened.
	LastCorrectedAt metav1.Time `json:"lastCorrectedAt"`
}

// OpenMedModelStatus is the observed state of an OpenMedModel. It holds only
// coordinates, hashes, generations and fixed lifecycle text.
type OpenMedModelStatus struct {
	meta.ReconcileRequestStatus `json:",inline"`

	// LastHandledResetAt is the last reconcile.fluxcd.io/resetAt value handled:
	// a reset clears the failed-spec block so the desired spec is tried again.
	//
	// +optional
	LastHandledResetAt string `json:"lastHandledResetAt,omitempty"`

	// ObservedGeneration is the generation this status describes.
	//
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Phase is the coarse lifecycle state.
	//
	// +optional
	Phase Phase `json:"phase,omitempty"`

	// DesiredVersion is spec.version of the evaluated spec.
	//
	// +optional
	DesiredVersion string `json:"desiredVersion,omitempty"`

	// ActiveVersion is the version believed to be served.
	//
	// +optional
	ActiveVersion string `json:"activeVersion,omitempty"`

	// DesiredSpecHash is the digest of the normalized desired spec.
	//
	// +optional
	DesiredSpecHash string `json:"desiredSpecHash,omitempty"`

	// AppliedSpecHash is the digest of the spec last written to the target.
	//
	// +optional
	AppliedSpecHash string `json:"appliedSpecHash,omitempty"`

	// FailedSpecHash is the digest of the desired spec that failed; it is not
	// retried until the spec changes or a reset is requested.
	//
	// +optional
	FailedSpecHash string `json:"failedSpecHash,omitempty"`

	// ManifestHash is the digest of the desired manifest.
	//
	// +optional
	ManifestHash string `json:"manifestHash,omitempty"`

	// ManifestConfigMapName is the content-addressed ConfigMap the target
	// currently points at.
	//
	// +optional
	ManifestConfigMapName string `json:"manifestConfigMapName,omitempty"`

	// VerifiedConfigMaps are the manifest ConfigMaps of this resource
	// whose content the operator verified, by UID. The target is pointed at
	// a manifest ConfigMap only while it is one of these: a ConfigMap of the
	// same name with another UID (deleted and created again by someone
	// else) is read and compared first, and one with other content is
	// deleted and written again (reason ManifestMismatch). A record is
	// added with the first status write after the ConfigMap was created,
	// or by the pass that read it.
	//
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=202
	VerifiedConfigMaps []VerifiedConfigMap `json:"verifiedConfigMaps,omitempty"`

	// TargetName is the Deployment this resource last pointed at its
	// manifest. The Deployments still to be released after a retarget are
	// in ClaimedTargets.
	//
	// +optional
	TargetName string `json:"targetName,omitempty"`

	// ClaimedTargets are the Deployments the operator may have written for
	// this resource and has not yet seen released: a name is recorded
	// before the first write to that Deployment (a status patch of its own
	// when the name is new) and leaves the list once a pass finds nothing
	// of the operator's on it. Every Deployment listed is released on a
	// retarget and at deletion, whatever happened between the passes (a
	// status write lost to a conflict, a crash); the finalizer goes only
	// once none of them carries anything of the operator's.
	//
	// +optional
	// +listType=set
	ClaimedTargets []string `json:"claimedTargets,omitempty"`

	// TargetDeploymentGeneration is the target Deployment's generation after
	// the operator last changed its pod template (started a rollout). It is
	// informational: readiness is judged from the Deployment's own status
	// (its observedGeneration against its generation), never from this
	// field.
	//
	// +optional
	TargetDeploymentGeneration int64 `json:"targetDeploymentGeneration,omitempty"`

	// RollbackCount counts the rollbacks started since a desired spec last
	// became Ready; reaching Ready resets it to zero.
	//
	// +optional
	// +kubebuilder:validation:Minimum=0
	RollbackCount int32 `json:"rollbackCount,omitempty"`

	// RollbackRequest is automatic:<restored version> or manual:<restored
	// version>: what started the active rollback and what it restores.
	//
	// +optional
	RollbackRequest string `json:"rollbackRequest,omitempty"`

	// LastSuccessfulSpec is the newest spec that became Ready (history[0]).
	//
	// +optional
	LastSuccessfulSpec *NormalizedSpec `json:"lastSuccessfulSpec,omitempty"`

	// PreviousSuccessfulSpec is the newest retained spec with another version
	// than LastSuccessfulSpec (history[1]).
	//
	// +optional
	PreviousSuccessfulSpec *NormalizedSpec `json:"previousSuccessfulSpec,omitempty"`

	// RollbackSpec is the retained spec being restored or held by a rollback.
	//
	// +optional
	RollbackSpec *NormalizedSpec `json:"rollbackSpec,omitempty"`

	// RetryStartedAt is when a reconcile.fluxcd.io/resetAt retry found the
	// failed desired pointer still on the target (nothing retained to roll
	// back to): the retry is judged only by Deployment status produced after
	// it, and fails again when no rollout completes within the spec's
	// progressDeadlineSeconds.
	//
	// +optional
	RetryStartedAt *metav1.Time `json:"retryStartedAt,omitempty"`

	// ReplaceInPlace records a rollout that replaces pods in place because
	// a new pod stayed unschedulable (spec.rolloutStrategy.whenUnschedulable:
	// ReplaceInPlace). It is written before the strategy changes and while
	// the declared one is restored, so a pass after a crash finishes what
	// the record says. Cleared once the declared strategy is back.
	//
	// +optional
	ReplaceInPlace *ReplaceInPlaceStatus `json:"replaceInPlace,omitempty"`

	// BakeStartedAt is when the rollout of the desired spec (applied spec
	// hash) completed and its bake began (spec.rolloutStrategy.bakeSeconds):
	// it is Ready and retained once the bake ends without a failure. Cleared
	// when it becomes Ready, fails, or another spec rolls out.
	//
	// +optional
	BakeStartedAt *metav1.Time `json:"bakeStartedAt,omitempty"`

	// Corrections are the fields of the target Deployment the operator
	// changed back (drift) or replaced (a value that made its apply
	// invalid) in the last hour, by the field manager that had set them.
	// Three corrections of one field for one manager, each within an hour of
	// the last, are an ownership conflict (condition OwnershipConflict).
	//
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=20
	Corrections []FieldCorrection `json:"corrections,omitempty"`

	// History holds the retained successful specs, newest first, one per
	// version, at most spec.revisionHistoryLimit.
	//
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=100
	History []HistoryEntry `json:"history,omitempty"`

	// Conditions are Ready, Progressing, Degraded, RolledBack and, when true,
	// Flux's Reconciling and Stalled.
	//
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// The phases of an OpenMedModel.
const (
	PhasePending    Phase = "Pending"
	PhaseRollingOut Phase = "RollingOut"
	PhaseReady      Phase = "Ready"
	PhaseFailed     Phase = "Failed"
	PhaseRolledBack Phase = "RolledBack"
	PhaseSuspended  Phase = "Suspended"
)
