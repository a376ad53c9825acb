package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/localrun"
)

// syntheticMetrics are written by Prometheus itself, never by a target.
var syntheticMetrics = map[string]bool{"up": true}

// TestMonitoringQueriesUseExposedMetrics scrapes a real operator after a
// rollout, drift and an ownership conflict, and checks that every metric
// the published dashboard and alerts query is on its /metrics.
func TestMonitoringQueriesUseExposedMetrics(t *testing.T) {
	requireCluster(t)
	t.Parallel()
	ctx := context.Background()
	// With leader election, as the install bundle runs it, in a Lease of
	// its own (the selector names it).
	op, err := localrun.StartOperator(localrun.OperatorConfig{
		Binary:     operatorBinary,
		Kubeconfig: operatorKubeconfig,
		LogPath:    filepath.Join(workDir, "operator-monitoring.log"),
		Args:       []string{"--log-encoding=console", "--watch-label-selector=" + operatorLabel + "=monitoring", "--enable-leader-election"},
		Env:        []string{"RUNTIME_NAMESPACE=" + bundleNamespace},
		Scraper:    metricsScraper,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = op.Kill() })
	readyCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := op.WaitReady(readyCtx); err != nil {
		t.Fatal(err)
	}
	ns := newNamespace(t)
	readyModel(t, ns, v1, "monitoring", nil)

	// kubectl-edit reverts replicas three times: three drift corrections,
	// then an ownership conflict.
	for i := 0; i < 3; i++ {
		editReplicas(t, ns, 4, "kubectl-edit")
		waitState(t, ns, "replicas restored", func(s state) bool { return ptr.Deref(s.d.Spec.Replicas, 0) == 2 })
	}
	waitState(t, ns, "an ownership conflict", func(s state) bool {
		return s.m.Status.Phase != "" && hasReason(s.m, v1alpha1.OwnershipConflictReason)
	})

	exposed := scrape(t, op)
	queries := monitoringQueries(t)
	var missing []string
	for _, q := range queries {
		for _, name := range metricNames(q.expr) {
			if !exposed[name] && !syntheticMetrics[name] {
				missing = append(missing, q.where+": "+name)
			}
		}
	}
	if len(missing) > 0 {
		t.Errorf("queried but not exposed by the operator:\n  %s", strings.Join(missing, "\n  "))
	}
	t.Logf("%d dashboard and alert queries checked against %d exposed metric names", len(queries), len(exposed))
}

// TestPrometheusRuleMatchesRules: prometheusrule.yaml carries exactly the
// groups of rules.yaml, which promtool checks and tests.
func TestPrometheusRuleMatchesRules(t *testing.T) {
	var rules struct{ Groups []any }
	var pr struct{ Spec struct{ Groups []any } }
	readYAML(t, "rules.yaml", &rules)
	readYAML(t, "prometheusrule.yaml", &pr)
	if len(rules.Groups) == 0 || !apiequality.Semantic.DeepEqual(rules.Groups, pr.Spec.Groups) {
		t.Error("examples/monitoring/prometheusrule.yaml spec.groups differ from rules.yaml groups")
	}
}

// editReplicas sets the target's replicas as manager with an Update, as
// kubectl edit does, retrying on a conflict with the Deployment controller's
// status writes.
func editReplicas(t *testing.T, ns string, replicas int32, manager string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d := read(t, ns).d
		d.Spec.Replicas = ptr.To(replicas)
		return k8s.Update(context.Background(), d, client.FieldOwner(manager))
	})
	if err != nil {
		t.Fatal(err)
	}
}

func hasReason(m *v1alpha1.OpenMedModel, reason string) bool {
	for _, c := range m.Status.Conditions {
		if c.Reason == reason && c.Status == "True" {
			return true
		}
	}
	return false
}

