package cli

import (
	"testing"

	"github.com/openmed/openmed-operator/pkg/version"
)

// TestVersion: `kubectl openmed version` and `kubectl openmed --version`
// print the plugin's build on one line and read no kubeconfig (the one
// named does not exist).
func TestVersion(t *testing.T) {
	want := version.Get().String(FieldManager) + "\n"
	for _, args := range [][]string{{"version"}, {"--version"}, {"--kubeconfig", "/nonexistent/kubeconfig", "version"}} {
		r := runWith(t, Options{}, args...)
		if r.err != nil || r.stdout != want || r.stderr != "" {
			t.Errorf("%v: stdout %q, stderr %q, err %v; want %q", args, r.stdout, r.stderr, r.err, want)
		}
	}
}
