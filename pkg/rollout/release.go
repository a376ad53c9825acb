package rollout

import (
	"bytes"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// release describes how to give dep back without resetting anything. Keep
// re-applies, at their live values, the fields among replicas, strategy and
// progress deadline that the operator's apply entry owns: once the operator
// drops its managedFields entry they stay as they are, where an empty apply
// would let the API server reset them to defaults (ssa-facts.md). The env
// entry and the annotations are left out, so the apply removes them.
func (d *decider) release(dep *appsv1.Deployment) *Release {
	owned := &fieldpath.Set{}
	for _, e := range dep.ManagedFields {
		if e.Manager != d.opts.FieldManager || e.Operation != metav1.ManagedFieldsOperationApply || e.FieldsV1 == nil {
			continue
		}
		set := &fieldpath.Set{}
		if err := set.FromJSON(bytes.NewReader(e.FieldsV1.Raw)); err == nil {
			owned = owned.Union(set)
		}
	}
	spec := map[string]any{}
	if dep.Spec.Replicas != nil && touches(owned, fieldpath.MakePathOrDie("spec", "replicas")) {
		spec["replicas"] = int64(*dep.Spec.Replicas)
	}
	if dep.Spec.ProgressDeadlineSeconds != nil && touches(owned, fieldpath.MakePathOrDie("spec", "progressDeadlineSeconds")) {
		spec["progressDeadlineSeconds"] = int64(*dep.Spec.ProgressDeadlineSeconds)
	}
	if dep.Spec.Strategy.Type != "" && touches(owned, fieldpath.MakePathOrDie("spec", "strategy")) {
		strategy := map[string]any{"type": string(dep.Spec.Strategy.Type)}
		if ru := dep.Spec.Strategy.RollingUpdate; ru != nil {
			rolling := map[string]any{}
			if ru.MaxUnavailable != nil {
				rolling["maxUnavailable"] = intOrStringValue(*ru.MaxUnavailable)
			}
			if ru.MaxSurge != nil {
				rolling["maxSurge"] = intOrStringValue(*ru.MaxSurge)
			}
			strategy["rollingUpdate"] = rolling
		}
		spec["strategy"] = strategy
	}
	keep := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1",
		"kind":       "Deployment",
		"metadata":   map[string]any{"name": dep.Name, "namespace": dep.Namespace},
	}}
	if len(spec) > 0 {
		keep.Object["spec"] = spec
	}
	return &Release{DeploymentName: dep.Name, Keep: keep}
}
