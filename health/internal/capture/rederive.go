package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/openmed/openmed-operator/health/internal/corpus"
	"github.com/openmed/openmed-operator/pkg/localrun"
)

// capturedHeader begins the header of every captured fixture (capture).
const capturedHeader = "# Captured from a live cluster"

// rederive writes the derived fixtures again from the captured ones in
// dir, without a cluster: a new derivation lands without recapturing
// (which rewrites every fixture), and a derivation that is not
// deterministic shows as a diff. It returns how many it wrote.
func rederive(dir string) (int, error) {
	example, err := localrun.ReadModel(filepath.Join(localrun.ExamplesDir(), localrun.ModelExample))
	if err != nil {
		return 0, err
	}
	// derive reads only the captures and the first version (the rollback
	// action's target); the versions the scenarios play are in the
	// captures themselves.
	r := &rig{v1: example.Spec.Version}
	paths, err := filepath.Glob(filepath.Join(dir, "testdata", "*.yaml"))
	if err != nil {
		return 0, err
	}
	sort.Strings(paths)
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return 0, err
		}
		if !bytes.HasPrefix(data, []byte(capturedHeader)) {
			continue
		}
		u, err := corpus.Decode(data)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", p, err)
		}
		r.fixtures = append(r.fixtures, fixture{dir: "testdata", name: filepath.Base(p), obj: u})
	}
	if len(r.fixtures) == 0 {
		return 0, fmt.Errorf("no captured fixture in %s", filepath.Join(dir, "testdata"))
	}
	captured := len(r.fixtures)
	if err := r.derive(); err != nil {
		return 0, err
	}
	// Only the derived ones are written: the captures stay as captured.
	r.fixtures = r.fixtures[captured:]
	return r.write(dir)
}
