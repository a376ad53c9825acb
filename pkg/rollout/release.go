package rollout

import (
	"bytes"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// ownedByOperator is the union of the operator's Apply entries on dep.
func ownedByOperator(dep *appsv1.Deployment, fieldManager string) *fieldpath.Set {
	owned := &fieldpath.Set{}
	for _, e := range dep.ManagedFields {
		if e.Manager != fieldManager || e.Operation != metav1.ManagedFieldsOperationApply || e.FieldsV1 == nil {
			continue
		}
		set := &fieldpath.Set{}
		if err := set.FromJSON(bytes.NewReader(e.FieldsV1.Raw)); err == nil {
			owned = owned.Union(set)
		}
	}
	return owned
}

// release describes how to give dep back without resetting anything. Keep
// re-applies, at their live values, the owned fields marked keep (replicas,
// strategy, progress deadline) that the operator's apply entry owns: once
// the operator drops its managedFields entry they stay as they are, where an
// empty apply would let the API server reset them to defaults
// (ssa-facts.md). The env entry and the annotations are left out, so the
// apply removes them.
func (d *decider) release(dep *appsv1.Deployment) *Release {
	owned := ownedByOperator(dep, d.opts.FieldManager)
	keep := map[string]any{
		"apiVersion": "apps/v1",
		"kind":       "Deployment",
		"metadata":   map[string]any{"name": dep.Name, "namespace": dep.Namespace},
	}
	for _, f := range ownedFields(pointer{}) {
		if f.keep && f.present(pointer{}, dep) && touches(owned, f.path) {
			setPath(keep, f.path, f.live(dep))
		}
	}
	return &Release{DeploymentName: dep.Name, Keep: &unstructured.Unstructured{Object: keep}}
}

// releasesReplicas reports whether the operator owns spec.replicas on dep
// although the spec no longer sets them: the field must leave the
// operator's managedFields entry before the next apply, or the API server
// would reset it.
func releasesReplicas(dep *appsv1.Deployment, replicas *int32, fieldManager string) bool {
	return replicas == nil && ownedByOperator(dep, fieldManager).Has(fieldpath.MakePathOrDie("spec", "replicas"))
}
