package rollout

import (
	"testing"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// BenchmarkDecideSteadyState is the pass the operator runs most: Ready,
// nothing to change.
func BenchmarkDecideSteadyState(b *testing.B) {
	c := newCluster(b)
	c.readyAt(v1)
	obj, obs := c.obj, c.observed()
	b.ReportAllocs()
	for b.Loop() {
		if p := Decide(obj, obs, Options{}); p.ApplyDeployment != nil {
			b.Fatal("steady state applied")
		}
	}
}

// BenchmarkDecideRollout is a version change: a new ConfigMap and a new
// pointer.
func BenchmarkDecideRollout(b *testing.B) {
	c := newCluster(b)
	c.readyAt(v1)
	c.setVersion(v2)
	obj, obs := c.obj, c.observed()
	b.ReportAllocs()
	for b.Loop() {
		if p := Decide(obj, obs, Options{}); p.Status.Phase != v1alpha1.PhaseRollingOut {
			b.Fatal("no rollout")
		}
	}
}
