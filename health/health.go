package health

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// Code is a health status code. The values are Argo CD's, so the Argo CD face
// converts them one to one.
type Code string

// The codes Assess returns. Argo CD's sixth code, Missing, describes an object
// that does not exist and is never the result of reading one.
const (
	// Healthy: the desired version is serving.
	Healthy Code = "Healthy"
	// Progressing: the operator is working towards the desired spec, or has
	// not yet observed it.
	Progressing Code = "Progressing"
	// Degraded: the desired spec failed or the served model lost
	// availability; a person has to act or wait for the cluster to recover.
	Degraded Code = "Degraded"
	// Suspended: spec.suspend is true and the operator changes nothing.
	Suspended Code = "Suspended"
	// Unknown: the status is observed but this health check does not
	// recognise it, for example a phase added by a newer operator without
	// the conditions that decide.
	Unknown Code = "Unknown"
)

// Messages. The operator writes what is happening, with coordinates only
// (versions, names, counts), into its Reconciling and Stalled conditions;
// the health check shows that message when the deciding condition carries
// one, as kstatus does, and otherwise one of these fixed texts (statuses
// written by the Python (Kopf) operator this one replaces, or by hand). health.lua spells the same
// strings; the fixture corpus proves it.
const (
	MessagePendingDeletion     = "Pending deletion"
	MessageNotObserved         = "Waiting for the operator to observe the latest generation"
	MessageNotReported         = "Waiting for the operator to report status"
	MessageSuspended           = "Reconciliation is suspended"
	MessageSuspendedNotApplied = "Reconciliation is suspended; the latest spec is not applied"
	MessageInvalidSpec         = "Spec is invalid"
	MessageRolledBack          = "Desired spec failed; a retained version is serving"
	MessageManualRollback      = "Held at a retained version by a manual rollback"
	MessageFailed              = "Desired spec failed; no retained version is serving"
	MessageTargetPaused        = "Waiting for the target Deployment to be resumed"
	MessageWaitingForTarget    = "Waiting for the target Deployment"
	MessageRollingOut          = "Rolling out the desired version"
	MessageRollingBack         = "Restoring a retained version"
	MessageReconciling         = "Reconciliation in progress"
	MessageReady               = "Desired version is serving"
	MessageUnrecognized        = "Status is not recognized by this health check"
)

// MessageServing is the Healthy message for status.activeVersion v.
func MessageServing(v string) string { return "Serving " + v }

// Result is the outcome of Assess.
type Result struct {
	// Code is the health status code.
	Code Code `json:"status"`
	// Message says what is happening.
	Message string `json:"message,omitempty"`
	// DeletionMessage is set, to Message, for an object being deleted:
	// gitops-engine 3.6 and later show it instead of their default "Pending
	// deletion; blocked by finalizers" text.
	DeletionMessage string `json:"deletionMessage,omitempty"`
}

// Assess returns the health of an OpenMedModel. It never fails: fields that
// are missing or have an unexpected type count as absent, which at worst
// reads as "not yet observed".
//
// The order of the checks is the contract the Lua script and the CEL
// expressions mirror:
//
//  1. metadata.deletionTimestamp set: Progressing, with a deletion message
//     naming the Deployment being released.
//  2. spec.suspend true and status.phase Suspended (the operator has seen
//     the suspension): Suspended, also when the spec changed since.
//  3. Not observed: no status, status.observedGeneration absent or different
//     from metadata.generation, or any condition whose observedGeneration is
//     set and differs from metadata.generation: Progressing.
//  4. Stalled=True: Degraded (invalid spec, held at a retained version,
//     failed with nothing serving, or a Deployment whose own progress
//     deadline passed).
//  5. Reconciling=True with reason TargetPaused: Suspended, as Argo CD
//     shows the paused Deployment itself.
//  6. Reconciling=True (or the Kopf operator's Progressing=True):
//     Progressing. A Deployment that lost pods or scales up while serving
//     the desired version is here: Argo CD and kstatus call the Deployment
//     itself Progressing, and the model is never judged worse than its
//     Deployment unless its own rollout failed.
//  7. Ready=True: Healthy.
//  8. Otherwise the phase decides, for statuses without the kstatus pair:
//     Failed and RolledBack are Degraded, Pending, RollingOut, Ready and
//     Suspended are Progressing, no phase and no condition is Progressing
//     (nothing reported yet), any other phase is Unknown.
//
// Rules 4 to 6 show the deciding condition's message when it has one,
// rule 7 the active version.
func Assess(obj *unstructured.Unstructured) Result {
	content := obj.UnstructuredContent()
	metadata, _ := content["metadata"].(map[string]any)
	spec, _ := content["spec"].(map[string]any)
	status, _ := content["status"].(map[string]any)
	if metadata["deletionTimestamp"] != nil {
		m := deletionMessage(spec, status)
		return Result{Progressing, m, m}
	}
	if spec["suspend"] == true && status["phase"] == string(v1alpha1.PhaseSuspended) {
		if og, ok := number(status["observedGeneration"]); ok {
			if g, ok := number(metadata["generation"]); ok && og == g {
				return Result{Code: Suspended, Message: MessageSuspended}
			}
		}
		return Result{Code: Suspended, Message: MessageSuspendedNotApplied}
	}

	s, ok := observe(content)
	if !ok {
		return Result{Code: Progressing, Message: MessageNotObserved}
	}

	switch {
	case s.isTrue(v1alpha1.StalledCondition):
		return Result{Code: Degraded, Message: s.message(v1alpha1.StalledCondition, s.failureMessage())}
	case s.isTrue(v1alpha1.ReconcilingCondition) && s.reason(v1alpha1.ReconcilingCondition) == v1alpha1.TargetPausedReason:
		return Result{Code: Suspended, Message: s.message(v1alpha1.ReconcilingCondition, MessageTargetPaused)}
	case s.isTrue(v1alpha1.ReconcilingCondition):
		return Result{Code: Progressing, Message: s.message(v1alpha1.ReconcilingCondition, s.progressMessage())}
	case s.isTrue(v1alpha1.ProgressingCondition):
		return Result{Code: Progressing, Message: s.progressMessage()}
	case s.isTrue(v1alpha1.ReadyCondition):
		if v, ok := status["activeVersion"].(string); ok && v != "" {
			return Result{Code: Healthy, Message: MessageServing(v)}
		}
		return Result{Code: Healthy, Message: MessageReady}
	}

	switch s.phase {
	case v1alpha1.PhaseFailed, v1alpha1.PhaseRolledBack:
		return Result{Code: Degraded, Message: s.failureMessage()}
	case v1alpha1.PhasePending, v1alpha1.PhaseRollingOut, v1alpha1.PhaseReady, v1alpha1.PhaseSuspended:
		return Result{Code: Progressing, Message: s.progressMessage()}
	case "":
		if len(s.conditions) == 0 {
			return Result{Code: Progressing, Message: MessageNotReported}
		}
	}
	return Result{Code: Unknown, Message: MessageUnrecognized}
}

