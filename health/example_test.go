package health_test

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/openmed/openmed-operator/health"
)

func ExampleAssess() {
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "openmed.ai/v1alpha1",
		"kind":       "OpenMedModel",
		"metadata":   map[string]any{"name": "clinical-ner", "generation": int64(2)},
		"status": map[string]any{
			"observedGeneration": int64(2),
			"phase":              "RolledBack",
			"conditions": []any{
				map[string]any{"type": "Stalled", "status": "True", "reason": "RolledBack", "observedGeneration": int64(2)},
				map[string]any{"type": "Ready", "status": "False", "reason": "RolledBack", "observedGeneration": int64(2)},
			},
		},
	}}
	r := health.Assess(obj)
	fmt.Printf("%s: %s\n", r.Code, r.Message)
	// Output: Degraded: Desired spec failed; a retained version is serving
}
