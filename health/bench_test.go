package health

import (
	"testing"

	"github.com/openmed/openmed-operator/health/internal/corpus"
)

// benchFixture is the steady state, the object Argo CD and Flux assess most.
const benchFixture = "ready.yaml"

func BenchmarkAssess(b *testing.B) {
	c, err := corpus.Load(".")
	if err != nil {
		b.Fatal(err)
	}
	obj, err := c.Object(corpus.Case{Fixture: benchFixture})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if Assess(obj).Code != Healthy {
			b.Fatal("unexpected result")
		}
	}
}
