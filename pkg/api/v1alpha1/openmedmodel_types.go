package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

	// Verification is a golden request every new pod of a version must
	// answer correctly before it counts as ready, and, while a version
	// bakes, again at an interval: the pod template then carries the
	// readiness gate openmed.ai/verified, so a pod that has not answered
	// correctly stays out of its Services' endpoints and is not available
	// to the Deployment. A pod that fails every attempt fails the rollout
	// at once (docs/verification.md). It belongs to the model, not to a
	// version: a rollback's pods are verified the same way.
	//
	// +optional
	Verification *Verification `json:"verification,omitempty"`
}

// VerifiedCondition is the pod condition type of the operator's readiness
// gate: True once the pod answered the golden request correctly for the
// version it runs.
const VerifiedCondition = "openmed.ai/verified"

// Verification is a golden request and what its answer must satisfy.
type Verification struct {
	// Request is the HTTP request sent to each pod's IP.
	//
	// +required
	Request VerificationRequest `json:"request"`

	// SuccessCondition is a CEL expression over response that must be
	// true for the answer to pass: response.code (int), response.headers
	// (map of lower-case header names to their first value),
	// response.body (string) and response.json (the body parsed as JSON,
	// null when it is not JSON). For example
	// `response.code == 200 && response.json.entities.exists(e, e.label == "NAME")`.
	// Its cost is bounded as the API server bounds a validation rule's.
	//
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	SuccessCondition string `json:"successCondition"`

	// Attempts is how many times a pod is asked before it fails: an
	// answer that fails the condition, an error or a timeout each use one.
	// Default 3.
	//
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10
	Attempts *int32 `json:"attempts,omitempty"`

	// IntervalSeconds is how often, while a version bakes, every pod of
	// it is asked again; a wrong answer then fails the bake like a crash.
	// Default 30.
	//
	// +optional
	// +kubebuilder:default=30
	// +kubebuilder:validation:Minimum=5
	// +kubebuilder:validation:Maximum=3600
	IntervalSeconds *int32 `json:"intervalSeconds,omitempty"`
}

// VerificationRequest is the HTTP request of a Verification, sent to the
// pod's IP the way a kubelet's httpGet probe is.
type VerificationRequest struct {
	// Port is the port of the model container to send the request to, by
	// number or by the container port's name.
	//
	// +required
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 1 && self <= 65535 : self.size() <= 15 && self.matches('^[a-z0-9]([a-z0-9-]*[a-z0-9])?$') && self.matches('[a-z]') && !self.contains('--')",message="must be a port number from 1 to 65535 or a container port name (IANA_SVC_NAME)"
	Port intstr.IntOrString `json:"port"`

	// Path is the request's path. Default "/".
	//
	// +optional
	// +kubebuilder:default="/"
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^/`
	Path string `json:"path,omitempty"`

	// Method is the HTTP method. Default POST.
	//
	// +optional
	// +kubebuilder:default=POST
	// +kubebuilder:validation:Enum=GET;POST;PUT
	Method string `json:"method,omitempty"`

	// Headers are sent with the request; a Content-Type of
	// application/json is sent with a body unless one is set here.
	//
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	Headers []VerificationHeader `json:"headers,omitempty"`

	// Body is the request's body: a synthetic note, never a real
	// patient's (the first bytes of a failed answer are reported in
	// status and events).
	//
	// +optional
	// +kubebuilder:validation:MaxLength=8192
	Body string `json:"body,omitempty"`

	// TimeoutSeconds bounds one attempt, connection and answer. Default 5.
	//
	// +optional
	// +kubebuilder:default=5
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=60
	TimeoutSeconds *int32 `json:"timeoutSeconds,omitempty"`
}

// VerificationHeader is one header of the golden request: a value, or a
// key of a Secret in the model's namespace, read at request time as the
// model's ServiceAccount and never stored.
//
// +kubebuilder:validation:XValidation:rule="has(self.value) != has(self.valueFrom)",message="exactly one of value and valueFrom must be set."
type VerificationHeader struct {
	// Name is the header's name.
	//
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^[!#$%&'*+.^_|~0-9A-Za-z-]+$`
	Name string `json:"name"`

	// Value is the header's value.
	//
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Value *string `json:"value,omitempty"`

	// ValueFrom takes the value from a Secret key.
	//
	// +optional
	ValueFrom *HeaderValueSource `json:"valueFrom,omitempty"`
}

// HeaderValueSource is where a header's value comes from.
type HeaderValueSource struct {
	// SecretKeyRef is a key of a Secret in the model's namespace.
	//
	// +required
	SecretKeyRef SecretKeySelector `json:"secretKeyRef"`
}

// SecretKeySelector names a key of a Secret in the model's namespace.
type SecretKeySelector struct {
	// Name is the Secret's name.
	//
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?)*$`
	Name string `json:"name"`

	// Key is the key in the Secret's data.
	//
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	Key string `json:"key"`
}

// Verification defaults and bounds (the CRD's).
const (
	DefaultVerificationAttempts = int32(3)
	DefaultVerificationInterval = int32(30)
	DefaultVerificationTimeout  = int32(5)
	DefaultVerificationPath     = "/"
	DefaultVerificationMethod   = "POST"
	MaxVerificationAttempts     = 10
	MinVerificationInterval     = 5
	MaxVerificationInterval     = 3600
	MaxVerificationTimeout      = 60
	MaxVerificationBody         = 8192
	MaxVerificationCondition    = 4096
	MaxVerificationHeaders      = 16
	MaxVerificationHeaderValue  = 4096
	MaxVerificationPath         = 1024
)

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
	// node with what the pod requests free, typically a GPU, or the
	// namespace's ResourceQuota refuses to create it — for
	// unschedulableSeconds. Wait (the default) waits for capacity until the
	// progress deadline. ReplaceInPlace finishes the rollout without a
	// spare: the Deployment's strategy becomes maxSurge 0 and
	// maxUnavailable replicas − minAvailable until the rollout completes,
	// then the declared strategy is restored. RollingUpdate only. (The name
	// follows topologySpreadConstraints' whenUnsatisfiable.)
	//
	// +optional
	WhenUnschedulable UnschedulableAction `json:"whenUnschedulable,omitempty"`

	// UnschedulableSeconds is how long a new pod stays unschedulable (or
	// refused by the namespace's quota since the rollout's apply) before
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
