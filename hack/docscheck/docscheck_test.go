package docscheck

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/openmed/openmed-operator/e2e/scale/figures"
)

// root is the repository's root, from this package's directory.
const root = "../.."

// maxReadmeLines is the most lines README.md may have: it is the front
// page; details go to docs/, history to CHANGELOG.md and docs/decisions.md.
const maxReadmeLines = 250

func read(t *testing.T, rel string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// docs are README.md and every docs/*.md, relative to the root.
func docs(t *testing.T) []string {
	t.Helper()
	matches, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := []string{"README.md"}
	for _, m := range matches {
		rel, err := filepath.Rel(root, m)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, filepath.ToSlash(rel))
	}
	sort.Strings(out[1:])
	return out
}

// TestReadmeLength fails when README.md has more than maxReadmeLines lines.
func TestReadmeLength(t *testing.T) {
	if n := strings.Count(read(t, "README.md"), "\n"); n > maxReadmeLines {
		t.Errorf("README.md has %d lines, at most %d: move details to docs/ and history to CHANGELOG.md or docs/decisions.md", n, maxReadmeLines)
	}
}

// requiredBlocks are the generated blocks each document must hold.
var requiredBlocks = map[string][]string{
	"README.md":     {"scale-headline"},
	"docs/scale.md": {"scale-table", "scale-verification"},
	"docs/fleet.md": {"fleet-waves"},
}

// TestGeneratedBlocksUpToDate renders every generated block of the docs
// from the figures file it names (docs/scale/results.json,
// docs/scale/verification.json), in memory, and fails when a document's
// block differs (run `make docs-figures`) or a required block is missing.
func TestGeneratedBlocksUpToDate(t *testing.T) {
	figuresOf := func(path string) (*figures.File, error) { return figures.Read(filepath.Join(root, path)) }
	for _, doc := range docs(t) {
		text := read(t, doc)
		regenerated, names, err := figures.Regenerate(text, figuresOf)
		if err != nil {
			t.Errorf("%s: %v", doc, err)
			continue
		}
		for _, want := range requiredBlocks[doc] {
			if !strings.Contains(strings.Join(names, " "), want) {
				t.Errorf("%s has no generated block %s", doc, want)
			}
		}
		if regenerated != text {
			t.Errorf("%s: generated blocks %v differ from what their figures render to; run `make docs-figures`:\n%s",
				doc, names, firstDifference(text, regenerated))
		}
	}
}

// firstDifference is the first line where a and b differ, from each.
func firstDifference(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < max(len(al), len(bl)); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			return "line " + strconv.Itoa(i+1) + ":\n  in the file: " + x + "\n  generated:   " + y
		}
	}
	return ""
}

// The rule for scale figures. The scale benchmark's figures come from one
// source, docs/scale/results.json, through the generated blocks; a copy
// typed into the prose goes stale with the next run. So outside the
// generated blocks of README.md and docs/*.md (docs/decisions.md's History
// section excepted: it records earlier runs, dated, as they were):
//
//   - no memory figure in MiB or GiB, unless the paragraph or table row
//     names the Go test (Test…, other than TestScale) that measures or
//     asserts it (a hostile tenant's memory, a tenant's object size);
//   - no API-calls-per-model figure: "N / N / N" in a paragraph or row
//     about calls, or "N calls per model";
//   - no shard's share: a percentage in a sentence about shards;
//   - no CPU-per-model figure: milliseconds or a ratio (1.09×) in a
//     paragraph or row about CPU per model.
//
// Link to docs/scale.md#scale-benchmark-figures instead.
var (
	memoryFigure   = regexp.MustCompile(`\b\d[\d,]*(\.\d+)?\s?[MG]iB\b`)
	namedTest      = regexp.MustCompile(`\bTest[A-Z]\w*`)
	callsTriple    = regexp.MustCompile(`\b\d+ / \d+ / \d+\b`)
	aboutCalls     = regexp.MustCompile(`(?i)\bcalls?\b`)
	callsPerModel  = regexp.MustCompile(`(?i)\b\d+(\.\d+)? (API )?calls? (per|a|each) model`)
	aboutShards    = regexp.MustCompile(`(?i)\bshards?\b`)
	percentage     = regexp.MustCompile(`\d+(\.\d+)?\s?%`)
	aboutCPU       = regexp.MustCompile(`(?i)\bCPU per model\b`)
	cpuFigure      = regexp.MustCompile(`\b\d+(\.\d+)?\s?ms\b|\b\d+\.\d+×`)
	historySection = map[string]string{"docs/decisions.md": "\n## History\n"}
)

// TestScaleFiguresOnlyInGeneratedBlocks applies the rule above.
func TestScaleFiguresOnlyInGeneratedBlocks(t *testing.T) {
	for _, doc := range docs(t) {
		text, err := figures.Outside(read(t, doc))
		if err != nil {
			t.Errorf("%s: %v", doc, err)
			continue
		}
		if h, ok := historySection[doc]; ok {
			if i := strings.Index(text, h); i >= 0 {
				text = text[:i]
			}
		}
		for _, u := range units(text) {
			for _, bad := range scaleFigures(u.text) {
				t.Errorf("%s:%d: scale figure %q outside a generated block (link to docs/scale.md#scale-benchmark-figures): %s",
					doc, u.line, bad, shorten(u.text))
			}
		}
	}
}

// scaleFigures are the figures of one paragraph or table row the rule
// forbids.
func scaleFigures(u string) []string {
	var bad []string
	if tests := namedTest.FindAllString(u, -1); len(tests) == 0 || onlyTestScale(tests) {
		bad = append(bad, memoryFigure.FindAllString(u, -1)...)
	}
	if aboutCalls.MatchString(u) {
		bad = append(bad, callsTriple.FindAllString(u, -1)...)
	}
	bad = append(bad, callsPerModel.FindAllString(u, -1)...)
	for _, s := range sentences(u) {
		if aboutShards.MatchString(s) {
			bad = append(bad, percentage.FindAllString(s, -1)...)
		}
	}
	if aboutCPU.MatchString(u) {
		bad = append(bad, cpuFigure.FindAllString(u, -1)...)
	}
	return bad
}

func onlyTestScale(tests []string) bool {
	for _, t := range tests {
		if t != "TestScale" {
			return false
		}
	}
	return true
}

// unit is a paragraph, a table row or a line of a code block, with the
// line it starts on.
type unit struct {
	text string
	line int
}

func units(text string) []unit {
	var out []unit
	var para []string
	start := 0
	flush := func() {
		if len(para) > 0 {
			out = append(out, unit{strings.Join(para, " "), start})
			para = nil
		}
	}
	fenced := false
	for i, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trimmed, "```"):
			flush()
			fenced = !fenced
		case fenced || strings.HasPrefix(trimmed, "|"):
			flush()
			out = append(out, unit{line, i + 1})
		case trimmed == "":
			flush()
		default:
			if len(para) == 0 {
				start = i + 1
			}
			para = append(para, line)
		}
	}
	flush()
	return out
}

// sentences splits a paragraph at ". " and "; ", and a table row at its
// cells.
func sentences(u string) []string {
	return regexp.MustCompile(`\.\s|;\s|\s\|\s`).Split(u, -1)
}

func shorten(s string) string {
	if len(s) > 160 {
		return s[:157] + "…"
	}
	return s
}
