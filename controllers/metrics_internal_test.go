package controllers

import (
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// openmed_model_info is written at scrape time from the state each pass
// set: one series per model, its labels the last state, gone with the
// model; a namespace's first model starts its counters at 0.
func TestModelInfoSeries(t *testing.T) {
	type step struct {
		set  *modelState // nil: the model is deleted
		name string
		want string // the openmed_model_info samples after the step
	}
	ready := &modelState{version: "OpenMed/pii-v1", phase: "Ready", ready: "True", reason: "Succeeded"}
	rolling := &modelState{version: "OpenMed/pii-v1", phase: "Progressing", ready: "False", reason: "RollingOut"}
	stalled := &modelState{version: "OpenMed/pii-v1", phase: "Degraded", ready: "False", reason: "ApplyRejected", stalled: true}
	const head = "# HELP openmed_model_info One series per OpenMedModel (always 1): its active version, phase, Ready status and reason, and whether it is Stalled.\n# TYPE openmed_model_info gauge\n"
	series := func(name string, s *modelState) string {
		return `openmed_model_info{name="` + name + `",namespace="ns",phase="` + s.phase + `",ready="` + s.ready + `",reason="` + s.reason +
			`",stalled="` + strconv.FormatBool(s.stalled) + `",version="` + s.version + `"} 1` + "\n"
	}
	steps := []step{
		{set: rolling, name: "a", want: series("a", rolling)},
		{set: ready, name: "a", want: series("a", ready)},
		{set: ready, name: "a", want: series("a", ready)},
		{set: stalled, name: "b", want: series("a", ready) + series("b", stalled)},
		{name: "a", want: series("b", stalled)},
		{name: "b", want: ""},
	}
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	for i, s := range steps {
		if s.set != nil {
			m.setModelInfo("ns", s.name, *s.set)
		} else {
			m.deleteModel("ns", s.name)
		}
		want := ""
		if s.want != "" {
			want = head + s.want
		}
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), MetricModelInfo); err != nil {
			t.Errorf("step %d: %v", i, err)
		}
		// succeeded and failed, at 0 from the namespace's first model on
		// and kept when its models go.
		if n := testutil.CollectAndCount(m.rollouts); n != 2 {
			t.Errorf("step %d: %d %s series, want 2", i, n, MetricRollouts)
		}
	}
}
