package rollout

import (
	"bytes"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
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
// (ssa-facts.md). The env entry and the pod template's annotations and
// labels (the bake label, the shard labels) are left out, so the apply
// removes them (the pods roll once). The Deployment's
// owner annotation stays in Keep: it is the record of the claim until the
// release's last request removes it together with the managedFields entry,
// so a release interrupted after its first request is still this
// resource's to finish; so do the labels the operator set
// (v1alpha1.ClaimedLabel, the shard labels).
func (d *decider) release(dep *appsv1.Deployment) *Release {
	owned := ownedByOperator(dep, d.opts.FieldManager)
	keep := map[string]any{
		"apiVersion": "apps/v1",
		"kind":       "Deployment",
		"metadata": map[string]any{"name": dep.Name, "namespace": dep.Namespace,
			"annotations": map[string]any{v1alpha1.ModelResourceAnnotation: d.owner}},
	}
	// The bookkeeping labels that select the Deployment into the
	// operator's caches stay until the last request, like the owner
	// annotation: a release interrupted after its first request is still
	// in the cache of the shard that finishes it.
	var labels map[string]any
	for _, k := range append([]string{v1alpha1.ClaimedLabel}, d.opts.ShardLabels...) {
		if v, ok := dep.Labels[k]; ok && touches(owned, labelPath(k)) {
			if labels == nil {
				labels = map[string]any{}
			}
			labels[k] = v
		}
	}
	if labels != nil {
		keep["metadata"].(map[string]any)["labels"] = labels
	}
	declared, inPlace := d.declaredStrategy(dep.Name)
	for _, f := range ownedFields(pointer{}) {
		if f.keep && f.present(pointer{}, dep) && touches(owned, f.path) {
			v := f.live(dep)
			if inPlace && f.name == "spec.strategy" {
				// The live strategy is the in-place one of an unfinished
				// rollout: the owner gets the declared one back.
				v = declared
			}
			setPath(keep, f.path, v)
		}
	}
	// The template's other readiness gates stay theirs: readinessGates is
	// an atomic list the operator set whole.
	if others := otherGates(dep); len(others) > 0 && hasGate(dep) && touches(owned, readinessGatesPath) {
		setPath(keep, readinessGatesPath, others)
	}
	return &Release{DeploymentName: dep.Name, ResourceVersion: dep.ResourceVersion, Keep: &unstructured.Unstructured{Object: keep}}
}

// carriesEntry reports whether dep has a managedFields entry of the
// operator's field manager, of any operation and subresource: as long as one
// is there, a release of dep is not finished.
func carriesEntry(dep *appsv1.Deployment, fieldManager string) bool {
	for _, e := range dep.ManagedFields {
		if e.Manager == fieldManager {
			return true
		}
	}
	return false
}

// releasesReplicas reports whether the operator owns spec.replicas on dep
// although the spec no longer sets them: the field must leave the
// operator's managedFields entry before the next apply, or the API server
// would reset it.
func releasesReplicas(dep *appsv1.Deployment, replicas *int32, fieldManager string) bool {
	return replicas == nil && ownedByOperator(dep, fieldManager).Has(fieldpath.MakePathOrDie("spec", "replicas"))
}
