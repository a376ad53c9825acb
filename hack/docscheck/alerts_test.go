package docscheck

import (
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestEveryAlertIsUnitTested holds what the docs say of the alerts without
// counting them: every alert of examples/monitoring/rules.yaml has a
// promtool test in rules_test.yaml that expects it by name, and a row in
// docs/monitoring.md's table of alerts; neither names an alert the rules do
// not define.
func TestEveryAlertIsUnitTested(t *testing.T) {
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `json:"alert"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal([]byte(read(t, filepath.Join("examples", "monitoring", "rules.yaml"))), &rules); err != nil {
		t.Fatal(err)
	}
	var defined []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				defined = append(defined, r.Alert)
			}
		}
	}
	if len(defined) == 0 {
		t.Fatal("rules.yaml defines no alert")
	}
	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `json:"alertname"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal([]byte(read(t, filepath.Join("examples", "monitoring", "rules_test.yaml"))), &tests); err != nil {
		t.Fatal(err)
	}
	tested := map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			tested[a.Alertname] = true
		}
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(OpenMed\\w+)` \\|").FindAllStringSubmatch(read(t, "docs/monitoring.md"), -1) {
		documented[m[1]] = true
	}
	for _, a := range defined {
		if !tested[a] {
			t.Errorf("alert %s has no test in examples/monitoring/rules_test.yaml", a)
		}
		if !documented[a] {
			t.Errorf("alert %s has no row in docs/monitoring.md's table of alerts", a)
		}
	}
	for _, names := range []map[string]bool{tested, documented} {
		for a := range names {
			if !slices.Contains(defined, a) {
				t.Errorf("%s is tested or documented but rules.yaml defines no such alert", a)
			}
		}
	}
}
