package controllers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// TestReconcileRequestedAt: Flux's requestedAt annotation is handled and
// recorded in status.lastHandledReconcileAt.
func TestReconcileRequestedAt(t *testing.T) {
	ns := newNamespace(t)
	startOperator(t)
	readyModel(t, ns, "svc")
	annotate(t, ns, "svc", "reconcile.fluxcd.io/requestedAt", "2026-11-29T12:00:00Z")
	eventually(t, "lastHandledReconcileAt", func() (bool, string) {
		got := getModel(t, ns, "svc").Status.LastHandledReconcileAt
		return got == "2026-11-29T12:00:00Z", got
	})
	waitFor(t, ns, "svc", v1alpha1.PhaseReady)
}

// TestResetAtRetriesFailedSpec: a failed desired spec is held at the
// retained version until reconcile.fluxcd.io/resetAt asks for another try,
// without editing the spec.
func TestResetAtRetriesFailedSpec(t *testing.T) {
	ns := newNamespace(t)
	startOperator(t)
	readyModel(t, ns, "svc")
	v1 := preload(getDeployment(t, ns, "svc")).ValueFrom.ConfigMapKeyRef.Name
	patchModel(t, ns, "svc", func(m *v1alpha1.OpenMedModel) { m.Spec.Version = "OpenMed/pii-v2" })
	waitFor(t, ns, "svc", v1alpha1.PhaseRollingOut)
	v2 := preload(getDeployment(t, ns, "svc")).ValueFrom.ConfigMapKeyRef.Name
	updateDeploymentStatus(t, ns, "svc", rolloutStuck)
	waitFor(t, ns, "svc", v1alpha1.PhaseRolledBack)
	// The rollback is recorded before the pass that applies it: the
	// Deployment controller reports the generation that restored v1.
	eventually(t, "the v1 pointer restored", func() (bool, string) {
		name := preload(getDeployment(t, ns, "svc")).ValueFrom.ConfigMapKeyRef.Name
		return name == v1, name
	})
	updateDeploymentStatus(t, ns, "svc", rolloutComplete)
	eventually(t, "held at v1", func() (bool, string) {
		m := getModel(t, ns, "svc")
		return condition(m, v1alpha1.StalledCondition) != nil, string(m.Status.Phase)
	})

	// Nothing retries the failed spec by itself.
	time.Sleep(2 * time.Second)
	if name := preload(getDeployment(t, ns, "svc")).ValueFrom.ConfigMapKeyRef.Name; name == v2 {
		t.Fatal("failed spec retried without a reset")
	}

	annotate(t, ns, "svc", v1alpha1.ResetRequestAnnotation, "retry-1")
	eventually(t, "v2 applied again", func() (bool, string) {
		name := preload(getDeployment(t, ns, "svc")).ValueFrom.ConfigMapKeyRef.Name
		return name == v2, name
	})
	updateDeploymentStatus(t, ns, "svc", rolloutComplete)
	m := waitFor(t, ns, "svc", v1alpha1.PhaseReady, v1alpha1.RolloutSucceededReason)
	if m.Status.LastHandledResetAt != "retry-1" || m.Status.ActiveVersion != "OpenMed/pii-v2" {
		t.Errorf("lastHandledResetAt=%q active=%q", m.Status.LastHandledResetAt, m.Status.ActiveVersion)
	}
}

// TestSuspendStopsAllWrites: while suspended the operator writes nothing,
// not even drift corrections; resuming corrects the drift.
func TestSuspendStopsAllWrites(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	op := startOperator(t)
	readyModel(t, ns, "svc")
	patchModel(t, ns, "svc", func(m *v1alpha1.OpenMedModel) { m.Spec.Suspend = true })
	waitFor(t, ns, "svc", v1alpha1.PhaseSuspended)
	time.Sleep(time.Second)
	_, before := op.writes.snapshot()

	d := getDeployment(t, ns, "svc")
	d.Spec.Replicas = ptr.To[int32](4)
	if err := helmClient().Update(ctx, d); err != nil {
		t.Fatal(err)
	}
	patchModel(t, ns, "svc", func(m *v1alpha1.OpenMedModel) { m.Spec.Version = "OpenMed/pii-v9" })
	time.Sleep(3 * time.Second)
	// The only write allowed is the status that reports the suspension for
	// the new generation; the cluster and the event stream stay untouched.
	_, after := op.writes.snapshot()
	for req, n := range after {
		if n == before[req] {
			continue
		}
		if strings.HasSuffix(req, "/openmedmodels/svc/status") {
			t.Logf("status write while suspended: %s x%d", req, n-before[req])
			continue
		}
		t.Errorf("suspended operator wrote %s %d times", req, n-before[req])
	}
	if r := *getDeployment(t, ns, "svc").Spec.Replicas; r != 4 {
		t.Errorf("suspended operator corrected replicas to %d", r)
	}

	patchModel(t, ns, "svc", func(m *v1alpha1.OpenMedModel) { m.Spec.Suspend = false })
	eventually(t, "drift corrected after resume", func() (bool, string) {
		d := getDeployment(t, ns, "svc")
		return *d.Spec.Replicas == 2 && pointerConfigMap(t, d).Data[v1alpha1.PreloadEnvVar] == "OpenMed/pii-v9", "not yet"
	})
}
