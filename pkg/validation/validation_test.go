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
		{name: "verification", mutate: func(m *v1alpha1.OpenMedModel) { m.Spec.Verification = validVerification() }},
		{name: "verification undefaulted", mutate: func(m *v1alpha1.OpenMedModel) {
			m.Spec.Verification = validVerification()
			m.Spec.Verification.Request.Method = ""
		}, field: "spec.verification.request.method"},
		{name: "verification condition does not compile", mutate: func(m *v1alpha1.OpenMedModel) {
			m.Spec.Verification = validVerification()
			m.Spec.Verification.SuccessCondition = "response.code = 200"
		}, field: "spec.verification.successCondition"},
		{name: "verification port 0", mutate: func(m *v1alpha1.OpenMedModel) {
			m.Spec.Verification = validVerification()
			m.Spec.Verification.Request.Port = intstr.FromInt32(0)
		}, field: "spec.verification.request.port"},
		{name: "verification duplicate header", mutate: func(m *v1alpha1.OpenMedModel) {
			m.Spec.Verification = validVerification()
			h := m.Spec.Verification.Request.Headers
			m.Spec.Verification.Request.Headers = append(h, h[0])
		}, field: "spec.verification.request.headers[1].name"},
		{name: "verification header without a value", mutate: func(m *v1alpha1.OpenMedModel) {
			m.Spec.Verification = validVerification()
			m.Spec.Verification.Request.Headers[0].ValueFrom = nil
		}, field: "spec.verification.request.headers[0]"},
		{name: "verification header with an empty value", mutate: func(m *v1alpha1.OpenMedModel) {
			m.Spec.Verification = validVerification()
			m.Spec.Verification.Request.Headers[0] = v1alpha1.VerificationHeader{Name: "X-Empty", Value: ptr.To("")}
		}},
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

// validVerification is a defaulted golden request for the OpenMed service.
func validVerification() *v1alpha1.Verification {
	v := &v1alpha1.Verification{
		Request: v1alpha1.VerificationRequest{
			Port: intstr.FromString("http"),
			Path: "/pii/extract",
			Headers: []v1alpha1.VerificationHeader{{Name: "Authorization", ValueFrom: &v1alpha1.HeaderValueSource{
				SecretKeyRef: v1alpha1.SecretKeySelector{Name: "pii-token", Key: "token"},
			}}},
			Body: `{"text":"Patient John Smith was seen today.","model_name":"pii-small","confidence_threshold":0.5}`,
		},
		SuccessCondition: `response.code == 200 && response.json.entities.exists(e, e.label == "NAME" && e.text == "John Smith")`,
	}
	v.Default()
	return v
}

// TestSuccessConditionDetail checks that a condition that does not compile
// is refused with CEL's complaint and its place, so its author can fix it.
func TestSuccessConditionDetail(t *testing.T) {
	m := validModel()
	m.Spec.Verification = validVerification()
	m.Spec.Verification.SuccessCondition = `response.code == 200 && response.json.entities.exists(e, e.label == NAME)`
	errs := validation.ValidateOpenMedModel(m)
	if len(errs) != 1 {
		t.Fatalf("errors = %v, want one", errs)
	}
	want := validation.MsgSuccessCondition + "does not compile: 1:69: undeclared reference to 'NAME'"
	if errs[0].Field != "spec.verification.successCondition" || !strings.HasPrefix(errs[0].Detail, want) {
		t.Fatalf("error = %v, want a detail starting %q", errs[0], want)
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
	m.Spec.Verification = validVerification()
	m.Spec.Verification.Request.Headers = []v1alpha1.VerificationHeader{{Name: "X-Key", Value: ptr.To("sk-live-" + strings.Repeat("Z", 4096))}}
	m.Spec.Verification.Request.Port = intstr.FromString("Port_Secret")
	msg := validation.ValidateOpenMedModel(m).ToAggregate().Error()
	for _, v := range []string{"JohnDoe", "token", "TopSecret", "Jane", "sk-live", "Port_Secret"} {
		if strings.Contains(msg, v) {
			t.Errorf("message echoes %q: %s", v, msg)
		}
	}
	if !strings.Contains(msg, validation.MsgTier) || !strings.Contains(msg, "spec.family") {
		t.Errorf("message does not name the rule: %s", msg)
	}
}
