package health

import (
	"testing"

	"github.com/openmed/openmed-operator/health/internal/corpus"
)

// allMessages lists every fixed message Assess can return; the corpus must
// reach each of them, so every branch of Assess (and of health.lua) is
// exercised. The other messages are the operator's own (Reconciling,
// Stalled), "Serving <version>" and the deletion message.
var allMessages = []string{
	MessageNotObserved, MessageNotReported, MessageSuspended, MessageSuspendedNotApplied, MessageInvalidSpec,
	MessageRolledBack, MessageManualRollback, MessageFailed, MessageTargetPaused, MessageWaitingForTarget,
	MessageRollingOut, MessageRollingBack, MessageReconciling, MessageReady, MessageUnrecognized,
}

func TestAssess(t *testing.T) {
	c, err := corpus.Load(".")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Cases) < 20 {
		t.Fatalf("corpus has %d cases, want at least 20", len(c.Cases))
	}
	reached := map[string]bool{}
	for _, tc := range c.Cases {
		t.Run(tc.Fixture, func(t *testing.T) {
			obj, err := c.Object(tc)
			if err != nil {
				t.Fatal(err)
			}
			got := Assess(obj)
			want := Result{Code(tc.ArgoCD.Status), tc.ArgoCD.Message, tc.ArgoCD.DeletionMessage}
			if got != want {
				t.Errorf("Assess() = %+v, want %+v", got, want)
			}
			reached[got.Message] = true
		})
	}
	for _, m := range allMessages {
		if !reached[m] {
			t.Errorf("no fixture reaches message %q", m)
		}
	}
}

// TestAssessMalformed checks that values of an unexpected type read as absent
// instead of failing: a health check must always answer.
func TestAssessMalformed(t *testing.T) {
	want := map[string]Result{
		"status is a string":                       {Code: Progressing, Message: MessageNotObserved},
		"observedGeneration is a string":           {Code: Progressing, Message: MessageNotObserved},
		"no generation":                            {Code: Progressing, Message: MessageNotObserved},
		"condition observedGeneration is a string": {Code: Progressing, Message: MessageNotObserved},
		"conditions is a map":                      {Code: Progressing, Message: MessageReconciling},
		"condition without type and no phase":      {Code: Progressing, Message: MessageNotReported},
		"phase is a number":                        {Code: Progressing, Message: MessageNotReported},
		"spec is a list":                           {Code: Healthy, Message: MessageReady},
	}
	if len(want) != len(corpus.Malformed) {
		t.Fatalf("%d expectations for %d malformed cases", len(want), len(corpus.Malformed))
	}
	for name, w := range want {
		t.Run(name, func(t *testing.T) {
			obj, err := corpus.MalformedObject(name)
			if err != nil {
				t.Fatal(err)
			}
			if got := Assess(obj); got != w {
				t.Errorf("Assess() = %+v, want %+v", got, w)
			}
		})
	}
}
