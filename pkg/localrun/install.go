package localrun

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/kustomize"
)

// Bundle is what InstallBundle did.
type Bundle struct {
	// Applied are the objects applied.
	Applied []*unstructured.Unstructured
	// Skipped are the objects left out: the operator's own Deployment, whose
	// work a local process does instead.
	Skipped []*unstructured.Unstructured
	// ServiceAccount is the operator's ServiceAccount.
	ServiceAccount types.NamespacedName
}

// InstallBundle renders the kustomize overlay in dir and server-side applies
// all of it except the operator Deployment (kustomize.Apply, which waits
// until the CRDs are established, so custom resources can be created right
// after).
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
	if _, err := kustomize.Apply(ctx, c, apply); err != nil {
		return b, err
	}
	b.Applied = apply
	return b, nil
}
