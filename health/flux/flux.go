// Package flux is the Flux face of the OpenMedModel health model. Flux needs
// nothing to read an OpenMedModel: its status follows kstatus, which
// kustomize-controller applies to every object it waits for. This package
// publishes the same semantics as healthCheckExprs (CEL, kustomize-controller
// v1.5+, spec.healthCheckExprs), for users who want them explicit, and a
// helper to evaluate them with Flux's own evaluator.
//
// The expressions agree with kstatus on the fixture corpus wherever CEL can
// express the answer; where it cannot, they are more cautious, never more
// final: a terminating object is InProgress (CEL has no Terminating), and a
// condition counts only when it describes the current generation (kstatus
// does not check a condition's own observedGeneration).
package flux

import (
	"github.com/fluxcd/pkg/apis/kustomize"
	"github.com/fluxcd/pkg/runtime/cel"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// APIVersion and Kind select OpenMedModels in a CustomHealthCheck.
const (
	APIVersion = "openmed.ai/v1alpha1"
	Kind       = "OpenMedModel"
)

// The expressions. Flux evaluates them after its own observedGeneration
// check, in the order inProgress, failed, current; none true means
// InProgress. Each guards the optional list with status.?conditions and a
// condition's own observedGeneration with c.?observedGeneration, so an
// observed object never makes them fail to evaluate.
const (
	// InProgressExpression: being deleted, or Reconciling=True.
	InProgressExpression = "has(metadata.deletionTimestamp) || " +
		"status.?conditions.orValue([]).exists(c, c.type == '" + v1alpha1.ReconcilingCondition + "' && c.status == 'True')"
	// FailedExpression: Stalled=True for the current generation.
	FailedExpression = "status.?conditions.orValue([]).exists(c, c.type == '" + v1alpha1.StalledCondition + "' && c.status == 'True' && " +
		"c.?observedGeneration.orValue(metadata.generation) == metadata.generation)"
	// CurrentExpression: Ready=True for the current generation.
	CurrentExpression = "status.?conditions.orValue([]).exists(c, c.type == '" + v1alpha1.ReadyCondition + "' && c.status == 'True' && " +
		"c.?observedGeneration.orValue(metadata.generation) == metadata.generation)"
)

// HealthCheckExpressions returns the expressions.
func HealthCheckExpressions() kustomize.HealthCheckExpressions {
	return kustomize.HealthCheckExpressions{
		InProgress: InProgressExpression,
		Failed:     FailedExpression,
		Current:    CurrentExpression,
	}
}

// CustomHealthCheck returns the entry for a Kustomization's
// spec.healthCheckExprs.
func CustomHealthCheck() kustomize.CustomHealthCheck {
	return kustomize.CustomHealthCheck{
		APIVersion:             APIVersion,
		Kind:                   Kind,
		HealthCheckExpressions: HealthCheckExpressions(),
	}
}

// NewStatusEvaluator returns Flux's CEL evaluator for the expressions, the
// one kustomize-controller builds from spec.healthCheckExprs.
func NewStatusEvaluator() (*cel.StatusEvaluator, error) {
	exprs := HealthCheckExpressions()
	return cel.NewStatusEvaluator(&exprs)
}
