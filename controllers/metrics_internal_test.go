package controllers

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"

	"github.com/openmed/openmed-operator/pkg/version"
)

// TestBuildInfo: the metrics come with one openmed_build_info series, 1,
// labelled with the build's version, commit and Go toolchain.
func TestBuildInfo(t *testing.T) {
	reg := prometheus.NewRegistry()
	NewMetrics(reg)
	i := version.Get()
	want := "# HELP openmed_build_info The operator's build (always 1): its version, the commit it was built from and the Go toolchain that built it.\n" +
		"# TYPE openmed_build_info gauge\n" +
		fmt.Sprintf("openmed_build_info{commit=%q,goversion=%q,version=%q} 1\n", i.Commit, i.GoVersion, i.Version)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), MetricBuildInfo); err != nil {
		t.Error(err)
	}
}

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
		// Every result of a golden request, likewise: an alert's
		// increase() sees a namespace's first failed request.
		if n := testutil.CollectAndCount(m.verifications); n != len(verificationResults) {
			t.Errorf("step %d: %d %s series, want %d", i, n, MetricVerifications, len(verificationResults))
		}
	}
}

// constModelInfo writes openmed_model_info as MustNewConstMetric does, a
// metric with its own label pairs per series: what modelInfo.Collect is
// compared with.
type constModelInfo struct{ c *modelInfo }

func (r constModelInfo) Describe(ch chan<- *prometheus.Desc) { ch <- r.c.desc }

func (r constModelInfo) Collect(ch chan<- prometheus.Metric) {
	for k, s := range r.c.models {
		ch <- prometheus.MustNewConstMetric(r.c.desc, prometheus.GaugeValue, 1,
			k.namespace, k.name, s.version, s.phase, s.ready, s.reason, strconv.FormatBool(s.stalled))
	}
}

// A scrape writes the series client_golang's constant metrics would (on a
// pedantic registry, which checks them against the description) and, on a
// registry like the one controller-runtime serves, allocates less than half
// as much: the label pairs a value shares are built once per scrape.
func TestModelInfoScrapeSharesLabelPairs(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	versions := []string{"OpenMed/pii-v1", "OpenMed/pii-v2", `odd "quoted" \ver`, "ünï\u2028code"}
	reasons := []string{"Succeeded", "RollingOut", "ApplyRejected", "line\nbreak"}
	const n = 3000
	for i := range n {
		m.setModelInfo(fmt.Sprintf("ns-%d", i%3), fmt.Sprintf("model-%04d", i), modelState{
			version: versions[i%len(versions)], phase: []string{"Ready", "Progressing", "Degraded"}[i%3],
			ready: []string{"True", "False", "Unknown"}[i%3], reason: reasons[i%len(reasons)], stalled: i%7 == 0,
		})
	}
	shared, consts := prometheus.NewPedanticRegistry(), prometheus.NewPedanticRegistry()
	shared.MustRegister(m.modelInfo)
	consts.MustRegister(constModelInfo{m.modelInfo})
	text := func(reg *prometheus.Registry) string {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		enc := expfmt.NewEncoder(&b, expfmt.NewFormat(expfmt.TypeTextPlain))
		for _, mf := range mfs {
			if err := enc.Encode(mf); err != nil {
				t.Fatal(err)
			}
		}
		return b.String()
	}
	got, want := text(shared), text(consts)
	if got != want {
		t.Fatalf("exposition differs from constant metrics'\ngot:\n%.600s\nwant:\n%.600s", got, want)
	}
	if lines := strings.Count(got, "\nopenmed_model_info{"); lines != n {
		t.Fatalf("%d series, want %d", lines, n)
	}
	gathered := func(reg *prometheus.Registry) uint64 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for range 3 {
			if _, err := reg.Gather(); err != nil {
				t.Fatal(err)
			}
		}
		runtime.ReadMemStats(&after)
		return (after.TotalAlloc - before.TotalAlloc) / 3
	}
	plainShared, plainConsts := prometheus.NewRegistry(), prometheus.NewRegistry()
	plainShared.MustRegister(m.modelInfo)
	plainConsts.MustRegister(constModelInfo{m.modelInfo})
	a, b := gathered(plainShared), gathered(plainConsts)
	t.Logf("one gather of %d models allocates %d bytes (%.0f per model); with constant metrics %d (%.0f)",
		n, a, float64(a)/n, b, float64(b)/n)
	if a*2 > b {
		t.Errorf("a gather allocates %d bytes, want at most half of constant metrics' %d", a, b)
	}
}

// TestManagerLabelBounded: the manager label of the drift and conflict
// counters takes the first MaxLabelValues names, then "other" (a loop of
// patches under new field-manager names adds no series past it); the
// counts all land somewhere.
func TestManagerLabelBounded(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	const names = 3 * MaxLabelValues
	for i := range names {
		m.countDrift(fmt.Sprintf("x%d", i))
		m.countConflict(fmt.Sprintf("x%d", i), fmt.Sprintf("configmap cm-%d", i))
	}
	// A name seen before the bound keeps its series after it.
	m.countDrift("x0")
	if n := testutil.CollectAndCount(m.drift); n != MaxLabelValues+1 {
		t.Errorf("%s has %d series after %d managers, want %d", MetricDriftCorrections, n, names, MaxLabelValues+1)
	}
	if n := testutil.CollectAndCount(m.conflicts); n != MaxLabelValues+1 {
		t.Errorf("%s has %d series after %d managers and fields, want %d", MetricOwnershipConflicts, n, names, MaxLabelValues+1)
	}
	if got := testutil.ToFloat64(m.drift.WithLabelValues(OtherLabelValue)); got != names-MaxLabelValues {
		t.Errorf(`%s{manager="other"} = %v, want %d`, MetricDriftCorrections, got, names-MaxLabelValues)
	}
	if got := testutil.ToFloat64(m.drift.WithLabelValues("x0")); got != 2 {
		t.Errorf(`%s{manager="x0"} = %v, want 2`, MetricDriftCorrections, got)
	}
}
