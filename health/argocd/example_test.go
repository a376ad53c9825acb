package argocd_test

import (
	"fmt"

	"github.com/argoproj/argo-cd/gitops-engine/v3/pkg/health"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/openmed/openmed-operator/health/argocd"
)

// A Go tool that assesses resources with gitops-engine adds the OpenMedModel
// check as an override; other kinds keep gitops-engine's built-in checks.
func ExampleHealthOverride() {
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "openmed.ai/v1alpha1",
		"kind":       "OpenMedModel",
		"metadata":   map[string]any{"name": "clinical-ner", "namespace": "models", "generation": int64(1)},
		"status":     map[string]any{"observedGeneration": int64(-1)},
	}}
	hs, err := health.GetResourceHealth(obj, argocd.HealthOverride{})
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s: %s\n", hs.Status, hs.Message)
	// Output: Progressing: Waiting for the operator to observe the latest generation
}
