// Package rollout is the OpenMedModel decision core: one pure function of the
// resource and the observed cluster state that returns the new status and the
// changes to make. It has no client, no clock and no I/O, so every decision is
// testable without a cluster; the reconciler in controllers/ reads the cluster,
// calls Decide, applies the Plan and patches the status.
package rollout

import (
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// Observed is what the reconciler read from the cluster for one pass.
type Observed struct {
	// Deployment is the target Deployment as read (with managedFields), or nil
	// when it does not exist. Only the fields the operator owns or judges a
	// rollout by are read, so a cache may hold a pruned copy (see
	// controllers.CacheByObject).
	Deployment *appsv1.Deployment

	// PreviousTargets are the Deployments other than the desired target
	// that the status records as possibly written by the operator
	// (TargetNames: status.claimedTargets and status.targetName), as read;
	// one that does not exist is left out. The plan releases each one that
	// still carries anything of the operator's.
	PreviousTargets []*appsv1.Deployment

	// ConfigMaps are the manifest ConfigMaps that carry a controller
	// ownerReference to this resource, as metadata: the operator's store
	// keeps no data, whatever a ConfigMap holds. What one holds is known
	// from the status's record (VerifiedConfigMaps), from
	// WrittenConfigMaps, or from a read (ConfigMapContents).
	ConfigMaps []corev1.ConfigMap

	// ConfigMapContents are manifest ConfigMaps of this resource read
	// whole from the API server in this pass (Plan.ReadConfigMaps, or a
	// ConfigMap outside the operator's store): what they hold decides
	// whether the target may point at them.
	ConfigMapContents []corev1.ConfigMap

	// WrittenConfigMaps are the manifest ConfigMaps the reconciler's
	// process created for this resource that the status does not record
	// yet: each named with the UID the create answered with and the
	// manifest hash of what it wrote (ManifestConfigMapHash).
	WrittenConfigMaps []v1alpha1.VerifiedConfigMap

	// Pods are the pods of the target that carry the bake label
	// (BakeLabel) and this resource's owner annotation, read while the
	// desired spec bakes (spec.rolloutStrategy.bakeSeconds). They may hold
	// only what the bake reads: the owner and manifest-hash annotations,
	// the creation and deletion times, the Ready condition and the
	// containers' terminations (the operator's pod store keeps no more).
	Pods []corev1.Pod

	// PodsRead says Pods were read from the API server in this pass (a
	// consistent list), not taken from a store that may trail it (a watch
	// the API server or the network broke delivers a restart late). A bake
	// ends only on pods read so (Plan.ReadPods).
	PodsRead bool

	// PodsHidden says the pod store cannot see the target's pods: its pod
	// template does not carry the shard labels of this shard (the model
	// moved here from another shard, or its pods predate the operator
	// carrying them; see Options.ShardLabels). A bake then judges pods
	// read from the API server in every pass (Plan.ReadPods), and looks
	// again every HiddenPodsRecheck: no pod event wakes it.
	PodsHidden bool

	// PendingPods are the pods of the target that carry this resource's
	// owner annotation and have no node yet (spec.nodeName empty, phase
	// Pending), as the operator's pending-pod store keeps them: the owner
	// and manifest-hash annotations, the creation time and the PodScheduled
	// condition. A rollout whose new pod the scheduler reports
	// Unschedulable says so, with the scheduler's message.
	PendingPods []corev1.Pod

	// ReplicaSets are the UIDs of the target Deployment's ReplicaSets (of
	// its namespace, their controller reference naming the Deployment's
	// UID) among the controllers of Pods and PendingPods, as the reconciler
	// verified them. A pod counts for the model only when it is in the
	// model's namespace and its controller reference names one of these
	// (OwnedByTarget): labels, annotations, names and manifest hashes can be
	// copied by anyone who may create a pod in any namespace, a chain of
	// UIDs cannot.
	ReplicaSets []types.UID

	// NotReadyNodes are the nodes, among those of the baking version's
	// unready pods, whose Ready condition is not True (a lost node, an
	// unreachable one): the bake waits them out instead of failing.
	NotReadyNodes []string

	// Now is the time of the pass; the core never reads a clock.
	Now metav1.Time

	// Failure, when set, says a step of this pass failed after Decide
	// planned it. Decide then plans no change and returns the status that
	// reports the failure: the reconciler calls it a second time with the
	// failure as an input instead of editing the planned status.
	Failure *Failure
}

// ConfigMapUID is the UID of the manifest ConfigMap name of the model
// owner (its UID) as the pass observed it (a copy read in the pass first),
// "" when it observed none of the model's: the precondition of a write to
// it, so a ConfigMap created under the name since, or one the model does
// not own, is never touched.
func (o *Observed) ConfigMapUID(name string, owner types.UID) types.UID {
	for _, list := range [][]corev1.ConfigMap{o.ConfigMapContents, o.ConfigMaps} {
		for i := range list {
			if list[i].Name != name {
				continue
			}
			if ref := metav1.GetControllerOfNoCopy(&list[i]); ref != nil && ref.UID == owner && owner != "" {
				return list[i].UID
			}
			return ""
		}
	}
	return ""
}

// Step names a step of a pass that can fail.
type Step string

// The steps, in the order a pass makes them.
const (
	StepManifest Step = "Manifest"
	StepApply    Step = "Apply"
	StepRelease  Step = "Release"
	StepPrune    Step = "Prune"
	// StepInternal is a failure of the operator itself (a recovered panic).
	StepInternal Step = "Internal"
)

// FailureKind classifies a failed step.
type FailureKind string

// The kinds of failure.
const (
	// Transient failures (timeouts, 429, 5xx, a reset connection) clear by
	// themselves; the pass is retried with a short backoff.
	Transient FailureKind = "Transient"
	// Rejected requests (forbidden, invalid, denied by an admission
	// webhook) need a person to act; they are retried too, so the resource
	// recovers once the cause is fixed.
	Rejected FailureKind = "Rejected"
	// Denied requests were refused by the API server's authorization: the
	// identity the write was made as (the model's ServiceAccount, or the
	// operator) may not make it. They need a person too, and are retried,
	// so a granted right is picked up by itself.
	Denied FailureKind = "Denied"
	// NameTaken: a manifest ConfigMap name is used by an object this
	// resource does not own.
	NameTaken FailureKind = "NameTaken"
	// Mismatch: a manifest ConfigMap of this resource, found when its
	// create answered AlreadyExists, holds other content than the
	// manifest of its name (Failure.Detail is its name); the next pass
	// deletes it and writes it again.
	Mismatch FailureKind = "Mismatch"
)

// Failure is a failed step of a pass.
type Failure struct {
	// Step is the step that failed.
	Step Step
	// Kind classifies the failure.
	Kind FailureKind
	// Detail is, for a Rejected or Denied request, what the API server said
	// is wrong (for a Denied one, which user may not make which verb on which
	// resource),
	// as field paths and reasons (for example "spec.progressDeadlineSeconds:
	// Invalid value: 8: must be greater than minReadySeconds"), so the
	// status says what to fix. The reconciler builds it from the answer's
	// causes; the core bounds it to MaxFailureDetail bytes. It is empty for
	// transient failures, whose text says nothing a person can act on.
	Detail string
}

// MaxFailureDetail bounds Failure.Detail in the status and the event.
const MaxFailureDetail = 512

// Plan is the outcome of one pass: the status to write and the changes to
// make, in order: ConfigMaps first, then the Deployment, then releases and
// pruning.
type Plan struct {
	// Status is the complete new status. The reconciler writes it once, at
	// the end of the pass, in one request guarded by the resourceVersion it
	// read (after the write-ahead record of ClaimTargets, when there is
	// one).
	Status v1alpha1.OpenMedModelStatus

	// EnsureConfigMaps are immutable manifest ConfigMaps that must exist
	// before the Deployment points at them. Each is complete (name,
	// namespace, labels, annotations, owner reference, data, immutable).
	EnsureConfigMaps []*corev1.ConfigMap

	// LabelConfigMaps are manifest ConfigMaps that exist but whose shard
	// labels are not the model's (the model moved to another shard, or the
	// ConfigMap was created before its shard labels were carried): each
	// entry names one and the labels to set (a nil value removes one).
	// Labels are not data: an immutable ConfigMap takes them.
	LabelConfigMaps []ConfigMapLabels

	// ReleaseReplicas asks the reconciler to drop spec.replicas from the
	// operator's managedFields entry on the target before ApplyDeployment,
	// leaving the live value in place: the spec stopped managing replicas,
	// and an apply without the field would otherwise reset it to 1.
	ReleaseReplicas bool

	// Takeover, when set, is applied right before ApplyDeployment: the same
	// intent with the live value of a field another manager owns, so the
	// operator owns it and ApplyDeployment can remove it (a rollingUpdate
	// block under Recreate).
	Takeover *unstructured.Unstructured

	// ApplyDeployment, when set, is the partial Deployment to server-side
	// apply with the operator's field manager: exactly the fields the
	// operator owns, nothing else.
	ApplyDeployment *unstructured.Unstructured

	// LabelsOnly is true when every field ApplyDeployment changes on the
	// observed Deployment is one of the operator's bookkeeping labels of
	// its metadata (v1alpha1.ClaimedLabel, the shard labels): the
	// Deployment's generation does not move and no pod rolls, so what the
	// Deployment reports still describes its spec after the write.
	LabelsOnly bool

	// Claim is true when ApplyDeployment claims a target that carries no
	// owner annotation yet; the reconciler must make that write conditional
	// on the Deployment's resourceVersion so two resources cannot both win.
	Claim bool

	// Release, when set, gives the pointer on Observed.Deployment back at
	// deletion: see Release.
	Release *Release

	// ReleasePrevious give the pointer on Observed.PreviousTargets back,
	// one Release per Deployment: after spec.targetRef moved to another
	// Deployment, and at deletion. They are applied like Release, before
	// pruning.
	ReleasePrevious []*Release

	// ClaimTargets are the Deployments this plan writes to that the status
	// the pass read does not list in claimedTargets yet. The reconciler
	// records them (status.claimedTargets, guarded by the resourceVersion
	// it read) before any write of the plan, so a later pass knows every
	// Deployment the operator may have written even when this pass's
	// status write is lost; Status lists them too.
	ClaimTargets []string

	// PruneConfigMaps are names of owned manifest ConfigMaps no longer
	// needed (neither active nor retained).
	PruneConfigMaps []string

	// Drift lists the owned Deployment fields another field manager changed,
	// and the foreign values ApplyDeployment replaces; ApplyDeployment
	// corrects them in the same pass.
	Drift []Drift

	// Conflicts are the fields that became ownership conflicts in this pass
	// (see status.corrections), one per field and manager.
	Conflicts []v1alpha1.FieldCorrection

	// Events are recorded after the status is written; the core emits them
	// on transitions only, never on every pass.
	Events []Event

	// BakeFailure is the reason the desired spec failed its bake in this
	// pass (BakeContainerRestarted, BakeOOMKilled, BakePodUnready), or "".
	BakeFailure string

	// ReadConfigMaps are owned manifest ConfigMaps, by name, whose content
	// the pass must know before it points the target at them, or lets it
	// stay pointed at them: neither the status records their UID
	// (VerifiedConfigMaps) nor did this process write them. The reconciler
	// reads them from the API server (Observed.ConfigMapContents) and
	// decides again; until then the plan writes nothing.
	ReadConfigMaps []string

	// ReadPods is true when the bake of the desired spec ends in this pass
	// unless the pods show a failure, and Observed.Pods did not come from
	// the API server (PodsRead false): read the pods of the version from
	// the API server and decide again with them. The plan itself keeps the
	// version baking; a pass that does not read never makes it Ready.
	// With Observed.PodsHidden every pass of a bake reads them.
	ReadPods bool

	// WatchesPods is true when the pass judged a bake on the pods
	// (Observed.Pods) that goes on: their next change may change the
	// verdict (a restart, the pod that turns Ready, a node back), so their
	// watch events should wake the resource. False when nothing the pass
	// decided reads them next (a rollout before its Deployment completed,
	// a bake that ended Ready or failed, a Ready version): their events
	// need not wake it, the Deployment's do.
	WatchesPods bool
	// Verify are the pods to send the model's golden request to now
	// (spec.verification), each then given its verdict as the pod's
	// v1alpha1.VerifiedCondition; the verdict's watch event wakes the
	// resource.
	Verify []PodVerification

	// RemoveFinalizer is true when deletion has finished its work.
	RemoveFinalizer bool

	// Requeue asks for another pass as soon as this one's status is
	// written: the pass recorded a decision (a rollback) that the next pass
	// acts on, so the decision is durable before the act.
	Requeue bool

	// RequeueAfter asks for another pass after a delay while a rollout or
	// rollback is in flight; zero means wait for the next watch event.
	RequeueAfter time.Duration

	// Backstop reports that RequeueAfter is only the backstop timer of a
	// rollout in flight (no judgment waits for it: a watch event is
	// expected first), not the timer of a deadline, a bake or a grace.
	Backstop bool

	// Timer is the earliest timer of a judgment (a deadline, a bake, a
	// grace), whether or not it is RequeueAfter; zero when none waits.
	// Until then, a pass on the same inputs decides what this one did.
	Timer time.Duration
}

// HasChanges reports whether the plan writes anything to the cluster
// besides the status.
func (p *Plan) HasChanges() bool {
	return len(p.EnsureConfigMaps) > 0 || len(p.LabelConfigMaps) > 0 || p.ReleaseReplicas || p.Takeover != nil || p.ApplyDeployment != nil ||
		p.Release != nil || len(p.ReleasePrevious) > 0 || len(p.PruneConfigMaps) > 0
}

// ConfigMapLabels are labels to set on the manifest ConfigMap Name (a nil
// value removes the label).
type ConfigMapLabels struct {
	Name   string
	Labels map[string]*string
}

// Release describes how to give a Deployment back without resetting
// anything: first apply Keep (the operator's current values of replicas,
// strategy and progress deadline, and nothing else) with the operator's
// field manager, conditional on ResourceVersion, then remove every
// managedFields entry of the operator's field manager, conditional on the
// version the apply answered with. The env entry and annotations disappear
// because the operator stops owning them; the fields in Keep stay because
// another manager (or the cluster default) keeps them at their current
// values.
//
// A release is re-entrant: the core plans one whenever the Deployment still
// shows the operator's pointer or any entry of its field manager, so a
// release interrupted after its first request is finished by a later pass,
// and a conflict on either request means the pass decides again on the
// newer version.
type Release struct {
	// DeploymentName is the Deployment to release.
	DeploymentName string
	// ResourceVersion is the version Keep was read from: the apply is
	// conditional on it, so stale values never overwrite newer ones (an
	// HPA's replicas, a chart's strategy).
	ResourceVersion string
	// Keep is the partial Deployment to apply before dropping ownership.
	Keep *unstructured.Unstructured
}

// Drift is one owned field of the target that no longer has the operator's
// value, or a foreign value the operator's apply replaces.
type Drift struct {
	// Field is the field path, e.g. "spec.replicas" or
	// `spec.template.spec.containers[name="openmed-service"].env[name="OPENMED_SERVICE_PRELOAD_MODELS"]`.
	Field string
	// Managers are the field managers (from managedFields) that set the
	// field's value now; empty when no manager is on record.
	Managers []string
	// Removed is true when the field is gone from the live object.
	Removed bool
	// Replaced is true for a foreign value the operator replaces because it
	// would make the apply invalid.
	Replaced bool
}

// Event is a Kubernetes event to record on the OpenMedModel.
type Event struct {
	// Type is corev1.EventTypeNormal or corev1.EventTypeWarning.
	Type string
	// Reason is one of the v1alpha1 reason constants.
	Reason string
	// Message is fixed lifecycle text with coordinates (versions, field
	// paths, field manager names) only; it never holds user data.
	Message string
}
