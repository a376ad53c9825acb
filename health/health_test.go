package health

import (
	"testing"

	"github.com/openmed/openmed-operator/health/internal/corpus"
)

// allMessages lists every message Assess can return; the corpus must reach
// each of them, so every branch of Assess (and of health.lua) is exercised.
var allMessages = []string{
	MessagePendingDeletion, MessageNotObserved, MessageSuspended, MessageInvalidSpec,
	MessageRolledBack, MessageFailed, MessageDeploymentUnavailable, MessageWaitingForTarget,
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
			want := Result{Code(tc.ArgoCD.Status), tc.ArgoCD.Message}
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
		"status is a string":                       {Progressing, MessageNotObserved},
		"observedGeneration is a string":           {Progressing, MessageNotObserved},
		"no generation":                            {Progressing, MessageNotObserved},
		"condition observedGeneration is a string": {Progressing, MessageNotObserved},
		"conditions is a map":                      {Progressing, MessageReconciling},
		"condition without type and no phase":      {Unknown, MessageUnrecognized},
		"phase is a number":                        {Unknown, MessageUnrecognized},
		"spec is a list":                           {Healthy, MessageReady},
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
