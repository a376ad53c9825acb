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

// Messages are fixed text, one per situation, so a message never carries
// user data and a change of situation that matters also changes the code
// (Argo CD refreshes an application on code changes only). health.lua spells
// the same strings; the fixture corpus proves it.
const (
	MessagePendingDeletion       = "Pending deletion"
	MessageNotObserved           = "Waiting for the operator to observe the latest generation"
	MessageSuspended             = "Reconciliation is suspended"
	MessageInvalidSpec           = "Spec is invalid"
	MessageRolledBack            = "Desired spec failed; a retained version is serving"
	MessageManualRollback        = "Held at a retained version by a manual rollback"
	MessageFailed                = "Desired spec failed; no retained version is serving"
	MessageDeploymentUnavailable = "Target Deployment lost availability"
	MessageWaitingForTarget      = "Waiting for the target Deployment"
	MessageRollingOut            = "Rolling out the desired version"
	MessageRollingBack           = "Restoring a retained version"
	MessageReconciling           = "Reconciliation in progress"
	MessageReady                 = "Desired version is serving"
	MessageUnrecognized          = "Status is not recognized by this health check"
)

// Result is the outcome of Assess.
type Result struct {
	// Code is the health status code.
	Code Code `json:"status"`
	// Message is one of the Message constants.
	Message string `json:"message"`
}

// Assess returns the health of an OpenMedModel. It never fails: fields that
// are missing or have an unexpected type count as absent, which at worst
// reads as "not yet observed".
//
// The order of the checks is the contract the Lua script and the CEL
// expressions mirror:
//
//  1. metadata.deletionTimestamp set: Progressing (checked first, as Argo CD
//     does for objects without a health script).
//  2. Not observed: no status, status.observedGeneration absent or different
//     from metadata.generation, or any condition whose observedGeneration is
//     set and differs from metadata.generation: Progressing.
//  3. spec.suspend true: Suspended.
//  4. Stalled=True: Degraded (invalid spec, held at a retained version, or
//     failed with nothing serving).
//  5. Degraded=True with reason DeploymentUnavailable: Degraded.
//  6. Reconciling=True (or the reference operator's Progressing=True):
//     Progressing.
//  7. Ready=True: Healthy.
//  8. Otherwise the phase decides, for statuses without the kstatus pair:
//     Failed and RolledBack are Degraded, Pending, RollingOut, Ready and
//     Suspended are Progressing, anything else is Unknown.
func Assess(obj *unstructured.Unstructured) Result {
	content := obj.UnstructuredContent()
	if metadata, ok := content["metadata"].(map[string]any); ok && metadata["deletionTimestamp"] != nil {
		return Result{Progressing, MessagePendingDeletion}
	}

	s, ok := observe(content)
	if !ok {
		return Result{Progressing, MessageNotObserved}
	}
	if spec, ok := content["spec"].(map[string]any); ok && spec["suspend"] == true {
		return Result{Suspended, MessageSuspended}
	}

	switch {
	case s.isTrue(v1alpha1.StalledCondition):
		return Result{Degraded, s.failureMessage()}
	case s.isTrue(v1alpha1.DegradedCondition) &&
		s.conditions[v1alpha1.DegradedCondition]["reason"] == v1alpha1.DeploymentUnavailableReason:
		return Result{Degraded, MessageDeploymentUnavailable}
	case s.isTrue(v1alpha1.ReconcilingCondition) || s.isTrue(v1alpha1.ProgressingCondition):
		return Result{Progressing, s.progressMessage()}
	case s.isTrue(v1alpha1.ReadyCondition):
		return Result{Healthy, MessageReady}
	}

	switch s.phase {
	case v1alpha1.PhaseFailed, v1alpha1.PhaseRolledBack:
		return Result{Degraded, s.failureMessage()}
	case v1alpha1.PhasePending, v1alpha1.PhaseRollingOut, v1alpha1.PhaseReady, v1alpha1.PhaseSuspended:
		return Result{Progressing, s.progressMessage()}
	}
	return Result{Unknown, MessageUnrecognized}
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
