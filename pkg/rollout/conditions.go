package rollout

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// Fixed condition and event messages. They are part of the API (users and
// health checks read them) and never carry user data.
const (
	MsgNotAvailableYet        = "Desired model version is not available yet."
	MsgRolloutStarted         = "Kubernetes Deployment rollout was started."
	MsgHealthy                = "No rollout failure is active."
	MsgNoRollback             = "No rollback is active."
	MsgDeploymentProgressing  = "Kubernetes is progressing the rollout."
	MsgAvailable              = "Desired model version is available."
	MsgRolloutComplete        = "Deployment rollout completed."
	MsgTargetNotFound         = "Target Deployment was not found."
	MsgWaitingForTarget       = "Rollout is waiting for its target."
	MsgContainerNotFound      = "Target container was not found."
	MsgCannotUpdateTarget     = "Rollout cannot update the target."
	MsgTargetConflict         = "Target is owned by another model resource."
	MsgCannotClaimTarget      = "Rollout cannot claim the target."
	MsgManifestConflict       = "Manifest ConfigMap name is taken by an object this resource does not own."
	MsgManifestMismatch       = "A manifest ConfigMap of this resource holds other content than the manifest the operator writes (replaced or created by someone else); the operator deletes it and writes it again, and the target is not pointed at it."
	MsgCannotTrustManifest    = "Rollout cannot use its manifest ConfigMap."
	MsgCannotWriteManifest    = "Rollout cannot create its manifest ConfigMap."
	MsgReconciliationBlocked  = "Reconciliation is blocked."
	MsgRollbackNotEvaluated   = "Rollback state is not evaluated while the spec is invalid."
	MsgAutoRolledBack         = "Desired model version failed and was rolled back."
	MsgRestoringLast          = "The last successful version is being restored."
	MsgDidNotBecomeAvailable  = "Desired model version did not become available."
	MsgRolloutStopped         = "Kubernetes stopped progressing the rollout."
	MsgVerificationStopped    = "The rollout stopped: a pod of the version failed the golden request."
	MsgRollbackDisabled       = "Automatic rollback is disabled or unavailable."
	MsgNoRetainedReady        = "No retained version is ready."
	MsgRollbackStopped        = "Kubernetes stopped progressing the rollback."
	MsgRetainedNotRestored    = "The retained version could not be restored."
	MsgRetainedAvailable      = "A retained version is available; desired spec remains unmet."
	MsgRollbackComplete       = "Rollback Deployment rollout completed."
	MsgHeldAtRetained         = "Desired spec is held at a retained version."
	MsgRetainedRestored       = "Retained successful version was restored."
	MsgDesiredNotActive       = "Desired model version is not active."
	MsgRestoringRetained      = "Retained successful version is being restored."
	MsgTargetNotRetained      = "Requested rollback target is not retained."
	MsgManualCannotStart      = "Manual rollback cannot start."
	MsgManualRejected         = "Manual rollback target was rejected."
	MsgManualInProgress       = "Manual rollback is in progress."
	MsgRestoringRequested     = "Requested successful version is being restored."
	MsgManualHeld             = "Held at a rollback target by the openmed.ai/rollback-to annotation; remove the annotation to roll out the desired spec again."
	MsgDeploymentUnavailable  = "Target Deployment is not available; the model did not change."
	MsgNoModelRollout         = "No model rollout is in progress."
	MsgWaitingForAvailability = "Waiting for the target Deployment to become available again."
	MsgSuspended              = "Reconciliation is suspended; the latest spec is not applied until it resumes."
	MsgFailedSpecHeld         = "The desired spec failed; change the spec or request a reset to try again."
	MsgDeploymentRolling      = "Target Deployment is rolling out a change the model did not make."
	MsgTargetPaused           = "Target Deployment is paused; the rollout continues when it is resumed."
	MsgRetryStarted           = "The failed desired spec is being tried again."
	MsgWaitingForController   = "Waiting for the Deployment controller to observe the target's latest generation."
	MsgReplacingInPlace       = "No room for a new pod beside the old ones (no node has what it needs free, or the namespace quota is used up); the Deployment replaces pods in place until the rollout completes."
	MsgUnschedulable          = "A pod of the version being rolled out cannot be scheduled: no node has what it requests free."
	MsgPodCreationRefused     = "The API server refuses to create a pod of the version being rolled out (a quota, a LimitRange or an admission webhook)."
	MsgSchedulingGated        = "A pod of the version being rolled out waits for admission: a scheduling gate holds it."
	MsgVerifying              = "A pod of the version being rolled out is ready but for the golden request the operator sends it (spec.verification)."
	MsgScaling                = "Target Deployment serves the desired version and is bringing up pods; the model did not change."
	MsgBaking                 = "The desired version rolled out and bakes before it is Ready."
	MsgBakingNodeNotReady     = "The desired version bakes; a pod of it is unready on a node that is not Ready (the cluster's failure, not the version's): the bake waits until the pod is Ready again or replaced."
	MsgBakingNoPods           = "The desired version rolled out; no pod of it is Ready where the operator sees it (replicas 0, or pods without the openmed.ai/bake label): the bake runs only while a pod of it serves."
	MsgBakeFailed             = "Desired model version failed its bake: a container restarted or was OOM-killed, or a pod stayed unready."
	MsgNotEvaluated           = "Not evaluated for this generation: a step of the pass failed first."

	// Messages of a failed step; the reason names the step. A transient
	// failure's message is fixed; a rejected request's says what the API
	// server found wrong when it said so (MsgApplyRejectedBy and Failure.Detail).
	MsgManifestFailed = "Creating the manifest ConfigMap failed; retrying."
	MsgApplyFailed    = "Applying the model pointer to the target Deployment failed; retrying."
	MsgApplyRejected  = "The API server rejected the model pointer for the target Deployment (forbidden, invalid or denied by an admission webhook); retrying until the cause is fixed."
	MsgReleaseFailed  = "Releasing the target Deployment failed; retrying."
	MsgPruneFailed    = "Deleting superseded manifest ConfigMaps failed; retrying."
	MsgInternalError  = "The operator failed unexpectedly during this pass; retrying."
	// MsgAccessDenied is a denied write's message without the API server's
	// answer; MsgAccessDeniedAs starts it with one (the write, the identity).
	MsgAccessDenied   = "The API server's authorization denied a write; retrying until the right is granted."
	MsgAccessDeniedAs = "The API server's authorization denied the %s as %s"
	// MsgServiceAccountMissing is a denied write's detail when the
	// ServiceAccount it would be made as does not exist (no request made).
	MsgServiceAccountMissing = "the ServiceAccount does not exist"
	// MsgImpersonationDenied is a denied write's detail when the API
	// server refused the impersonation itself, in the model's namespace
	// (%s): the operator may not impersonate there, whatever the
	// ServiceAccount may do. It names the binding that is missing.
	MsgImpersonationDenied = "the operator may not impersonate ServiceAccounts in namespace %s: bind ClusterRole " +
		ImpersonatorRole + " to its ServiceAccount there (RoleBinding " + ImpersonatorRole + ")"

	// The start of a rejected request's message when the API server said
	// what is wrong; its causes follow (see Failure.Detail).
	MsgApplyRejectedBy    = "The API server rejected the model pointer for the target Deployment"
	MsgManifestRejectedBy = "The API server rejected the manifest ConfigMap"
	MsgReleaseRejectedBy  = "The API server rejected the release of the target Deployment"
	MsgPruneRejectedBy    = "The API server rejected the deletion of a superseded manifest ConfigMap"

	// EventMsgManifestMismatch names (%s) the manifest ConfigMap whose
	// content is not the operator's manifest.
	EventMsgManifestMismatch  = "Manifest ConfigMap %s holds other content than the operator's manifest; it is deleted and written again."
	EventMsgTargetNotFound    = "Target Deployment was not found; reconciliation will retry."
	EventMsgContainerNotFound = "Target Deployment does not contain the configured container."
	EventMsgTargetConflict    = "Target Deployment is already managed by another OpenMedModel."
	EventMsgRolloutStarted    = "Model manifest pointer changed; warm-pool rollout started."
	EventMsgRolloutSucceeded  = "Desired model version is available and warm."
	EventMsgRolloutFailed     = "Kubernetes reported that the model rollout exceeded its deadline."
	// EventMsgRolloutFailedPrefix begins the event of a rollout that
	// exceeded its deadline while a pod of it could not be scheduled; the
	// pod and the scheduler's message follow.
	EventMsgRolloutFailedPrefix = "Kubernetes reported that the model rollout exceeded its deadline: "
	// MsgUnschedulableFailedPrefix begins Degraded's message for the same.
	MsgUnschedulableFailedPrefix = "The rollout exceeded its progress deadline: "
	// EventMsgVerificationFailedPrefix begins the event of a rollout
	// (or bake) that failed because a pod of it failed the golden
	// request; the pod and what its answer lacked follow.
	EventMsgVerificationFailedPrefix = "The model version failed its golden request: "
	// MsgVerificationFailedPrefix begins Degraded's message for the same.
	MsgVerificationFailedPrefix = "The version answered the golden request wrongly: "
	EventMsgBaking              = "The model version rolled out and bakes before it is Ready."
	EventMsgBakeFailed          = "The model version failed its bake (%s)."
	EventMsgAutoRollbackStarted = "Automatic rollback to the last successful version started."
	EventMsgManualRollback      = "Manual rollback to a retained successful version started."
	EventMsgRollbackSucceeded   = "Retained successful model version is available."
	EventMsgRollbackFailed      = "Kubernetes reported that the rollback exceeded its deadline."
	EventMsgRollbackRejected    = "Requested rollback target is not one of the retained successful versions."
	EventMsgModelRemoved        = "Model manifest pointer was removed from the target Deployment."
	EventMsgRemovalSkipped      = "Resources owned by another controller were left unchanged."
	EventMsgDriftCorrected      = "Restored Deployment fields the operator owns"
	EventMsgFieldReplaced       = "Replaced Deployment values that made the model pointer invalid"
	EventMsgOwnershipConflict   = "Another field manager keeps reverting a Deployment field the operator owns"
)

