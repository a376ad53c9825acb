package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// samples are the documents that show the demo's output, from the
// repository's root: both were copied from a real `make run ONCE=1`.
var samples = []string{"README.md", "docs/development.md"}

// setupStages are the summary's rows before the storyline's, in order.
var setupStages = []string{"cluster", "install", "operator"}

// TestSampleOutputMatchesTheDemo holds the docs' sample output to what the
// demo prints: its summary has the header the demo prints, a row for each
// set-up step and each stage in the demo's order, each ok, and the notes
// the demo prints when a stage showed what it is there to show (the
// never-ready version's ProgressDeadlineExceeded with the old pods
// serving, the crashing version's bake and its failure; TestDemoOnce
// asserts a real run prints them); each progress line names a stage.
func TestSampleOutputMatchesTheDemo(t *testing.T) {
	s := &story{
		model: &v1alpha1.OpenMedModel{Spec: v1alpha1.OpenMedModelSpec{Version: "v1",
			RolloutStrategy: v1alpha1.RolloutStrategy{ProgressDeadlineSeconds: ptr.To[int32](600)}}},
		deadline: 15 * time.Second, bake: 20 * time.Second, crashAfter: 5 * time.Second, neverReady: true,
		upgradeVersion: "v2", brokenVersion: "v3", crashingVersion: "v4", forgetfulVersion: "v5", served: true,
	}
	stages := s.stages()
	wantNote := map[string]string{}
	var names []string
	for _, st := range stages {
		names = append(names, st.name)
		if st.note != nil {
			wantNote[st.name] = st.note(watchStats{minAvailable: 2, deadlineExceeded: true, baking: true, bakeFailed: true, verificationFailed: true})
		}
	}
	var header bytes.Buffer
	newPrinter(&header).summary(nil, nil, 0)
	headerLine := strings.Split(strings.TrimPrefix(header.String(), "\n== summary\n"), "\n")[0]

	for _, doc := range samples {
		data, err := os.ReadFile(filepath.Join("..", "..", doc))
		if err != nil {
			t.Fatal(err)
		}
		block := sampleBlock(string(data))
		if block == "" {
			t.Errorf("%s: no code block with the demo's summary", doc)
			continue
		}
		lines := strings.Split(block, "\n")
		at := slices.Index(lines, "== summary")
		if at < 0 || at+1 >= len(lines) {
			t.Errorf("%s: no summary", doc)
			continue
		}
		if got := strings.Fields(lines[at+1]); !slices.Equal(got, strings.Fields(headerLine)) {
			t.Errorf("%s: summary header %q, the demo prints %q", doc, lines[at+1], headerLine)
		}
		var rows []string
		for _, row := range lines[at+2:] {
			if row == "" || strings.HasPrefix(row, "total ") {
				break
			}
			f := strings.Fields(row)
			rows = append(rows, f[0])
			if len(f) < 2 || f[1] != outcomeOK {
				t.Errorf("%s: summary row %q is not ok", doc, row)
			}
			if want, ok := wantNote[f[0]]; ok && !strings.HasSuffix(row, "  "+want) {
				t.Errorf("%s: summary row %q does not end with the note %q", doc, row, want)
			}
		}
		if want := append(slices.Clone(setupStages), names...); !slices.Equal(rows, want) {
			t.Errorf("%s: summary rows %v, the demo prints %v", doc, rows, want)
		}
		for _, line := range lines[:at] {
			if line == "" || line == "…" {
				continue
			}
			f := strings.Fields(line)
			if clock.MatchString(f[0]) && len(f) > 1 {
				// The time of day, which the docs may leave out.
				f = f[1:]
			}
			if !slices.Contains(names, f[0]) && !slices.Contains(setupStages, f[0]) {
				t.Errorf("%s: progress line %q names no stage of the demo", doc, line)
			}
		}
	}
}

// clock is the time of day a progress line starts with.
var clock = regexp.MustCompile(`^\d\d:\d\d:\d\d\.\d{3}$`)

// sampleBlock is the first fenced code block of doc holding "== summary".
func sampleBlock(doc string) string {
	parts := strings.Split(doc, "```")
	for i := 1; i < len(parts); i += 2 {
		if strings.Contains(parts[i], "\n== summary\n") {
			return strings.TrimPrefix(parts[i], "\n")
		}
	}
	return ""
}
