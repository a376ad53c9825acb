package health

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoGitOpsEngine keeps gitops-engine (and the k8s.io/kubernetes tree it
// drags in) out of this package, and so out of the operator binary; only
// health/argocd may import it.
func TestNoGitOpsEngine(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go command not found")
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatal(err)
	}
	for dep := range strings.SplitSeq(string(out), "\n") {
		if strings.Contains(dep, "gitops-engine") || strings.HasPrefix(dep, "k8s.io/kubernetes/") {
			t.Errorf("health depends on %s", dep)
		}
	}
}

// TestRoomsImportDownward holds the layering docs/architecture.md draws:
// nothing under pkg/ imports the reconciler (controllers), the health faces
// (health) or a command (cmd), and health imports nothing of this module
// but the API types.
func TestRoomsImportDownward(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go command not found")
	}
	const module = "github.com/openmed/openmed-operator/"
	deps := func(pattern string) []string {
		t.Helper()
		out, err := exec.Command(goTool, "list", "-deps", module+pattern).Output()
		if err != nil {
			t.Fatal(err)
		}
		var own []string
		for dep := range strings.SplitSeq(string(out), "\n") {
			if strings.HasPrefix(dep, module) {
				own = append(own, strings.TrimPrefix(dep, module))
			}
		}
		return own
	}
	for _, dep := range deps("pkg/...") {
		for _, upper := range []string{"controllers", "health", "cmd"} {
			if dep == upper || strings.HasPrefix(dep, upper+"/") {
				t.Errorf("a package under pkg/ depends on %s", dep)
			}
		}
	}
	for _, dep := range deps("health") {
		if dep != "health" && dep != "pkg/api/v1alpha1" {
			t.Errorf("health depends on %s", dep)
		}
	}
}
