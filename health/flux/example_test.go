package flux_test

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/openmed/openmed-operator/health/flux"
)

// The evaluator is the one kustomize-controller builds from a
// Kustomization's spec.healthCheckExprs.
func ExampleNewStatusEvaluator() {
	e, err := flux.NewStatusEvaluator()
	if err != nil {
		panic(err)
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "openmed.ai/v1alpha1",
		"kind":       "OpenMedModel",
		"metadata":   map[string]any{"name": "clinical-ner", "generation": int64(2)},
		"status": map[string]any{
			"observedGeneration": int64(2),
			"conditions": []any{
				map[string]any{"type": "Stalled", "status": "True", "reason": "RolledBack", "observedGeneration": int64(2)},
				map[string]any{"type": "Ready", "status": "False", "reason": "RolledBack", "observedGeneration": int64(2)},
			},
		},
	}}
	r, err := e.Evaluate(context.Background(), obj)
	if err != nil {
		panic(err)
	}
	fmt.Println(r.Status)
	// Output: Failed
}
