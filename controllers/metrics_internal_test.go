package controllers

import (
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
		set    *modelState // nil: the model is deleted
		name   string
		want   string // the openmed_model_info samples after the step
		series int    // openmed_rollouts_total series after the step
	}
	ready := &modelState{version: "OpenMed/pii-v1", phase: "Ready", ready: "True", reason: "Succeeded"}
	rolling := &modelState{version: "OpenMed/pii-v1", phase: "Progressing", ready: "False", reason: "RollingOut"}
	stalled := &modelState{version: "OpenMed/pii-v1", phase: "Degraded", ready: "False", reason: "ApplyRejected", stalled: true}
	const head = "# HELP openmed_model_info One series per OpenMedModel (always 1): its active version, phase, Ready status and reason, and whether it is Stalled.\n# TYPE openmed_model_info gauge\n"
	series := func(name string, s *modelState, stalled string) string {
		return `openmed_model_info{name="` + name + `",namespace="ns",phase="` + s.phase + `",ready="` + s.ready + `",reason="` + s.reason + `",stalled="` + stalled + `",version="` + s.version + `"} 1` + "\n"
	}
	steps := []step{
		{set: rolling, name: "a", want: series("a", rolling, "false"), series: 2},
		{set: ready, name: "a", want: series("a", ready, "false"), series: 2},
		{set: ready, name: "a", want: series("a", ready, "false"), series: 2},
		{set: stalled, name: "b", want: series("a", ready, "false") + series("b", stalled, "true"), series: 2},
		{name: "a", want: series("b", stalled, "true"), series: 2},
		{name: "b", want: "", series: 2},
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
		if n := testutil.CollectAndCount(m.rollouts); n != s.series {
			t.Errorf("step %d: %d %s series, want %d (succeeded and failed at 0)", i, n, MetricRollouts, s.series)
		}
	}
}
