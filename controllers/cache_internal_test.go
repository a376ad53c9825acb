package controllers

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/utils/ptr"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// TestPruneModelSharesHistorySpecs: the cache transform of a model points
// its last and previous successful specs (and a rollback's) at the history
// entry with the same spec instead of keeping copies, and what the cache
// hands out (a deep copy) is the model as the API server sent it.
func TestPruneModelSharesHistorySpecs(t *testing.T) {
	spec := func(version string) v1alpha1.NormalizedSpec {
		return v1alpha1.NormalizedSpec{Family: "OpenMed", Version: version, Replicas: ptr.To[int32](2),
			ManifestConfigMapName: "svc-manifest", TargetRef: v1alpha1.NormalizedTargetReference{Name: "svc", ContainerName: "openmed-service"}}
	}
	specOf := func(version string) *v1alpha1.NormalizedSpec { s := spec(version); return &s }
	for _, tc := range []struct {
		name                     string
		last, previous, rollback *v1alpha1.NormalizedSpec
		// shared are the history entries last, previous and rollback
		// point at after pruning, -1 for their own copy.
		shared [3]int
	}{
		{name: "last and previous in the history", last: specOf("v2"), previous: specOf("v1"), shared: [3]int{1, 0, -1}},
		{name: "rolling back to a retained version", last: specOf("v2"), previous: specOf("v1"), rollback: specOf("v1"), shared: [3]int{1, 0, 0}},
		{name: "a spec no entry has keeps its copy", last: specOf("v3"), previous: specOf("v2"), shared: [3]int{-1, 1, -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &v1alpha1.OpenMedModel{}
			m.Status.History = []v1alpha1.HistoryEntry{{Version: "v1", Spec: spec("v1")}, {Version: "v2", Spec: spec("v2")}}
			m.Status.LastSuccessfulSpec, m.Status.PreviousSuccessfulSpec, m.Status.RollbackSpec = tc.last, tc.previous, tc.rollback
			sent := m.DeepCopy()
			out, err := PruneModel(m)
			if err != nil {
				t.Fatal(err)
			}
			pruned := out.(*v1alpha1.OpenMedModel)
			if got := pruned.DeepCopy(); !equality.Semantic.DeepEqual(got.Status, sent.Status) {
				t.Errorf("the cache hands out\n%+v\nthe API server sent\n%+v", got.Status, sent.Status)
			}
			for i, p := range []*v1alpha1.NormalizedSpec{pruned.Status.LastSuccessfulSpec, pruned.Status.PreviousSuccessfulSpec, pruned.Status.RollbackSpec} {
				got := -1
				for j := range pruned.Status.History {
					if p == &pruned.Status.History[j].Spec {
						got = j
					}
				}
				if p != nil && got != tc.shared[i] {
					t.Errorf("spec %d points at history entry %d, want %d", i, got, tc.shared[i])
				}
			}
		})
	}
}
