package argocd

import (
	"testing"

	"github.com/argoproj/argo-cd/gitops-engine/v3/pkg/health"

	"github.com/openmed/openmed-operator/health/internal/corpus"
)

// benchFixture is the steady state, the object Argo CD assesses most.
const benchFixture = "ready.yaml"

func benchObject(b *testing.B) map[string]any {
	b.Helper()
	obj, err := loadCorpus(b).Object(corpus.Case{Fixture: benchFixture})
	if err != nil {
		b.Fatal(err)
	}
	return obj.Object
}

// BenchmarkHealthCheck is the Go face.
func BenchmarkHealthCheck(b *testing.B) {
	obj, err := loadCorpus(b).Object(corpus.Case{Fixture: benchFixture})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if hs, _ := HealthCheck(obj); hs.Status != health.HealthStatusHealthy {
			b.Fatal("unexpected result")
		}
	}
}

// BenchmarkHealthLuaFreshState compiles and runs health.lua in a new state on
// every call, as Argo CD up to 3.5 does (closed libraries, as from argocd-cm).
func BenchmarkHealthLuaFreshState(b *testing.B) {
	obj, script, vm := benchObject(b), HealthScript(), luaVM{}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := vm.run(obj, script); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHealthLuaPrecompiled reuses the compiled script and still builds a
// new state per call, as Argo CD's script cache (3.6) does.
func BenchmarkHealthLuaPrecompiled(b *testing.B) {
	obj, vm := benchObject(b), luaVM{}
	proto, err := compile(HealthScript())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := vm.runProto(obj, proto); err != nil {
			b.Fatal(err)
		}
	}
}
