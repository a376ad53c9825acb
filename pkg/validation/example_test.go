package validation_test

import (
	"fmt"

	"github.com/openmed/openmed-operator/pkg/validation"
)

// ExampleValidateJSON checks an object the way the API server would on
// `kubectl apply`: the messages name the field and the rule, never the value.
func ExampleValidateJSON() {
	doc := []byte(`{
	  "apiVersion": "openmed.ai/v1alpha1", "kind": "OpenMedModel",
	  "metadata": {"name": "pii"},
	  "spec": {"family": "PII", "version": "OpenMed/pii-v1", "tier": "Small",
	           "rolloutStrategy": {"type": "RollingUpdate", "maxSurge": 0}}}`)
	if _, errs := validation.ValidateJSON(doc); len(errs) > 0 {
		fmt.Println(errs.ToAggregate())
	}

	obj, errs := validation.ValidateJSON([]byte(`{"spec": {"family": "PII", "version": "OpenMed/pii-v1",
	  "tier": "Small", "rolloutStrategy": {"type": "Recreate"}}}`))
	fmt.Println(len(errs), obj.Spec.RolloutStrategy.ProgressDeadlineSeconds != nil, *obj.Spec.RevisionHistoryLimit)
	// Output:
	// spec: Invalid value: RollingUpdate cannot set both maxUnavailable and maxSurge to zero.
	// 0 true 10
}
