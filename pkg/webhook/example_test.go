package webhook_test

import (
	"fmt"

	"github.com/openmed/openmed-operator/pkg/webhook"
)

// The webhook's verdict on a create whose success condition is not a bool:
// the field and CEL's complaint, as the API server returns them.
func ExampleReview() {
	for _, e := range webhook.Review(nil, model(`response.code`)) {
		fmt.Println(e)
	}
	// A stored object keeps the complaint it has: a label change passes.
	labelled := model(`response.code`)
	labelled.Labels = map[string]string{"team": "a"}
	fmt.Println(len(webhook.Review(model(`response.code`), labelled)))
	// Output:
	// spec.verification.successCondition: Invalid value: must be a CEL expression over response of type bool: must evaluate to a bool, not int
	// 0
}
