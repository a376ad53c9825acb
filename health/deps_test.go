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
