// Command testrun runs `go test -json` with the given arguments, prints
// what a plain `go test` prints (a line per package, the output of every
// test that failed, build errors), and then checks the claims table of the
// docs: every test a claim names must have run and passed in this run. A
// claim whose test was removed, renamed, skipped or never ran fails the run,
// as a failing test does.
//
//	go run ./hack/testrun -claims docs/claims.md -- -count=1 ./...
//
// A claims table row names its test in its last two cells: the package
// directory (`./pkg/rollout`) and the test (`TestBake/the_label_is_put_back`,
// a subtest as `go test -run` names it, or `TestX/*` for every case of a
// table test).
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
)

// modulePath is the import path of the module's root package.
const modulePath = "github.com/openmed/openmed-operator"

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64
}

// Claim is a row of the claims table: its text and the test that shows it.
type Claim struct {
	Text    string
	Package string // import path
	Test    string
}

func main() {
	claims := flag.String("claims", "", "the claims table (markdown) whose named tests must pass in this run")
	flag.Parse()
	var table []Claim
	if *claims != "" {
		var err error
		if table, err = readClaims(*claims); err != nil {
			fmt.Fprintln(os.Stderr, "testrun:", err)
			os.Exit(2)
		}
	}
	cmd := exec.Command("go", append([]string{"test", "-json"}, flag.Args()...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testrun:", err)
		os.Exit(2)
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "testrun:", err)
		os.Exit(2)
	}
	results := report(out, os.Stdout)
	runErr := cmd.Wait()
	code := 0
	if runErr != nil {
		code = 1
	}
	if len(table) > 0 {
		if bad := check(table, results); len(bad) > 0 {
			fmt.Printf("FAIL: %d of %d claims in %s are not shown by a passing test of this run:\n", len(bad), len(table), *claims)
			for _, b := range bad {
				fmt.Println("  " + b)
			}
			code = 1
		} else {
			fmt.Printf("ok: every one of the %d claims in %s is shown by a test that passed in this run\n", len(table), *claims)
		}
	}
	os.Exit(code)
}

// report reads the JSON events of r, writes to w what a plain `go test`
// prints, and returns each test's final action by "package test".
func report(r io.Reader, w io.Writer) map[string]string {
	results := map[string]string{}
	// The output of each running test, printed only when it fails, and
	// the tests in the order they started.
	output := map[string][]string{}
	var order []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1024*1024), 16*1024*1024)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if err := json.Unmarshal(line, &e); err != nil || e.Action == "" {
			// Not an event (a build error go test printed as is).
			fmt.Fprintln(w, string(line))
			continue
		}
		key := e.Package + " " + e.Test
		switch e.Action {
		case "output":
			if e.Test == "" {
				// Package-level lines: "ok  pkg 1.2s", "FAIL", "PASS",
				// panics and TestMain's own output.
				if !strings.HasPrefix(e.Output, "=== ") && e.Output != "PASS\n" {
					fmt.Fprint(w, e.Output)
				}
				continue
			}
			if _, ok := output[key]; !ok {
				order = append(order, key)
			}
			output[key] = append(output[key], e.Output)
		case "build-output":
			fmt.Fprint(w, e.Output)
		case "pass", "skip", "fail":
			if e.Test == "" && e.Action == "fail" {
				// The package failed: whatever its tests printed and no
				// test end reported (a panic, a timeout) is printed.
				kept := order[:0]
				for _, k := range order {
					if !strings.HasPrefix(k, e.Package+" ") {
						kept = append(kept, k)
						continue
					}
					fmt.Fprint(w, strings.Join(output[k], ""))
					delete(output, k)
				}
				order = kept
			}
			if e.Test != "" {
				results[key] = e.Action
				if !strings.Contains(e.Test, "/") {
					// A top-level test ends: a failed one prints with its
					// subtests' lines, in the order they started.
					kept := order[:0]
					for _, k := range order {
						if k != key && !strings.HasPrefix(k, key+"/") {
							kept = append(kept, k)
							continue
						}
						if e.Action == "fail" {
							fmt.Fprint(w, strings.Join(output[k], ""))
						}
						delete(output, k)
					}
					order = kept
				}
			}
		}
	}
	return results
}

