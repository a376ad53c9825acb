package v1alpha1

import (
	"github.com/fluxcd/pkg/apis/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Tier is a published OpenMed model size or device tier.
//
// +kubebuilder:validation:Enum=Tiny;Small;Medium;Base;Large;XLarge;Accurate-XLarge
type Tier string

// The published tiers.
const (
	TierTiny           Tier = "Tiny"
	TierSmall          Tier = "Small"
	TierMedium         Tier = "Medium"
	TierBase           Tier = "Base"
	TierLarge          Tier = "Large"
	TierXLarge         Tier = "XLarge"
	TierAccurateXLarge Tier = "Accurate-XLarge"
)

// Tiers lists every valid Tier, sorted, as the validation message names them.
var Tiers = []Tier{TierAccurateXLarge, TierBase, TierLarge, TierMedium, TierSmall, TierTiny, TierXLarge}

// RolloutStrategyType is the Deployment strategy the operator applies to the target.
//
// +kubebuilder:validation:Enum=RollingUpdate;Recreate
type RolloutStrategyType string

// The supported strategy types; they map one to one onto the Deployment's.
const (
	RollingUpdateRolloutStrategyType RolloutStrategyType = "RollingUpdate"
	RecreateRolloutStrategyType      RolloutStrategyType = "Recreate"
)

// Defaults the API server fills in (CRD defaults) and the Go defaulter mirrors.
const (
	DefaultMaxUnavailable          = 0
	DefaultMaxSurge                = 1
	DefaultRollbackOnFailure       = true
	DefaultProgressDeadlineSeconds = int32(600)
	// MaxBakeSeconds bounds spec.rolloutStrategy.bakeSeconds (a day).
	MaxBakeSeconds              = int32(86400)
	DefaultRevisionHistoryLimit = int32(10)
	// DefaultContainerName is the container of the OpenMed Helm chart.
	DefaultContainerName = "openmed-service"
)

// Validation bounds shared by the CRD markers and the Go validator.
const (
	MinReplicas             = 1
	MaxReplicas             = 1000
	MinRevisionHistoryLimit = 1
	MaxRevisionHistoryLimit = 100
	MaxFamilyLength         = 63
	MaxVersionLength        = 253
	MaxDNSSubdomainLength   = 253
	MaxDNSLabelLength       = 63
	// MaxIntOrStringValue is the largest integer maxSurge/maxUnavailable accepts:
	// the Deployment field is an int32.
	MaxIntOrStringValue = 2147483647
)

// Patterns shared by the CRD markers and the Go validator. The markers below must
// spell the same expressions; the differential test proves they do.
const (
	FamilyPattern       = `^[A-Za-z](?:[A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$`
	VersionPattern      = `^[A-Za-z0-9][A-Za-z0-9._:@/+~-]{0,252}$`
	DNSSubdomainPattern = `^[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?)*$`
	DNSLabelPattern     = `^[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?$`
	PercentPattern      = `^(?:0|[1-9][0-9]?|100)%$`
)

// OpenMedModelSpec declares the model an existing Deployment preloads and how a
// change is rolled out.
//
// +kubebuilder:validation:XValidation:rule="!has(self.rolloutStrategy.whenUnschedulable) || self.rolloutStrategy.whenUnschedulable != 'ReplaceInPlace' || self.rolloutStrategy.type == 'RollingUpdate'",message="replacing pods in place (whenUnschedulable) needs rolloutStrategy.type RollingUpdate."
// +kubebuilder:validation:XValidation:rule="(!has(self.rolloutStrategy.unschedulableSeconds) && !has(self.rolloutStrategy.minAvailable)) || (has(self.rolloutStrategy.whenUnschedulable) && self.rolloutStrategy.whenUnschedulable == 'ReplaceInPlace')",message="unschedulableSeconds and minAvailable apply only when whenUnschedulable replaces pods in place."
// +kubebuilder:validation:XValidation:rule="!has(self.rolloutStrategy.unschedulableSeconds) || !has(self.rolloutStrategy.progressDeadlineSeconds) || self.rolloutStrategy.unschedulableSeconds < self.rolloutStrategy.progressDeadlineSeconds",message="unschedulableSeconds must be below progressDeadlineSeconds."
// +kubebuilder:validation:XValidation:rule="!has(self.rolloutStrategy.minAvailable) || !has(self.replicas) || self.rolloutStrategy.minAvailable <= self.replicas",message="minAvailable cannot exceed replicas."
// +kubebuilder:validation:XValidation:rule="self.rolloutStrategy.type != 'RollingUpdate' || !((!has(self.rolloutStrategy.maxUnavailable) || self.rolloutStrategy.maxUnavailable == 0 || self.rolloutStrategy.maxUnavailable == '0%') && (!has(self.rolloutStrategy.maxSurge) || self.rolloutStrategy.maxSurge == 0 || self.rolloutStrategy.maxSurge == '0%'))",message="RollingUpdate cannot set both maxUnavailable and maxSurge to zero."
type OpenMedModelSpec struct {
	// Family is the logical OpenMed model family.
	//
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[A-Za-z](?:[A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$`
	Family string `json:"family"`

	// Version is the pinned model manifest pointer (for example an org/model
	// repository id) written to OPENMED_SERVICE_PRELOAD_MODELS. "Pinned" means
	// it names one immutable artefact; changing it rolls the Deployment.
	//
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9._:@/+~-]{0,252}$`
	// +kubebuilder:validation:XValidation:rule="!self.contains('..') && !self.contains('://')",message="must not contain '..' or '://': a model pointer names an artefact, not a path or a URL."
	Version string `json:"version"`

	// Tier is the published OpenMed model size or device tier.
	//
	// +required
	Tier Tier `json:"tier"`

	// Replicas is the replica count the operator sets on the target Deployment.
	// When omitted the operator leaves replicas to the Deployment's owner or to
	// a HorizontalPodAutoscaler.
	//
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	Replicas *int32 `json:"replicas,omitempty"`

	// TargetRef names the existing Deployment and container to manage. The
	// resource name and the openmed-service container are used by default.
	//
	// +optional
	TargetRef *TargetReference `json:"targetRef,omitempty"`

	// ManifestConfigMapName is the base name of the operator-owned manifest
	// ConfigMaps; each one is suffixed with its manifest hash. Defaults to
	// <resource>-model-manifest.
	//
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?)*$`
	ManifestConfigMapName string `json:"manifestConfigMapName,omitempty"`

	// ServiceAccountName is a ServiceAccount of the resource's namespace the
	// operator impersonates for every write it makes to the target Deployment
	// and to the manifest ConfigMaps (the apply, the release, the manifest
	// ConfigMaps' creation and deletion). The operator then changes only
	// what that ServiceAccount may change. Reads, the status and events stay
	// the operator's own. When omitted, the writes are made with the
	// operator's own rights, or, when the operator runs with
	// --default-service-account, as that ServiceAccount of the resource's
	// namespace.
	//
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?)*$`
	ServiceAccountName string `json:"serviceAccountName,omitempty"`

	// RolloutStrategy says how the target Deployment rolls to a new version and
	// whether a failed rollout is rolled back.
	//
	// +required
	RolloutStrategy RolloutStrategy `json:"rolloutStrategy"`

	// Suspend tells the operator to change nothing until it is set to false.
	//
	// +optional
	Suspend bool `json:"suspend,omitempty"`

	// RevisionHistoryLimit is how many successful specs, one per distinct
	// version, are retained in status.history for rollback.
	//
	// +optional
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	RevisionHistoryLimit *int32 `json:"revisionHistoryLimit,omitempty"`
}

// TargetReference names the Deployment and container an OpenMedModel manages.
type TargetReference struct {
	// Name of the Deployment in the resource's namespace. Defaults to the
	// resource name.
	//
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?)*$`
	Name string `json:"name,omitempty"`

	// ContainerName is the container whose environment receives the preload
	// pointer. Defaults to openmed-service.
	//
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?$`
	ContainerName string `json:"containerName,omitempty"`
}

// RolloutStrategy says how a new version reaches the target Deployment.
type RolloutStrategy struct {
	// Type is the Deployment strategy: RollingUpdate or Recreate.
	//
	// +required
	Type RolloutStrategyType `json:"type"`

	// MaxUnavailable is the Deployment's rollingUpdate.maxUnavailable: a
	// non-negative integer or a percentage from 0% to 100%.
	//
	// +optional
	// +kubebuilder:default=0
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? (self >= 0 && self <= 2147483647) : self.matches('^(?:0|[1-9][0-9]?|100)%$')",message="must be a non-negative integer or a percentage from 0% to 100%"
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`

	// MaxSurge is the Deployment's rollingUpdate.maxSurge: a non-negative
	// integer or a percentage from 0% to 100%.
	//
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? (self >= 0 && self <= 2147483647) : self.matches('^(?:0|[1-9][0-9]?|100)%$')",message="must be a non-negative integer or a percentage from 0% to 100%"
	MaxSurge *intstr.IntOrString `json:"maxSurge,omitempty"`

	// RollbackOnFailure restores the last successful spec when a rollout fails.
	//
	// +optional
	// +kubebuilder:default=true
	RollbackOnFailure *bool `json:"rollbackOnFailure,omitempty"`

	// ProgressDeadlineSeconds is the Deployment's progressDeadlineSeconds: how
	// long a rollout may make no progress before it counts as failed.
	//
	// +optional
	// +kubebuilder:default=600
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=2147483647
	ProgressDeadlineSeconds *int32 `json:"progressDeadlineSeconds,omitempty"`

	// BakeSeconds, when above 0, is how long a new version must serve after
	// its rollout completed before it is Ready and retained: while it bakes,
	// a restart or OOM kill of the model container, or a pod that stays
	// unready on a Ready node (docs/bake-guard.md), fails the rollout and
	// rolls it back like a missed progress
	// deadline. The pod template then carries the openmed.ai/bake label, by
	// which the operator watches the pods. 0 or absent: a version is Ready
	// the moment its rollout completes.
	//
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	BakeSeconds *int32 `json:"bakeSeconds,omitempty"`

	// WhenUnschedulable is what a rollout does when a pod of the version it
	// rolls out (or back to) stays unschedulable — the scheduler finds no
	// node with what the pod requests free, typically a GPU — for
	// unschedulableSeconds. Wait (the default) waits for capacity until the
	// progress deadline. ReplaceInPlace finishes the rollout without a
	// spare: the Deployment's strategy becomes maxSurge 0 and
	// maxUnavailable replicas − minAvailable until the rollout completes,
	// then the declared strategy is restored. RollingUpdate only. (The name
	// follows topologySpreadConstraints' whenUnsatisfiable.)
	//
	// +optional
	WhenUnschedulable UnschedulableAction `json:"whenUnschedulable,omitempty"`

	// UnschedulableSeconds is how long a new pod stays unschedulable before
	// ReplaceInPlace acts. Default 30; below progressDeadlineSeconds. Only
	// with whenUnschedulable: ReplaceInPlace.
	//
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=3600
	UnschedulableSeconds *int32 `json:"unschedulableSeconds,omitempty"`

	// MinAvailable is the fewest available pods ReplaceInPlace keeps while
	// it replaces pods: the Deployment's maxUnavailable is replicas −
	// minAvailable. Default replicas − 1 and at least 1, so a model of one
	// replica is never replaced in place unless minAvailable is 0. At most
	// spec.replicas. Only with whenUnschedulable: ReplaceInPlace.
	//
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	MinAvailable *int32 `json:"minAvailable,omitempty"`
}

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

// UnschedulableAction is what a rollout does when its new pods cannot be
// scheduled.
//
// +kubebuilder:validation:Enum=Wait;ReplaceInPlace
type UnschedulableAction string

// The actions of rolloutStrategy.whenUnschedulable.
const (
	// UnschedulableWait waits for capacity until the progress deadline.
	UnschedulableWait UnschedulableAction = "Wait"
	// UnschedulableReplaceInPlace replaces pods in place (maxSurge 0).
	UnschedulableReplaceInPlace UnschedulableAction = "ReplaceInPlace"
)

// DefaultUnschedulableSeconds is rolloutStrategy.unschedulableSeconds
// when it is not set.
const DefaultUnschedulableSeconds = 30

// MaxUnschedulableSeconds bounds rolloutStrategy.unschedulableSeconds.
const MaxUnschedulableSeconds = 3600

// Phase is the coarse lifecycle state shown in the Phase printer column.
//
// +kubebuilder:validation:Enum=Pending;RollingOut;Ready;Failed;RolledBack;Suspended
type Phase string

// The phases of an OpenMedModel.
const (
	PhasePending    Phase = "Pending"
	PhaseRollingOut Phase = "RollingOut"
	PhaseReady      Phase = "Ready"
	PhaseFailed     Phase = "Failed"
	PhaseRolledBack Phase = "RolledBack"
	PhaseSuspended  Phase = "Suspended"
)

// NormalizedSpec is a spec with every default filled in: the input of the spec
// hash and the form in which successful specs are retained for rollback. Its
// fields are declared in alphabetical JSON order so encoding/json emits the
// canonical (sorted-key) form directly.
type NormalizedSpec struct {
	// Family is the model family.
	Family string `json:"family"`
	// ManifestConfigMapName is the base name of the manifest ConfigMaps.
	ManifestConfigMapName string `json:"manifestConfigMapName"`
	// Replicas is the managed replica count; absent when replicas are unmanaged.
	//
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`
	// RolloutStrategy is the normalized rollout strategy.
	RolloutStrategy NormalizedRolloutStrategy `json:"rolloutStrategy"`
	// TargetRef is the resolved target Deployment and container.
	TargetRef NormalizedTargetReference `json:"targetRef"`
	// Tier is the model tier.
	Tier Tier `json:"tier"`
	// Version is the model pointer.
	Version string `json:"version"`
}

// NormalizedRolloutStrategy is a RolloutStrategy with its defaults filled in,
// fields in alphabetical JSON order.
type NormalizedRolloutStrategy struct {
	// BakeSeconds is how long a new version serves before it is Ready; 0
	// (omitted, so specs without it hash as before) means no bake.
	BakeSeconds int32 `json:"bakeSeconds,omitempty"`
	// MaxSurge keeps its JSON type: an integer stays an integer.
	MaxSurge intstr.IntOrString `json:"maxSurge"`
	// MaxUnavailable keeps its JSON type: an integer stays an integer.
	MaxUnavailable intstr.IntOrString `json:"maxUnavailable"`
	// ProgressDeadlineSeconds is the Deployment's progress deadline.
	ProgressDeadlineSeconds int32 `json:"progressDeadlineSeconds"`
	// RollbackOnFailure enables automatic rollback.
	RollbackOnFailure bool `json:"rollbackOnFailure"`
	// Type is the Deployment strategy type.
	Type RolloutStrategyType `json:"type"`
	// WhenUnschedulable is ReplaceInPlace, or empty for Wait (omitted, so
	// specs without it hash as before).
	WhenUnschedulable UnschedulableAction `json:"whenUnschedulable,omitempty"`
	// UnschedulableSeconds is set with ReplaceInPlace (its default filled in).
	UnschedulableSeconds *int32 `json:"unschedulableSeconds,omitempty"`
	// MinAvailable is set with ReplaceInPlace when the spec sets it.
	MinAvailable *int32 `json:"minAvailable,omitempty"`
}

// NormalizedTargetReference is a TargetReference with its defaults resolved,
// fields in alphabetical JSON order.
type NormalizedTargetReference struct {
	// ContainerName is the target container.
	ContainerName string `json:"containerName"`
	// Name is the target Deployment.
	Name string `json:"name"`
}

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
	// the operator last changed its pod template (started a rollout); only a
	// Deployment status of this generation or later counts.
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

// OpenMedModel pins the model version an existing model-serving Deployment
// preloads and rolls it out, with automatic and manual rollback.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=omm,categories=all
// +kubebuilder:printcolumn:name="Family",type=string,JSONPath=`.spec.family`
// +kubebuilder:printcolumn:name="Tier",type=string,JSONPath=`.spec.tier`
// +kubebuilder:printcolumn:name="Desired",type=string,JSONPath=`.spec.version`
// +kubebuilder:printcolumn:name="Active",type=string,JSONPath=`.status.activeVersion`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type OpenMedModel struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired model and rollout settings.
	//
	// +required
	Spec OpenMedModelSpec `json:"spec"`

	// Status is the observed state. It defaults to observedGeneration -1 so
	// kstatus never calls a fresh object Current before the operator saw it.
	//
	// +optional
	// +kubebuilder:default={"observedGeneration":-1}
	Status OpenMedModelStatus `json:"status,omitempty"`
}

// GetConditions returns the status conditions; it makes OpenMedModel a Flux
// conditions.Getter.
func (in *OpenMedModel) GetConditions() []metav1.Condition {
	return in.Status.Conditions
}

// SetConditions replaces the status conditions; it makes OpenMedModel a Flux
// conditions.Setter.
func (in *OpenMedModel) SetConditions(conditions []metav1.Condition) {
	in.Status.Conditions = conditions
}

// OpenMedModelList is a list of OpenMedModels.
//
// +kubebuilder:object:root=true
type OpenMedModelList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the OpenMedModels.
	Items []OpenMedModel `json:"items"`
}

func init() {
	SchemeBuilder.Register(&OpenMedModel{}, &OpenMedModelList{})
}