// cond is one condition value without its bookkeeping fields.
type cond struct {
	status  metav1.ConditionStatus
	reason  string
	message string
}

// tuple is the four conditions of one state (states.go).
type tuple struct {
	ready, progressing, degraded, rolledBack cond
}

// kstatus says which of Flux's Reconciling/Stalled pair a situation carries.
type kstatus int

const (
	settled kstatus = iota
	reconciling
	stalled
)

func t(reason, message string) cond { return cond{metav1.ConditionTrue, reason, message} }
func f(reason, message string) cond { return cond{metav1.ConditionFalse, reason, message} }

// setConditions writes the tuple and the Reconciling/Stalled pair into the
// status. Conditions of other types (other writers) are kept. The
// lastTransitionTime of a condition changes only when its status changes
// (Kubernetes convention); every written condition carries the
// generation. Reconciling and Stalled exist only while True (Flux).
func setConditions(st *v1alpha1.OpenMedModelStatus, tp tuple, ks kstatus, gen int64, now metav1.Time) {
	set := func(typ string, c cond) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type:               typ,
			Status:             c.status,
			Reason:             c.reason,
			Message:            c.message,
			ObservedGeneration: gen,
			LastTransitionTime: now,
		})
	}
	set(v1alpha1.ReadyCondition, tp.ready)
	set(v1alpha1.ProgressingCondition, tp.progressing)
	set(v1alpha1.DegradedCondition, tp.degraded)
	set(v1alpha1.RolledBackCondition, tp.rolledBack)
	// Reconciling and Stalled repeat Ready's reason and message: the most
	// specific text there is for why the resource is not Ready.
	switch ks {
	case reconciling:
		removeCondition(&st.Conditions, v1alpha1.StalledCondition)
		set(v1alpha1.ReconcilingCondition, t(tp.ready.reason, tp.ready.message))
	case stalled:
		removeCondition(&st.Conditions, v1alpha1.ReconcilingCondition)
		set(v1alpha1.StalledCondition, t(tp.ready.reason, tp.ready.message))
	default:
		removeCondition(&st.Conditions, v1alpha1.ReconcilingCondition)
		removeCondition(&st.Conditions, v1alpha1.StalledCondition)
	}
	if len(st.Conditions) == 0 {
		st.Conditions = nil
	}
}

// conditionIs reports whether the status has a condition of type typ with the
// given status and reason.
func conditionIs(st *v1alpha1.OpenMedModelStatus, typ string, status metav1.ConditionStatus, reason string) bool {
	c := meta.FindStatusCondition(st.Conditions, typ)
	return c != nil && c.Status == status && (reason == "" || c.Reason == reason)
}

// removeCondition removes the condition of type t from conds. Unlike
// meta.RemoveStatusCondition it allocates only when there is one to remove
// (a pass asks for the removal of Reconciling and Stalled on every settled
// model), and it leaves conds' array as it was: the new slice is a copy.
func removeCondition(conds *[]metav1.Condition, t string) {
	if meta.FindStatusCondition(*conds, t) != nil {
		meta.RemoveStatusCondition(conds, t)
	}
}