// check lists the claims whose test did not pass in results. A claim shown
// by a test with subtests is shown by all of them: a subtest skipped under
// it fails the claim. A claim that names a test which ran several subtests
// must name the subtest that shows it (a deleted subtest would go unseen),
// or end in "/*" when the claim is about every case of a table.
func check(table []Claim, results map[string]string) []string {
	var bad []string
	for _, c := range table {
		test, every := strings.CutSuffix(c.Test, "/*")
		switch got := results[c.Package+" "+test]; got {
		case "pass":
		case "":
			bad = append(bad, fmt.Sprintf("%s %s did not run (removed or renamed?): %q", c.Package, test, c.Text))
			continue
		default:
			bad = append(bad, fmt.Sprintf("%s %s: %s: %q", c.Package, test, got, c.Text))
			continue
		}
		var skipped, children []string
		for key, action := range results {
			sub, ok := strings.CutPrefix(key, c.Package+" "+test+"/")
			if !ok {
				continue
			}
			if action == "skip" {
				skipped = append(skipped, test+"/"+sub)
			}
			if !strings.Contains(sub, "/") {
				children = append(children, sub)
			}
		}
		sort.Strings(skipped)
		sort.Strings(children)
		switch {
		case len(skipped) > 0:
			bad = append(bad, fmt.Sprintf("%s %s: subtests skipped: %s: %q", c.Package, test, strings.Join(skipped, ", "), c.Text))
		case every && len(children) == 0:
			bad = append(bad, fmt.Sprintf("%s %s: the claim names every case (/*) of a test that ran %d subtests: %q", c.Package, c.Test, len(children), c.Text))
		case !every && len(children) > 1:
			bad = append(bad, fmt.Sprintf("%s %s ran %d subtests (%s): name the one that shows the claim, or %s/* for every case of a table: %q",
				c.Package, test, len(children), strings.Join(children, ", "), test, c.Text))
		}
	}
	sort.Strings(bad)
	return bad
}

var (
	pkgCell  = regexp.MustCompile("^`(\\./[^` ]*|\\.)`$")
	testCell = regexp.MustCompile("^`((?:Test|Example)[^` ]*)`$")
)

// readClaims reads the claims tables of the markdown document path: the
// tables whose header's last two cells are "package" and "test". Every row
// of such a table must name a package directory and a test; other tables
// are not read.
func readClaims(path string) ([]Claim, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseClaims(string(b))
}

func parseClaims(doc string) ([]Claim, error) {
	var out []Claim
	inTable := false
	for n, line := range strings.Split(doc, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			inTable = false
			continue
		}
		if strings.HasPrefix(line, "| ---") || strings.HasPrefix(line, "|---") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if len(cells) >= 3 && cells[len(cells)-2] == "package" && cells[len(cells)-1] == "test" {
			inTable = true // a claims table's header
			continue
		}
		if !inTable {
			continue
		}
		var pm, tm []string
		if len(cells) >= 3 {
			pm, tm = pkgCell.FindStringSubmatch(cells[len(cells)-2]), testCell.FindStringSubmatch(cells[len(cells)-1])
		}
		if pm == nil || tm == nil {
			return nil, fmt.Errorf("line %d: the last two cells must be a package (`./pkg/...`) and a test (`TestX/sub`): %q", n+1, line)
		}
		imp := modulePath
		if dir := strings.TrimPrefix(pm[1], "./"); dir != "." && dir != "" {
			imp += "/" + dir
		}
		out = append(out, Claim{Text: strings.Join(cells[:len(cells)-2], " | "), Package: imp, Test: tm[1]})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no claim rows found")
	}
	return out, nil
}
