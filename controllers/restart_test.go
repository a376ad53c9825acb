package controllers_test

import (
	"strings"
	"testing"
	"time"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// TestRestartMidRollout: a manager stopped mid-rollout is replaced by a new
// one, which resumes from status without touching the pod template again
// and reaches Ready.
func TestRestartMidRollout(t *testing.T) {
	ns := newNamespace(t)
	first := startOperator(t)
	createDeployment(t, chartDeployment(ns, "svc", 2))
	createModel(t, newModel(ns, "svc", "OpenMed/pii-v1"))
	waitFor(t, ns, "svc", v1alpha1.PhaseRollingOut)
	first.stop()
	applied := getDeployment(t, ns, "svc")

	second := startOperator(t)
	time.Sleep(2 * time.Second) // the new manager's first passes
	if d := getDeployment(t, ns, "svc"); d.Generation != applied.Generation {
		t.Fatalf("the new manager changed the Deployment spec (generation %d -> %d)", applied.Generation, d.Generation)
	}
	updateDeploymentStatus(t, ns, "svc", rolloutComplete)
	waitFor(t, ns, "svc", v1alpha1.PhaseReady, v1alpha1.RolloutSucceededReason)
	if d := getDeployment(t, ns, "svc"); d.Generation != applied.Generation {
		t.Errorf("Deployment generation %d -> %d after the restart", applied.Generation, d.Generation)
	}
	_, writes := second.writes.snapshot()
	for req := range writes {
		if strings.Contains(req, "/deployments/") || strings.Contains(req, "/configmaps") {
			t.Errorf("the resumed manager wrote %s", req)
		}
	}
}
