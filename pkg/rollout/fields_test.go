package rollout

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// TestOwnedFieldsTablesAreShared checks the shared owned-field tables: a
// pointer gets the table buildOwnedFields makes for it, whichever pointer
// with the same container and shard labels asked first, and pointers that
// differ in either get their own.
func TestOwnedFieldsTablesAreShared(t *testing.T) {
	spec := func(container string) v1alpha1.NormalizedSpec {
		return v1alpha1.NormalizedSpec{TargetRef: v1alpha1.NormalizedTargetReference{Name: "svc", ContainerName: container}}
	}
	pointers := []pointer{
		{spec: spec("openmed-service")},
		{spec: spec("sidecar")},
		{spec: spec("openmed-service"), shard: map[string]string{"sharding.fluxcd.io/key": "shard1"}},
		{spec: spec("openmed-service"), shard: map[string]string{"sharding.fluxcd.io/key": "shard2"}},
		{spec: spec("openmed-service"), shard: map[string]string{"sharding.fluxcd.io/key": "shard1", "team": "a"}},
		{spec: spec("openmed-service"), unset: []string{"sharding.fluxcd.io/key"}},
		{spec: spec("openmed-service"), shard: map[string]string{"team": "a"}, unset: []string{"sharding.fluxcd.io/key"}},
	}
	for round := range 2 {
		for i, p := range pointers {
			got, want := names(ownedFields(p)), names(buildOwnedFields(p))
			if len(got) != len(want) {
				t.Fatalf("round %d, pointer %d: %d fields, want %d", round, i, len(got), len(want))
			}
			for j := range got {
				if got[j] != want[j] {
					t.Errorf("round %d, pointer %d: field %d is %s, want %s", round, i, j, got[j], want[j])
				}
			}
			// The label fields hold exactly the pointer's own values.
			for k, v := range p.shard {
				d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{k: v}}}
				for _, f := range ownedFields(p) {
					if f.name == "metadata.labels["+k+"]" && !f.holds(p, d) {
						t.Errorf("pointer %d: label %s=%s does not hold on a Deployment that has it", i, k, v)
					}
				}
			}
		}
	}
	// Shared, not equal copies: asking again, or for a pointer that differs
	// only in what the table does not depend on (the manifest, the owner,
	// the family), returns the very same table; pointers that differ in the
	// container or the labels get their own.
	same := func(a, b []ownedField) bool { return len(a) > 0 && len(b) > 0 && &a[0] == &b[0] }
	other := pointers[0]
	other.spec.Family, other.owner, other.cmName, other.manifestHash = "other", "other", "other-cm", "0123abcd"
	if !same(ownedFields(pointers[0]), ownedFields(other)) {
		t.Error("a pointer that differs only in its manifest and owner got a table of its own: the tables are not shared")
	}
	for i := range pointers {
		for j := range pointers {
			if got := same(ownedFields(pointers[i]), ownedFields(pointers[j])); got != (i == j) {
				t.Errorf("pointers %d and %d share a table: %v, want %v", i, j, got, i == j)
			}
		}
	}
}

func names(fields []ownedField) []string {
	out := make([]string, 0, len(fields))
	for _, f := range fields {
		out = append(out, f.name)
	}
	return out
}
