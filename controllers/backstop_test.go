package controllers_test

import (
	"fmt"
	"testing"

	"github.com/openmed/openmed-operator/controllers"
	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// TestBackstopPassesWriteNothing: a rollout whose Deployment does not
// report yet is re-evaluated by its backstop timer alone
// (openmed_passes_total{woken_by="backstop"}); those passes write nothing
// and no watch event wakes the model meanwhile. The Deployment's report
// wakes it by its watch event, and the model is Ready.
func TestBackstopPassesWriteNothing(t *testing.T) {
	ns, op := rollingOutV1(t, 2)

	passes := func(cause string) float64 {
		return op.metric(t, controllers.MetricPasses, map[string]string{"woken_by": cause})
	}
	backstopAtLeast := func(n float64) {
		t.Helper()
		eventually(t, fmt.Sprintf("%v backstop passes", n), func() (bool, string) {
			got := passes("backstop")
			return got >= n, fmt.Sprintf("%v backstop passes", got)
		})
	}
	backstopAtLeast(1)
	writes, _ := op.writes.snapshot()
	events := passes("event")
	backstopAtLeast(3)
	if w, _ := op.writes.snapshot(); w != writes {
		t.Errorf("backstop passes wrote %d requests", w-writes)
	}
	// The pass after the write (its own status update event) and every
	// backstop pass after it wrote nothing and read only the caches: the
	// backstop passes find the caches as the pass before them read them
	// and end there (read first: a pass counts itself as a backstop pass
	// before it counts itself unchanged).
	unchanged := op.metric(t, controllers.MetricBackstopUnchanged, nil)
	if backstops := passes("backstop"); unchanged < 2 || unchanged > backstops {
		t.Errorf("%v of %v backstop passes ended unchanged, want most of them", unchanged, backstops)
	}
	if n := passes("event"); n != events {
		t.Errorf("%v passes woken by an event while nothing changed", n-events)
	}
	if m := getModel(t, ns, "svc"); m.Status.Phase != v1alpha1.PhaseRollingOut {
		t.Fatalf("phase %s while the Deployment has not reported", m.Status.Phase)
	}

	updateDeploymentStatus(t, ns, "svc", rolloutComplete)
	waitFor(t, ns, "svc", v1alpha1.PhaseReady, v1alpha1.RolloutSucceededReason)
	if n := passes("event"); n <= events {
		t.Errorf("the Deployment's report woke no pass by its event (%v event passes)", n)
	}
	for _, cause := range []string{"retry", "unclaimed-target"} {
		if n := passes(cause); n != 0 {
			t.Errorf("%v passes woken by %s", n, cause)
		}
	}
}
