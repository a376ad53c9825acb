package webhook_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/webhook"
)

const (
	goodCondition  = `response.code == 200`
	badCondition   = `response.status == 200`
	otherCondition = `response.code`
)

// model is a valid OpenMedModel whose success condition is cond ("": no
// spec.verification).
func model(cond string) *v1alpha1.OpenMedModel {
	m := &v1alpha1.OpenMedModel{
		ObjectMeta: metav1.ObjectMeta{Name: "pii", Namespace: "team-a"},
		Spec: v1alpha1.OpenMedModelSpec{
			Family: "PII", Version: "OpenMed/pii-v1", Tier: v1alpha1.TierSmall,
			RolloutStrategy: v1alpha1.RolloutStrategy{Type: v1alpha1.RollingUpdateRolloutStrategyType},
		},
	}
	if cond != "" {
		m.Spec.Verification = &v1alpha1.Verification{
			Request:          v1alpha1.VerificationRequest{Port: intstr.FromString("http")},
			SuccessCondition: cond,
		}
	}
	return m
}

func defaulted(m *v1alpha1.OpenMedModel) *v1alpha1.OpenMedModel {
	m.Default()
	return m
}

// TestReview: the verdict on creates and updates, without a server.
func TestReview(t *testing.T) {
	deleting := func(m *v1alpha1.OpenMedModel) *v1alpha1.OpenMedModel {
		m.DeletionTimestamp = &metav1.Time{}
		m.Finalizers = nil
		return m
	}
	labelled := func(m *v1alpha1.OpenMedModel) *v1alpha1.OpenMedModel {
		m.Labels = map[string]string{"team": "a"}
		return m
	}
	for _, tc := range []struct {
		name     string
		old, obj *v1alpha1.OpenMedModel
		refused  bool
	}{
		{name: "create without verification", obj: model("")},
		{name: "create with a condition that compiles", obj: defaulted(model(goodCondition))},
		{name: "create with a condition that does not compile", obj: model(badCondition), refused: true},
		{name: "create with a condition that is not a bool", obj: model(otherCondition), refused: true},
		// Defaults are the API server's: an object without them (an
		// older CRD) is judged on them, not refused for their absence.
		{name: "create without the request's defaults", obj: model(goodCondition)},
		{name: "update to a condition that does not compile", old: model(goodCondition), obj: model(badCondition), refused: true},
		{name: "update of a stored bad condition to another", old: model(badCondition), obj: model(otherCondition), refused: true},
		{name: "update of a stored bad condition's labels", old: model(badCondition), obj: labelled(model(badCondition))},
		{name: "update fixing a stored bad condition", old: model(badCondition), obj: model(goodCondition)},
		{name: "update of an object being deleted", old: model(goodCondition), obj: deleting(model(badCondition))},
		{name: "update adding verification that does not compile", old: model(""), obj: model(badCondition), refused: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := webhook.Review(tc.old, tc.obj)
			if refused := len(errs) > 0; refused != tc.refused {
				t.Fatalf("refused=%v (%v), want %v", refused, errs, tc.refused)
			}
			for _, e := range errs {
				if e.Field != "spec.verification.successCondition" {
					t.Errorf("refused on %s, want the success condition only: %v", e.Field, e)
				}
			}
		})
	}
}