// deletionMessage names the Deployment the operator releases behind its
// finalizer (the one the status last pointed at, else the spec's), and says
// when the release keeps failing.
func deletionMessage(spec, status map[string]any) string {
	target, _ := status["targetName"].(string)
	if target == "" {
		ref, _ := spec["targetRef"].(map[string]any)
		target, _ = ref["name"].(string)
	}
	if target == "" {
		return MessagePendingDeletion
	}
	conditions, _ := status["conditions"].([]any)
	for _, item := range conditions {
		if c, ok := item.(map[string]any); ok && c["status"] == "True" && c["reason"] == v1alpha1.ReleaseFailedReason &&
			(c["type"] == v1alpha1.ReconcilingCondition || c["type"] == v1alpha1.StalledCondition) {
			return MessagePendingDeletion + "; releasing Deployment " + target + " failed, retrying"
		}
	}
	return MessagePendingDeletion + "; releasing Deployment " + target
}

// observed is the part of an observed status the assessment reads.
type observed struct {
	phase v1alpha1.Phase
	// conditions holds the first condition of each type.
	conditions map[string]map[string]any
}

// observe returns the status when it describes the object's current
// generation. Conditions are checked one by one too: a condition stamped
// with an older generation means the status was assembled from two passes,
// so none of it can be trusted yet.
func observe(content map[string]any) (observed, bool) {
	metadata, _ := content["metadata"].(map[string]any)
	status, ok := content["status"].(map[string]any)
	if !ok {
		return observed{}, false
	}
	generation, ok := number(metadata["generation"])
	if !ok {
		return observed{}, false
	}
	if og, ok := number(status["observedGeneration"]); !ok || og != generation {
		return observed{}, false
	}

	s := observed{conditions: map[string]map[string]any{}}
	if phase, ok := status["phase"].(string); ok {
		s.phase = v1alpha1.Phase(phase)
	}
	conditions, _ := status["conditions"].([]any)
	for _, item := range conditions {
		c, ok := item.(map[string]any)
		if !ok {
			continue
		}
		if cog, present := c["observedGeneration"]; present && cog != nil {
			if n, ok := number(cog); !ok || n != generation {
				return observed{}, false
			}
		}
		t, ok := c["type"].(string)
		if !ok {
			continue
		}
		if _, seen := s.conditions[t]; !seen {
			s.conditions[t] = c
		}
	}
	return s, true
}

// isTrue reports whether the condition of type t has status True.
func (s observed) isTrue(t string) bool {
	c, ok := s.conditions[t]
	return ok && c["status"] == "True"
}

// message returns the message of the condition of type t when it is a
// non-empty string, else fallback.
func (s observed) message(t, fallback string) string {
	if m, ok := s.conditions[t]["message"].(string); ok && m != "" {
		return m
	}
	return fallback
}

// reason returns the reason of the condition of type t, or "".
func (s observed) reason(t string) string {
	r, _ := s.conditions[t]["reason"].(string)
	return r
}

// failureMessage says which failure holds the resource.
func (s observed) failureMessage() string {
	switch {
	case s.reason(v1alpha1.ReadyCondition) == v1alpha1.InvalidSpecReason ||
		s.reason(v1alpha1.StalledCondition) == v1alpha1.InvalidSpecReason:
		return MessageInvalidSpec
	case s.reason(v1alpha1.DegradedCondition) == v1alpha1.ManualRollbackReason:
		// Nothing failed: someone asked for a retained version.
		return MessageManualRollback
	case s.phase == v1alpha1.PhaseRolledBack ||
		s.reason(v1alpha1.StalledCondition) == v1alpha1.RolledBackReason:
		return MessageRolledBack
	default:
		return MessageFailed
	}
}

// progressMessage says what the operator is waiting for, by phase.
func (s observed) progressMessage() string {
	switch s.phase {
	case v1alpha1.PhasePending:
		return MessageWaitingForTarget
	case v1alpha1.PhaseRollingOut:
		return MessageRollingOut
	case v1alpha1.PhaseRolledBack:
		return MessageRollingBack
	default:
		return MessageReconciling
	}
}

// number converts a JSON number as decoded by apimachinery (int64) or by a
// plain YAML/JSON decoder (float64) for comparison; Lua, where the same
// script runs, has one number type too.
func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int64:
		return float64(n), true
	case int32:
		return float64(n), true
	case int:
		return float64(n), true
	case float64:
		return n, true
	default:
		return 0, false
	}
}
