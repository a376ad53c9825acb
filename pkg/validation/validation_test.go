package validation_test

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/validation"
)

func validModel() *v1alpha1.OpenMedModel {
	m := &v1alpha1.OpenMedModel{Spec: v1alpha1.OpenMedModelSpec{
		Family:  "PII",
		Version: "OpenMed/pii-v1",
		Tier:    v1alpha1.TierSmall,
		RolloutStrategy: v1alpha1.RolloutStrategy{
			Type: v1alpha1.RollingUpdateRolloutStrategyType,
		},
	}}
	m.Default()
	return m
}

// TestValidateSpecTyped covers the typed entry point library users call on
// objects built in Go, where absent and zero are the same thing.
func TestValidateSpecTyped(t *testing.T) {
	zero, zeroPct := intstr.FromInt32(0), intstr.FromString("0%")
	tests := []struct {
		name   string
		mutate func(*v1alpha1.OpenMedModel)
		field  string // "" means valid
	}{
		{name: "valid", mutate: func(*v1alpha1.OpenMedModel) {}},
		{name: "bad family", mutate: func(m *v1alpha1.OpenMedModel) { m.Spec.Family = "-x" }, field: "spec.family"},
		{name: "missing version", mutate: func(m *v1alpha1.OpenMedModel) { m.Spec.Version = "" }, field: "spec.version"},
		{name: "unknown tier", mutate: func(m *v1alpha1.OpenMedModel) { m.Spec.Tier = "Huge" }, field: "spec.tier"},
		{name: "replicas zero", mutate: func(m *v1alpha1.OpenMedModel) { m.Spec.Replicas = ptr.To[int32](0) }, field: "spec.replicas"},
		{name: "unmanaged replicas", mutate: func(m *v1alpha1.OpenMedModel) { m.Spec.Replicas = nil }},
		{name: "both zero", mutate: func(m *v1alpha1.OpenMedModel) {
			m.Spec.RolloutStrategy.MaxSurge, m.Spec.RolloutStrategy.MaxUnavailable = &zero, &zeroPct
		}, field: "spec"},
		{name: "both zero on Recreate", mutate: func(m *v1alpha1.OpenMedModel) {
			m.Spec.RolloutStrategy.Type = v1alpha1.RecreateRolloutStrategyType
			m.Spec.RolloutStrategy.MaxSurge, m.Spec.RolloutStrategy.MaxUnavailable = &zero, &zero
		}},
		{name: "negative surge", mutate: func(m *v1alpha1.OpenMedModel) {
			m.Spec.RolloutStrategy.MaxSurge = ptr.To(intstr.FromInt32(-1))
		}, field: "spec.rolloutStrategy.maxSurge"},
		{name: "bad container", mutate: func(m *v1alpha1.OpenMedModel) {
			m.Spec.TargetRef = &v1alpha1.TargetReference{ContainerName: "A"}
		}, field: "spec.targetRef.containerName"},
		{name: "history limit", mutate: func(m *v1alpha1.OpenMedModel) { m.Spec.RevisionHistoryLimit = ptr.To[int32](101) }, field: "spec.revisionHistoryLimit"},
		{name: "deadline", mutate: func(m *v1alpha1.OpenMedModel) {
			m.Spec.RolloutStrategy.ProgressDeadlineSeconds = ptr.To[int32](0)
		}, field: "spec.rolloutStrategy.progressDeadlineSeconds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := validModel()
			tt.mutate(m)
			errs := validation.ValidateOpenMedModel(m)
			if tt.field == "" {
				if len(errs) > 0 {
					t.Fatalf("unexpected errors: %v", errs)
				}
				return
			}
			if len(errs) != 1 || errs[0].Field != tt.field {
				t.Fatalf("errors = %v, want one on %s", errs, tt.field)
			}
		})
	}
}

// TestMessagesNeverEchoValues checks the typed path with values that would be
// easy to spot in a message.
func TestMessagesNeverEchoValues(t *testing.T) {
	m := validModel()
	m.Spec.Family = "patient-JohnDoe-1234 "
	m.Spec.Version = "secret token=abc"
	m.Spec.Tier = "TopSecretTier"
	m.Spec.ManifestConfigMapName = "Jane_Roe"
	msg := validation.ValidateOpenMedModel(m).ToAggregate().Error()
	for _, v := range []string{"JohnDoe", "token", "TopSecret", "Jane"} {
		if strings.Contains(msg, v) {
			t.Errorf("message echoes %q: %s", v, msg)
		}
	}
	if !strings.Contains(msg, validation.MsgTier) || !strings.Contains(msg, "spec.family") {
		t.Errorf("message does not name the rule: %s", msg)
	}
}
