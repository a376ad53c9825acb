package flux

import (
	"context"
	"testing"

	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/openmed/openmed-operator/health/internal/corpus"
)

func benchObject(b *testing.B) *unstructured.Unstructured {
	b.Helper()
	c, err := corpus.Load("..")
	if err != nil {
		b.Fatal(err)
	}
	obj, err := c.Object(corpus.Case{Fixture: "ready.yaml"})
	if err != nil {
		b.Fatal(err)
	}
	return obj
}

// BenchmarkCEL evaluates the healthCheckExprs with Flux's evaluator.
func BenchmarkCEL(b *testing.B) {
	obj := benchObject(b)
	e, err := NewStatusEvaluator()
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		r, err := e.Evaluate(ctx, obj)
		if err != nil || r.Status != status.CurrentStatus {
			b.Fatal("unexpected result")
		}
	}
}

// BenchmarkKStatusCompute is what Flux runs without healthCheckExprs.
func BenchmarkKStatusCompute(b *testing.B) {
	obj := benchObject(b)
	b.ReportAllocs()
	for b.Loop() {
		if r, err := status.Compute(obj); err != nil || r.Status != status.CurrentStatus {
			b.Fatal("unexpected result")
		}
	}
}
