package store

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// TestPrunedSetsAreRemembered: pruneManagedFields remembers what it made of
// a field set, per shard label keys. A Deployment pruned from the memo is
// the one pruned without it, each shard's keys keep their own labels, and
// the memo starts over past its bound.
func TestPrunedSetsAreRemembered(t *testing.T) {
	var d appsv1.Deployment
	decodeCaptured(t, "deployment.json", &d)
	// The operator's entry also owns a shard label.
	for i, e := range d.ManagedFields {
		if e.Manager == "openmed-operator" {
			var compact bytes.Buffer
			if err := json.Compact(&compact, e.FieldsV1.Raw); err != nil {
				t.Fatal(err)
			}
			raw := strings.Replace(compact.String(), `"f:labels":{`, `"f:labels":{"f:sharding.fluxcd.io/key":{},`, 1)
			d.ManagedFields[i].FieldsV1 = &metav1.FieldsV1{Raw: []byte(raw)}
		}
	}
	fresh := func(shard []string) []metav1.ManagedFieldsEntry {
		prunedSets = prunedSetMemo{}
		return pruneManagedFields(d.ManagedFields, shard)
	}
	for _, shard := range [][]string{nil, {"sharding.fluxcd.io/key"}} {
		want := fresh(shard)
		for round := range 2 {
			if got := pruneManagedFields(d.ManagedFields, shard); !equality.Semantic.DeepEqual(got, want) {
				t.Errorf("shard keys %q, round %d: from the memo\n%+v\nwant\n%+v", shard, round, got, want)
			}
		}
	}
	// Both shards' sets side by side: each keeps its own.
	withKey, without := fresh([]string{"sharding.fluxcd.io/key"}), pruneManagedFields(d.ManagedFields, nil)
	owns := func(entries []metav1.ManagedFieldsEntry) bool {
		for _, e := range entries {
			if e.Manager == "openmed-operator" {
				return strings.Contains(string(e.FieldsV1.Raw), "sharding.fluxcd.io/key")
			}
		}
		return false
	}
	if !owns(withKey) || owns(without) {
		t.Errorf("the shard label in the operator's entry: with its key kept %v (want true), without %v (want false)", owns(withKey), owns(without))
	}
	if got := pruneManagedFields(d.ManagedFields, []string{"sharding.fluxcd.io/key"}); !owns(got) {
		t.Error("after the other shard's prune, the shard's own lost its label")
	}
	// Past the bound it starts over.
	prunedSets = prunedSetMemo{}
	big := make([]byte, maxPrunedSetBytes)
	prunedSets.put(nil, []byte("x"), big[:maxPrunedSetBytes-10])
	prunedSets.put(nil, []byte("y"), big[:20])
	if _, ok := prunedSets.get(nil, []byte("x")); ok {
		t.Error("the memo kept more than its bound")
	}
	if _, ok := prunedSets.get(nil, []byte("y")); !ok {
		t.Error("the memo lost the set put after it started over")
	}
}
