package kustomize_test

import (
	"fmt"
	"path/filepath"

	"github.com/openmed/openmed-operator/kustomize"
)

// Render the cluster-wide install without a kustomize binary.
func ExampleBuild() {
	objs, err := kustomize.Build(filepath.Join(kustomize.Dir(), kustomize.DefaultOverlay))
	if err != nil {
		panic(err)
	}
	for _, o := range objs {
		fmt.Println(o.GetKind(), o.GetNamespace(), o.GetName())
	}
	// Output:
	// Namespace  openmed-system
	// CustomResourceDefinition  openmedmodels.openmed.ai
	// ServiceAccount openmed-system openmed-operator
	// ClusterRole  openmed-operator
	// ClusterRoleBinding  openmed-operator
	// ClusterRole  openmed-impersonator
	// Role openmed-system openmed-operator-leader-election
	// RoleBinding openmed-system openmed-operator-leader-election
	// ClusterRole  openmed-metrics-reader
	// ClusterRole  openmed-profiler
	// Deployment openmed-system openmed-operator
	// NetworkPolicy openmed-system openmed-operator
	// ValidatingWebhookConfiguration  openmed-operator
	// Service openmed-system openmed-operator-webhook
	// Secret openmed-system openmed-operator-webhook-cert
	// Role openmed-system openmed-operator-webhook
	// RoleBinding openmed-system openmed-operator-webhook
	// ClusterRole  openmed-operator-webhook
	// ClusterRoleBinding  openmed-operator-webhook
}
