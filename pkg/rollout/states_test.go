package rollout

import (
	"testing"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// TestStatesDeclareOneSummaryPerReason: the summary of a state is found by
// the Ready reason the status carries, so a second state of a reason with
// another summary is refused when the package starts; the same summary is
// accepted (the three states of a bake share theirs).
func TestStatesDeclareOneSummaryPerReason(t *testing.T) {
	declareSummary(v1alpha1.BakingReason, (*decider).bakingSummary)
	defer func() {
		if recover() == nil {
			t.Fatal("a reason declared with two summaries was accepted")
		}
		if got := funcPointer(summaries[v1alpha1.BakingReason]); got != funcPointer((*decider).bakingSummary) {
			t.Fatal("the refused declaration replaced the summary")
		}
	}()
	declareSummary(v1alpha1.BakingReason, (*decider).scalingSummary)
}
