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

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// Observed is what the reconciler read from the cluster for one pass.
type Observed struct {
	// Deployment is the target Deployment as read (with managedFields), or nil
	// when it does not exist.
	Deployment *appsv1.Deployment

	// PreviousTarget is the Deployment named by status.targetName when that
	// differs from the desired target (spec.targetRef moved, see
	// TargetNames), or nil when there is none or it does not exist. The
	// plan releases it.
	PreviousTarget *appsv1.Deployment

	// ConfigMaps are the manifest ConfigMaps in the resource's namespace that
	// carry the owner key annotation of this resource or a controller
	// ownerReference to it, plus any object occupying a name the plan needs.
	ConfigMaps []corev1.ConfigMap

	// Now is the time of the pass; the core never reads a clock.
	Now metav1.Time
}

// Plan is the outcome of one pass: the status to write and the changes to
// make, in order: ConfigMaps first, then the Deployment, then pruning.
type Plan struct {
	// Status is the complete new status. The reconciler writes it once, at
	// the end of the pass.
	Status v1alpha1.OpenMedModelStatus

	// EnsureConfigMaps are immutable manifest ConfigMaps that must exist
	// before the Deployment points at them. Each is complete (name,
	// namespace, labels, annotations, owner reference, data, immutable).
	EnsureConfigMaps []*corev1.ConfigMap

	// ApplyDeployment, when set, is the partial Deployment to server-side
	// apply with the operator's field manager: exactly the fields the
	// operator owns, nothing else.
	ApplyDeployment *unstructured.Unstructured

	// Claim is true when ApplyDeployment claims a target that carries no
	// owner annotation yet; the reconciler must make that write conditional
	// on the Deployment's resourceVersion so two resources cannot both win.
	Claim bool

	// Release, when set, gives the pointer on Observed.Deployment back at
	// deletion: see Release.
	Release *Release

	// ReleasePrevious, when set, gives the pointer on Observed.PreviousTarget
	// back: after spec.targetRef moved to another Deployment, and at
	// deletion. It is applied like Release, before pruning.
	ReleasePrevious *Release

	// PruneConfigMaps are names of owned manifest ConfigMaps no longer
	// needed (neither active nor retained).
	PruneConfigMaps []string

	// Drift lists the owned Deployment fields another field manager changed;
	// ApplyDeployment corrects them in the same pass.
	Drift []Drift

	// Events are recorded after the status is written; the core emits them
	// on transitions only, never on every pass.
	Events []Event

	// RemoveFinalizer is true when deletion has finished its work.
	RemoveFinalizer bool

	// RequeueAfter asks for another pass after a delay while a rollout is in
	// flight; zero means wait for the next watch event.
	RequeueAfter time.Duration

	// recordGeneration is true when ApplyDeployment changes the pod
	// template; see RecordApplied.
	recordGeneration bool
}

// Release describes how to give the target Deployment back at deletion
// without resetting anything: first apply Keep (the operator's current values
// of replicas, strategy and progress deadline, and nothing else) with the
// operator's field manager, then remove the operator's managedFields entry.
// The env entry and annotations disappear because the operator stops owning
// them; the fields in Keep stay because another manager (or the cluster
// default) keeps them at their current values.
type Release struct {
	// DeploymentName is the target Deployment.
	DeploymentName string
	// Keep is the partial Deployment to apply before dropping ownership.
	Keep *unstructured.Unstructured
}

// Drift is one owned field of the target that no longer has the operator's
// value.
type Drift struct {
	// Field is the field path, e.g. "spec.replicas" or
	// `spec.template.spec.containers[name="openmed-service"].env[name="OPENMED_SERVICE_PRELOAD_MODELS"]`.
	Field string
	// Managers are the field managers (from managedFields) that own the field
	// now or touched its parent; empty when no manager can be named.
	Managers []string
}

// Event is a Kubernetes event to record on the OpenMedModel.
type Event struct {
	// Type is corev1.EventTypeNormal or corev1.EventTypeWarning.
	Type string
	// Reason is one of the v1alpha1 reason constants.
	Reason string
	// Message is fixed lifecycle text; it never holds user data.
	Message string
}
