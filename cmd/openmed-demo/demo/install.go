package demo

import (
	"context"
	"fmt"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/kustomize"
)

// Bundle is what InstallBundle did.
type Bundle struct {
	// Applied are the objects applied, as the API server stored them.
	Applied []*unstructured.Unstructured
	// Skipped are the objects left out: the operator's own Deployment, whose
	// work a local process does instead.
	Skipped []*unstructured.Unstructured
	// ServiceAccount is the operator's ServiceAccount.
	ServiceAccount types.NamespacedName
}

// InstallBundle renders the kustomize overlay in dir, server-side applies all
// of it except the operator Deployment, and waits until every CRD in it is
// established, so custom resources can be created right after.
//
// The Deployment is left out because the operator runs on this machine as a
// process of its own: on a kwok cluster its pods would only be simulated and
// reconcile nothing, and on a real cluster they would compete with the local
// process for the same objects.
func InstallBundle(ctx context.Context, c client.Client, dir string) (Bundle, error) {
	objs, err := kustomize.Build(dir)
	if err != nil {
		return Bundle{}, err
	}
	var b Bundle
	var apply []*unstructured.Unstructured
	for _, obj := range objs {
		switch obj.GroupVersionKind().GroupKind() {
		case deploymentKind:
			b.Skipped = append(b.Skipped, obj)
			continue
		case serviceAccountKind:
			b.ServiceAccount = types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}
		}
		apply = append(apply, obj)
	}
	if b.ServiceAccount.Name == "" {
		return Bundle{}, fmt.Errorf("bundle %s has no ServiceAccount", dir)
	}
	if b.Applied, err = kustomize.Apply(ctx, c, apply); err != nil {
		return b, err
	}
	for _, obj := range b.Applied {
		if obj.GroupVersionKind().GroupKind() == crdKind {
			if err := waitEstablished(ctx, c, obj.GetName()); err != nil {
				return b, err
			}
		}
	}
	return b, nil
}

// waitEstablished waits for the CRD's Established condition: before it, the
// API server answers 404 for the new resource.
func waitEstablished(ctx context.Context, c client.Client, name string) error {
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
			return false, err
		}
		for _, cond := range crd.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("CustomResourceDefinition %s not established: %w", name, err)
	}
	return nil
}
