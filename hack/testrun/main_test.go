package main

import (
	"bytes"
	"os"
	"slices"
	"strings"
	"testing"
)

func TestClaimsCheck(t *testing.T) {
	table, err := readClaims("testdata/claims.md")
	if err != nil {
		t.Fatal(err)
	}
	want := []Claim{
		{"A reset bakes again.", modulePath + "/pkg/rollout", "TestResetAfterAFailedFirstVersionBake"},
		{"The label goes back on.", modulePath + "/pkg/rollout", "TestBakeGuardHolds/the_label_stripped_during_the_bake_is_put_back"},
		{"The example runs.", modulePath, "ExampleDecide"},
	}
	if !slices.Equal(table, want) {
		t.Fatalf("claims %+v, want %+v", table, want)
	}
	f, err := os.Open("testdata/events.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var printed bytes.Buffer
	results := report(f, &printed)
	for _, line := range []string{"the stripped bake label was not restored", "--- FAIL: TestBakeGuardHolds", "FAIL\tgithub.com/openmed/openmed-operator/pkg/rollout"} {
		if !strings.Contains(printed.String(), line) {
			t.Errorf("printed output lacks %q:\n%s", line, printed.String())
		}
	}
	if strings.Contains(printed.String(), "=== RUN") {
		t.Errorf("the output of a passing test was printed:\n%s", printed.String())
	}
	bad := check(table, results)
	if len(bad) != 2 || !strings.Contains(bad[0]+bad[1], "TestBakeGuardHolds/the_label_stripped_during_the_bake_is_put_back: fail") ||
		!strings.Contains(bad[0]+bad[1], "ExampleDecide did not run") {
		t.Errorf("check: %q, want the failed subtest and the example that did not run", bad)
	}
}

// TestClaimsRowsMustNameATest: every row of a claims table (a table whose
// header ends in "package" and "test") names a package and a test, or the
// run fails; other tables are not read.
func TestClaimsRowsMustNameATest(t *testing.T) {
	other := "| mutant | the test that must fail |\n| --- | --- |\n| `x`: y | `TestA`: z |\n\n| claim | package | test |\n| --- | --- | --- |\n| x | `./pkg/rollout` | `TestA` |\n"
	if got, err := parseClaims(other); err != nil || len(got) != 1 {
		t.Errorf("parseClaims with another table: %v, %v", got, err)
	}
	for _, doc := range []string{
		"| claim | package | test |\n| --- | --- | --- |\n| x | `./pkg/rollout` | TestNoBackticks |\n",
		// A row whose last two cells both fail the patterns was once
		// taken for a header and skipped.
		"| claim | package | test |\n| --- | --- | --- |\n| x | `./pkg/rollout` | `TestA` |\n| y | pkg/rollout | TestB |\n",
		"| claim | package | test |\n| --- | --- | --- |\n| only two cells | `TestA` |\n",
		"no table at all\n",
	} {
		if _, err := parseClaims(doc); err == nil {
			t.Errorf("parseClaims(%q) accepted it", doc)
		}
	}
}

// TestClaimsOnParentTests: a claim shown by a test with subtests fails when
// one of them was skipped, and a claim that names a test of several
// subtests must name one of them or say "/*" (every case of a table).
func TestClaimsOnParentTests(t *testing.T) {
	const pkg = modulePath + "/e2e"
	results := map[string]string{
		pkg + " TestArgoCD":                     "pass",
		pkg + " TestArgoCD/models":              "pass",
		pkg + " TestArgoCD/with-deployment":     "pass",
		pkg + " TestTable":                      "pass",
		pkg + " TestTable/a":                    "pass",
		pkg + " TestTable/b":                    "pass",
		pkg + " TestSkips":                      "pass",
		pkg + " TestSkips/on-a-kind-of-cluster": "skip",
		pkg + " TestPlain":                      "pass",
	}
	for _, tc := range []struct {
		test string
		want string // "" for a claim shown
	}{
		{"TestArgoCD/models", ""},
		{"TestArgoCD", "ran 2 subtests (models, with-deployment): name the one"},
		{"TestTable/*", ""},
		{"TestSkips", "subtests skipped: TestSkips/on-a-kind-of-cluster"},
		{"TestPlain", ""},
		{"TestPlain/*", "names every case (/*) of a test that ran 0 subtests"},
	} {
		bad := check([]Claim{{Text: "x", Package: pkg, Test: tc.test}}, results)
		switch {
		case tc.want == "" && len(bad) != 0:
			t.Errorf("%s: %q, want the claim shown", tc.test, bad)
		case tc.want != "" && (len(bad) != 1 || !strings.Contains(bad[0], tc.want)):
			t.Errorf("%s: %q, want one naming %q", tc.test, bad, tc.want)
		}
	}
}
