package rollout

import (
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// TestBackstopGrowsWithTheWait: a rollout in flight that no watch event
// wakes is re-evaluated by a backstop timer that starts at the
// RequeueInterval and grows with the time the model has been Reconciling,
// to BackstopGrowth times it; a new rollout of a settled model starts it
// again, and a judgment's own timer (a bake's end) is not a backstop.
func TestBackstopGrowsWithTheWait(t *testing.T) {
	c := newCluster(t)
	c.readyAt(v1)
	start := clock.Add(time.Hour)
	c.now = start
	c.setVersion(v2)
	for _, step := range []struct {
		waited, want time.Duration
	}{
		{0, DefaultRequeueInterval}, // the pass that applies v2
		{5 * time.Second, DefaultRequeueInterval},
		{15 * time.Second, 15 * time.Second},
		{40 * time.Second, 40 * time.Second},
		{90 * time.Second, 90 * time.Second},
		{10 * time.Minute, BackstopGrowth * DefaultRequeueInterval},
	} {
		c.now = start.Add(step.waited)
		p := c.pass()
		if p.Status.Phase != v1alpha1.PhaseRollingOut || p.RequeueAfter != step.want || !p.Backstop || p.Timer != 0 {
			t.Fatalf("waited %s: phase %s requeue after %s backstop %v, want %s backstop", step.waited, p.Status.Phase, p.RequeueAfter, p.Backstop, step.want)
		}
		if c := apimeta.FindStatusCondition(p.Status.Conditions, v1alpha1.ReconcilingCondition); c == nil || !c.LastTransitionTime.Time.Equal(start) {
			t.Fatalf("waited %s: Reconciling %+v, want it True since the apply", step.waited, c)
		}
	}
	c.markReady()
	if p := c.pass(); p.Status.Phase != v1alpha1.PhaseReady || p.RequeueAfter != 0 || p.Backstop {
		t.Fatalf("settled: phase %s requeue after %s backstop %v", p.Status.Phase, p.RequeueAfter, p.Backstop)
	}
	// The next rollout's timer starts at the first interval again.
	c.now = start.Add(time.Hour)
	c.setVersion(v1)
	if p := c.pass(); p.RequeueAfter != DefaultRequeueInterval || !p.Backstop {
		t.Fatalf("next rollout: requeue after %s backstop %v", p.RequeueAfter, p.Backstop)
	}
	// Set with the option, the first interval bounds it the same way.
	c.opts.RequeueInterval = 2 * time.Second
	c.now = start.Add(time.Hour + 10*time.Second)
	if p := c.pass(); p.RequeueAfter != 10*time.Second || !p.Backstop {
		t.Fatalf("RequeueInterval 2s after 10s: requeue after %s backstop %v", p.RequeueAfter, p.Backstop)
	}
	c.now = start.Add(2 * time.Hour)
	if p := c.pass(); p.RequeueAfter != BackstopGrowth*2*time.Second || !p.Backstop {
		t.Fatalf("RequeueInterval 2s after an hour: requeue after %s backstop %v", p.RequeueAfter, p.Backstop)
	}
}

// TestTimerIsTheEarliestJudgment: Plan.Timer is the earliest timer of a
// judgment whether or not the backstop comes before it, in any order of
// the calls; RequeueAfter is the earlier of the two.
func TestTimerIsTheEarliestJudgment(t *testing.T) {
	const backstop = 15 * time.Second
	for _, tc := range []struct {
		name      string
		judgments []time.Duration // -1: the backstop (inFlight)
		requeue   time.Duration
		isBack    bool
		timer     time.Duration
	}{
		{"the backstop alone", []time.Duration{-1}, backstop, true, 0},
		{"the backstop, then a later judgment", []time.Duration{-1, 40 * time.Second}, backstop, true, 40 * time.Second},
		{"a later judgment, then the backstop", []time.Duration{40 * time.Second, -1}, backstop, true, 40 * time.Second},
		{"an earlier judgment, then the backstop", []time.Duration{5 * time.Second, -1}, 5 * time.Second, false, 5 * time.Second},
		{"the backstop, then an earlier judgment", []time.Duration{-1, 5 * time.Second}, 5 * time.Second, false, 5 * time.Second},
		{"two judgments", []time.Duration{40 * time.Second, 20 * time.Second}, 20 * time.Second, false, 20 * time.Second},
		{"a judgment already due asks for nothing", []time.Duration{0}, 0, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &decider{old: &v1alpha1.OpenMedModelStatus{}, now: metav1.Now(), opts: Options{RequeueInterval: backstop}}
			for _, j := range tc.judgments {
				if j < 0 {
					d.inFlight()
				} else {
					d.requeueWithin(j)
				}
			}
			if p := d.plan; p.RequeueAfter != tc.requeue || p.Backstop != tc.isBack || p.Timer != tc.timer {
				t.Errorf("requeue after %s backstop %v timer %s, want %s %v %s", p.RequeueAfter, p.Backstop, p.Timer, tc.requeue, tc.isBack, tc.timer)
			}
		})
	}
}