func readYAML(t *testing.T, name string, into any) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(localrun.ExamplesDir(), "monitoring", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, into); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// scrape returns the metric names on op's /metrics, with a histogram's or
// summary's series names (_bucket, _sum, _count) beside its family name.
func scrape(t *testing.T, op *localrun.Operator) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for name, f := range metricFamilies(t, op) {
		names[name] = true
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM:
			names[name+"_bucket"], names[name+"_sum"], names[name+"_count"] = true, true, true
		case dto.MetricType_SUMMARY:
			names[name+"_sum"], names[name+"_count"] = true, true
		}
	}
	return names
}

// counter is the value of the counter name on op's /metrics whose label
// key is value (0 when there is none).
func counter(t *testing.T, op *localrun.Operator, name, key, value string) float64 {
	t.Helper()
	for _, m := range metricFamilies(t, op)[name].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == key && l.GetValue() == value {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// metricFamilies reads and parses op's /metrics.
func metricFamilies(t *testing.T, op *localrun.Operator) map[string]*dto.MetricFamily {
	t.Helper()
	body, err := op.Read(context.Background(), "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parse %s: %v", op.MetricsURL(), err)
	}
	return families
}

type query struct{ where, expr string }

// monitoringQueries are the expressions of the dashboard's panels and the
// rules' alerts.
func monitoringQueries(t *testing.T) []query {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(localrun.ExamplesDir(), "monitoring", "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatal(err)
	}
	var out []query
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			out = append(out, query{"panel " + p.Title, tg.Expr})
		}
	}
	var rules struct {
		Groups []struct {
			Rules []struct{ Alert, Expr string }
		}
	}
	readYAML(t, "rules.yaml", &rules)
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			out = append(out, query{"alert " + r.Alert, r.Expr})
		}
	}
	if len(out) == 0 {
		t.Fatal("no queries in examples/monitoring")
	}
	return out
}

var (
	promString    = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	promMatchers  = regexp.MustCompile(`\{[^}]*\}`)
	promRange     = regexp.MustCompile(`\[[^\]]*\]`)
	promGrouping  = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promVariable  = regexp.MustCompile(`\$\{?\w+\}?`)
	promIdent     = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	promOperators = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "inf": true, "nan": true}
)

// metricNames returns the metric names a PromQL expression selects: the
// identifiers left once strings, label matchers, ranges, grouping clauses
// and dashboard variables are removed, that are not called as functions or
// aggregations and are not operators.
func metricNames(expr string) []string {
	s := promString.ReplaceAllString(expr, `""`)
	s = promMatchers.ReplaceAllString(s, " ")
	s = promRange.ReplaceAllString(s, " ")
	s = promGrouping.ReplaceAllString(s, " ")
	s = promVariable.ReplaceAllString(s, " ")
	seen := map[string]bool{}
	for _, loc := range promIdent.FindAllStringIndex(s, -1) {
		name := s[loc[0]:loc[1]]
		rest := strings.TrimLeft(s[loc[1]:], " ")
		if strings.HasPrefix(rest, "(") || promOperators[name] {
			continue
		}
		if loc[0] > 0 && (s[loc[0]-1] >= '0' && s[loc[0]-1] <= '9' || s[loc[0]-1] == '.') {
			continue // part of a number such as 1e3
		}
		seen[name] = true
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func TestMetricNames(t *testing.T) {
	tests := []struct {
		expr string
		want string
	}{
		{`count by (phase) (openmed_model_info{namespace=~"$namespace"})`, "openmed_model_info"},
		{`histogram_quantile(0.95, sum by (le) (rate(openmed_rollout_duration_seconds_bucket{job="x"}[$__rate_interval])))`, "openmed_rollout_duration_seconds_bucket"},
		{`sum(rate(rest_client_requests_total[5m])) / scalar(clamp_min(count(openmed_model_info), 1))`, "openmed_model_info rest_client_requests_total"},
		{`absent(up{job="openmed-operator"} == 1)`, "up"},
		{`a_total > 1e3 and on (name) b_info`, "a_total b_info"},
	}
	for _, tt := range tests {
		if got := strings.Join(metricNames(tt.expr), " "); got != tt.want {
			t.Errorf("metricNames(%q) = %q, want %q", tt.expr, got, tt.want)
		}
	}
}
