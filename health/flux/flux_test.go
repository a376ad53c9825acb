package flux

import (
	"context"
	"testing"

	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/openmed/openmed-operator/health/internal/corpus"
)

// evaluate returns the status Flux's poller reports for the expressions: an
// evaluation error is Unknown.
func evaluate(t testing.TB, e interface {
	Evaluate(context.Context, *unstructured.Unstructured) (*status.Result, error)
}, obj *unstructured.Unstructured) status.Status {
	t.Helper()
	r, err := e.Evaluate(context.Background(), obj)
	if err != nil {
		return status.UnknownStatus
	}
	return r.Status
}

// finality orders results by how final they are for kustomize-controller's
// wait: Current and Failed end it, the rest keep it waiting.
func final(s status.Status) bool {
	return s == status.CurrentStatus || s == status.FailedStatus
}

func TestCorpus(t *testing.T) {
	c, err := corpus.Load("..")
	if err != nil {
		t.Fatal(err)
	}
	evaluator, err := NewStatusEvaluator()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range c.Cases {
		t.Run(tc.Fixture, func(t *testing.T) {
			obj, err := c.Object(tc)
			if err != nil {
				t.Fatal(err)
			}
			kstatus, err := status.Compute(obj)
			if err != nil {
				t.Fatal(err)
			}
			if string(kstatus.Status) != tc.KStatus {
				t.Errorf("kstatus Compute() = %s (%s), want %s", kstatus.Status, kstatus.Message, tc.KStatus)
			}
			// Where the operator's Reconciling or Stalled message decides,
			// `flux get`, kstatus UIs and Argo CD show the same text.
			if copied := kstatusCondition(obj); copied != "" && copied == tc.ArgoCD.Message && kstatus.Message != copied {
				t.Errorf("kstatus message %q, Argo CD shows %q", kstatus.Message, copied)
			}

			got := evaluate(t, evaluator, obj)
			if string(got) != tc.ExpectedCEL() {
				t.Errorf("CEL = %s, want %s", got, tc.ExpectedCEL())
			}
			if tc.CEL == "" {
				return
			}
			// A declared difference must be explained and must never let
			// Flux stop waiting where kstatus would not.
			if tc.CELWhy == "" {
				t.Error("CEL differs from kstatus without celWhy")
			}
			if tc.CEL == tc.KStatus {
				t.Error("cel repeats kstatus; drop it")
			}
			if final(status.Status(tc.CEL)) {
				t.Errorf("CEL result %s is final where kstatus says %s", tc.CEL, tc.KStatus)
			}
		})
	}
}

func TestCustomHealthCheck(t *testing.T) {
	hc := CustomHealthCheck()
	if hc.APIVersion != APIVersion || hc.Kind != Kind || hc.Current != CurrentExpression ||
		hc.InProgress != InProgressExpression || hc.Failed != FailedExpression {
		t.Errorf("CustomHealthCheck() = %+v", hc)
	}
}

// kstatusCondition is the message of a True Reconciling or Stalled
// condition of obj, or "".
func kstatusCondition(obj *unstructured.Unstructured) string {
	conditions, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, item := range conditions {
		c, _ := item.(map[string]any)
		if (c["type"] == "Reconciling" || c["type"] == "Stalled") && c["status"] == "True" {
			m, _ := c["message"].(string)
			return m
		}
	}
	return ""
}

// TestMessagesShared counts the cases whose message kstatus and Argo CD share,
// so the identity check above cannot pass by checking nothing.
func TestMessagesShared(t *testing.T) {
	c, err := corpus.Load("..")
	if err != nil {
		t.Fatal(err)
	}
	shared := 0
	for _, tc := range c.Cases {
		obj, err := c.Object(tc)
		if err != nil {
			t.Fatal(err)
		}
		if m := kstatusCondition(obj); m != "" && m == tc.ArgoCD.Message {
			shared++
		}
	}
	if shared < 10 {
		t.Errorf("%d corpus cases show the operator's message in both Argo CD and kstatus, want at least 10", shared)
	}
}
