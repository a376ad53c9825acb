package controllers_test

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/controllers"
	"github.com/openmed/openmed-operator/health"
	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/rollout"
)

// rollingForeign is a Deployment rolling out a template change half way:
// old pods still serve.
func rollingForeign(d *appsv1.Deployment) {
	rolloutStuck(d)
	d.Status.Conditions[1].Status, d.Status.Conditions[1].Reason = "True", "ReplicaSetUpdated"
}

// TestHelmUpgradeIsNotAModelRollout: Helm upgrades the image of the
// Deployment a Ready model points. That rollout is not the model's: no
// RolloutSucceeded, no rollback even when it fails, Argo CD shows
// Progressing (not Degraded) while it rolls and Healthy after.
func TestHelmUpgradeIsNotAModelRollout(t *testing.T) {
	ns := newNamespace(t)
	op := startOperator(t)
	readyModel(t, ns, "svc")
	// The first rollout's event, once the recorder stored it (it writes
	// asynchronously).
	succeeded := len(recordedEvents(t, ns, "svc", v1alpha1.RolloutSucceededReason, 1))
	rollouts := op.metric(t, controllers.MetricRollouts, map[string]string{"namespace": ns})

	d := getDeployment(t, ns, "svc")
	d.Spec.Template.Spec.Containers[0].Image = "openmed:2.3.0"
	if err := helmClient().Update(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	updateDeploymentStatus(t, ns, "svc", rollingForeign)
	m := waitFor(t, ns, "svc", v1alpha1.PhaseReady, v1alpha1.DeploymentRollingReason)
	if h := argoHealth(t, m); h != health.Progressing {
		t.Errorf("Argo CD health while Helm rolls = %s, want Progressing", h)
	}
	updateDeploymentStatus(t, ns, "svc", rolloutComplete)
	m = waitFor(t, ns, "svc", v1alpha1.PhaseReady, v1alpha1.RolloutSucceededReason)
	if h := argoHealth(t, m); h != health.Healthy {
		t.Errorf("Argo CD health after the Helm rollout = %s, want Healthy", h)
	}
	if n := countReason(t, ns, "svc", v1alpha1.RolloutSucceededReason); n != succeeded {
		t.Errorf("Helm's rollout was announced as the model's (%d RolloutSucceeded, was %d)", n, succeeded)
	}
	if n := op.metric(t, controllers.MetricRollouts, map[string]string{"namespace": ns}); n != rollouts {
		t.Errorf("Helm's rollout was counted as a model rollout (%v, was %v)", n, rollouts)
	}

	// Helm's next image fails: reported, never rolled back.
	pointer := preload(getDeployment(t, ns, "svc")).ValueFrom.ConfigMapKeyRef.Name
	d = getDeployment(t, ns, "svc")
	d.Spec.Template.Spec.Containers[0].Image = "openmed:broken"
	if err := helmClient().Update(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	updateDeploymentStatus(t, ns, "svc", rolloutStuck)
	m = waitFor(t, ns, "svc", v1alpha1.PhaseReady, v1alpha1.DeploymentUnavailableReason)
	if m.Status.FailedSpecHash != "" || preload(getDeployment(t, ns, "svc")).ValueFrom.ConfigMapKeyRef.Name != pointer {
		t.Errorf("Helm's failure was blamed on the model: failed=%q", m.Status.FailedSpecHash)
	}
}

// TestForcedApplierConflict: a forced applier (kustomize-controller with
// force) keeps setting spec.replicas the model owns. Each revert is
// corrected; the third makes an ownership conflict: the condition names the
// field, the manager and the fix, one event says so, and the metric counts
// it once.
func TestForcedApplierConflict(t *testing.T) {
	ns := newNamespace(t)
	op := startOperatorIn(t, ns)
	readyModel(t, ns, "svc")
	for i := 0; i < rollout.ConflictThreshold+1; i++ {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "Deployment",
			"metadata": map[string]any{"name": "svc", "namespace": ns}, "spec": map[string]any{"replicas": int64(1)}}}
		if err := env.Client.Patch(context.Background(), u, client.Apply, client.FieldOwner("kustomize-controller"), client.ForceOwnership); err != nil {
			t.Fatal(err)
		}
		eventually(t, "replicas corrected", func() (bool, string) {
			r := ptr.Deref(getDeployment(t, ns, "svc").Spec.Replicas, 0)
			return r == 2, ""
		})
		updateDeploymentStatus(t, ns, "svc", rolloutComplete)
	}
	m := waitFor(t, ns, "svc", v1alpha1.PhaseReady, v1alpha1.OwnershipConflictReason)
	c := condition(m, v1alpha1.OwnershipConflictCondition)
	if c == nil || c.Status != "True" || !strings.Contains(c.Message, "spec.replicas") || !strings.Contains(c.Message, `"kustomize-controller"`) ||
		!strings.Contains(c.Message, "kustomize.toolkit.fluxcd.io/ssa: IfNotPresent") {
		t.Fatalf("OwnershipConflict = %+v", c)
	}
	if h := argoHealth(t, m); h != health.Degraded {
		t.Errorf("Argo CD health = %s, want Degraded", h)
	}
	if got := kstatusOf(t, m); got != "Failed" {
		t.Errorf("kstatus %s, want Failed", got)
	}
	if n := len(recordedEvents(t, ns, "svc", v1alpha1.OwnershipConflictReason, 1)); n != 1 {
		t.Errorf("%d OwnershipConflict events, want 1", n)
	}
	if n := op.metric(t, controllers.MetricOwnershipConflicts, map[string]string{"manager": "kustomize-controller", "field": "spec.replicas"}); n != 1 {
		t.Errorf("%s = %v, want 1", controllers.MetricOwnershipConflicts, n)
	}
	if n := op.metric(t, controllers.MetricDriftCorrections, map[string]string{"manager": "kustomize-controller"}); n != float64(rollout.ConflictThreshold+1) {
		t.Errorf("%s = %v, want %d", controllers.MetricDriftCorrections, n, rollout.ConflictThreshold+1)
	}

	// A reset says the cause is fixed: the conflict clears at once.
	annotate(t, ns, "svc", v1alpha1.ResetRequestAnnotation, "fixed-in-git")
	m = waitFor(t, ns, "svc", v1alpha1.PhaseReady, v1alpha1.RolloutSucceededReason)
	if condition(m, v1alpha1.OwnershipConflictCondition) != nil || len(m.Status.Corrections) != 0 {
		t.Errorf("after the reset: %+v %+v", m.Status.Conditions, m.Status.Corrections)
	}
}
