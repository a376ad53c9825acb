package controllers

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// TestStatusMergePatchAgreesWithJSONPatch checks the status write's merge
// patch against json-patch's CreateMergePatch, the oracle it replaced: on
// each pair of statuses both patches are the same JSON, and applied to the
// first status they give the same document.
func TestStatusMergePatchAgreesWithJSONPatch(t *testing.T) {
	var model v1alpha1.OpenMedModel
	raw, err := os.ReadFile(filepath.Join("internal", "store", "testdata", "memory", "model.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &model); err != nil {
		t.Fatal(err)
	}
	ready := model.Status
	later := metav1.NewTime(time.Date(2026, 12, 5, 6, 0, 0, 0, time.UTC))
	edit := func(f func(s *v1alpha1.OpenMedModelStatus)) v1alpha1.OpenMedModelStatus {
		s := *ready.DeepCopy()
		f(&s)
		return s
	}
	upgrading := edit(func(s *v1alpha1.OpenMedModelStatus) {
		s.Phase, s.DesiredVersion, s.DesiredSpecHash = "Progressing", "OpenMed/v2", "sha256:v2"
		s.Conditions[0].Status, s.Conditions[0].Reason, s.Conditions[0].LastTransitionTime = metav1.ConditionFalse, "Progressing", later
		s.BakeStartedAt = &later
	})
	tests := []struct {
		name     string
		from, to v1alpha1.OpenMedModelStatus
	}{
		{"a new model gets its first status", v1alpha1.OpenMedModelStatus{}, ready},
		{"nothing changes", ready, ready},
		{"an upgrade starts: scalars, a condition, a time", ready, upgrading},
		{"the upgrade ends: a field goes, the history grows", upgrading, edit(func(s *v1alpha1.OpenMedModelStatus) {
			s.History = append(s.History, v1alpha1.HistoryEntry{Version: "OpenMed/v2", SpecHash: "sha256:v2", ReadyAt: later})
			s.ClaimedTargets = nil
		})},
		{"a field inside an object goes (merge patch of the nested object)", ready, edit(func(s *v1alpha1.OpenMedModelStatus) {
			s.LastSuccessfulSpec.RolloutStrategy.BakeSeconds = 0
			s.LastSuccessfulSpec.TargetRef.ContainerName = ""
			s.LastSuccessfulSpec.Replicas = ptr.To[int32](3)
		})},
		{"an object appears and another goes", edit(func(s *v1alpha1.OpenMedModelStatus) {
			s.PreviousSuccessfulSpec = s.LastSuccessfulSpec.DeepCopy()
		}), edit(func(s *v1alpha1.OpenMedModelStatus) {
			s.RollbackSpec = s.LastSuccessfulSpec.DeepCopy()
			s.RollbackRequest, s.RollbackCount = "manual:OpenMed/v1", 1
		})},
		{"everything goes", ready, v1alpha1.OpenMedModelStatus{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := statusMergePatch(tt.from, tt.to)
			if err != nil {
				t.Fatal(err)
			}
			a, _ := json.Marshal(tt.from)
			b, _ := json.Marshal(tt.to)
			want, err := jsonpatch.CreateMergePatch(a, b)
			if err != nil {
				t.Fatal(err)
			}
			if !sameJSON(t, got, want) {
				t.Errorf("patch\n got %s\nwant %s (json-patch)", got, want)
			}
			applied, err := jsonpatch.MergePatch(a, got)
			if err != nil {
				t.Fatal(err)
			}
			if wantApplied, _ := jsonpatch.MergePatch(a, want); !sameJSON(t, applied, wantApplied) {
				t.Errorf("the patch applied gives\n %s\nwant\n %s", applied, wantApplied)
			}
		})
	}
}

func sameJSON(t *testing.T, x, y []byte) bool {
	t.Helper()
	var a, b any
	if err := json.Unmarshal(x, &a); err != nil {
		t.Fatalf("%s: %v", x, err)
	}
	if err := json.Unmarshal(y, &b); err != nil {
		t.Fatalf("%s: %v", y, err)
	}
	return reflect.DeepEqual(a, b)
}
