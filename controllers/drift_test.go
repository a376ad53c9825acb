package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/controllers"
	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// readyModel creates a chart Deployment and a model targeting it, and drives
// the first rollout to Ready.
func readyModel(t *testing.T, ns, name string) {
	t.Helper()
	createDeployment(t, chartDeployment(ns, name, 2))
	createModel(t, newModel(ns, name, "OpenMed/pii-v1"))
	waitFor(t, ns, name, v1alpha1.PhaseRollingOut)
	updateDeploymentStatus(t, ns, name, rolloutComplete)
	waitFor(t, ns, name, v1alpha1.PhaseReady, v1alpha1.RolloutSucceededReason)
}

// TestDriftByFieldManager: other field managers change fields the operator
// owns; each change is corrected in one pass and the event names the field
// and the manager.
func TestDriftByFieldManager(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	op := startOperator(t)
	readyModel(t, ns, "svc")
	good := getDeployment(t, ns, "svc")
	goodHash := good.Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation]
	goodPointer := *preload(good)

	t.Run("helm changes replicas and drops the env entry", func(t *testing.T) {
		d := getDeployment(t, ns, "svc")
		d.Spec.Replicas = ptr.To[int32](5)
		var kept []corev1.EnvVar
		for _, e := range d.Spec.Template.Spec.Containers[0].Env {
			if e.Name != v1alpha1.PreloadEnvVar {
				kept = append(kept, e)
			}
		}
		d.Spec.Template.Spec.Containers[0].Env = kept
		if err := helmClient().Update(ctx, d); err != nil {
			t.Fatal(err)
		}
		eventually(t, "replicas and env corrected", func() (bool, string) {
			d := getDeployment(t, ns, "svc")
			p := preload(d)
			m := getModel(t, ns, "svc")
			return *d.Spec.Replicas == 2 && p != nil && apiequality.Semantic.DeepEqual(*p, goodPointer), fmt.Sprintf("replicas=%d env=%v phase=%s conds=%v", *d.Spec.Replicas, p, m.Status.Phase, m.Status.Conditions)
		})
		assertDriftReported(t, ns, "svc", "spec.replicas", "helm")
		assertDriftReported(t, ns, "svc", v1alpha1.PreloadEnvVar, "helm")
	})

	t.Run("kubectl-edit changes the manifest hash annotation", func(t *testing.T) {
		d := getDeployment(t, ns, "svc")
		d.Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation] = "sha256:edited"
		if err := client.WithFieldOwner(env.Client, "kubectl-edit").Update(ctx, d); err != nil {
			t.Fatal(err)
		}
		eventually(t, "annotation corrected", func() (bool, string) {
			got := getDeployment(t, ns, "svc").Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation]
			return got == goodHash, got
		})
		assertDriftReported(t, ns, "svc", v1alpha1.ManifestHashAnnotation, "kubectl-edit")
	})

	// After the corrections the Deployment converges and the model is Ready.
	updateDeploymentStatus(t, ns, "svc", rolloutComplete)
	waitFor(t, ns, "svc", v1alpha1.PhaseReady)
	for _, manager := range []string{"helm", "kubectl-edit"} {
		if n := op.metric(t, "openmed_drift_corrections_total", map[string]string{"manager": manager}); n < 1 {
			t.Errorf("openmed_drift_corrections_total{manager=%q} = %v", manager, n)
		}
	}
	// The metric is set once the pass's status write answered: the
	// status can be read a moment before.
	eventually(t, "openmed_model_info for the Ready model", func() (bool, string) {
		n := op.metric(t, "openmed_model_info", map[string]string{"namespace": ns, "name": "svc", "phase": "Ready", "version": "OpenMed/pii-v1"})
		return n == 1, fmt.Sprintf("openmed_model_info = %v, want 1", n)
	})
}

// assertDriftReported waits for a DriftCorrected event naming the field and
// the manager.
func assertDriftReported(t *testing.T, ns, name, field, manager string) {
	t.Helper()
	eventually(t, "DriftCorrected event for "+field, func() (bool, string) {
		msgs := eventMessages(t, ns, name, v1alpha1.DriftCorrectedReason)
		for _, m := range msgs {
			if strings.Contains(m, field) && strings.Contains(m, manager) {
				return true, ""
			}
		}
		return false, strings.Join(msgs, " | ")
	})
}

// TestSteadyStateMakesNoWrites: once Ready, passes triggered by watch events
// (a Deployment status update) write nothing. The updates must cause
// passes (openmed_passes_total{woken_by="event"}), or the test would show
// only that nothing ran.
func TestSteadyStateMakesNoWrites(t *testing.T) {
	ns := newNamespace(t)
	op := startOperatorIn(t, ns)
	readyModel(t, ns, "svc")
	time.Sleep(time.Second) // let the last events and status writes land
	before, _ := op.writes.snapshot()
	passes := func() float64 {
		return op.metric(t, controllers.MetricPasses, map[string]string{"woken_by": "event"})
	}
	passesBefore := passes()

	// Wake the reconciler several times without changing anything it owns.
	for i := 0; i < 5; i++ {
		updateDeploymentStatus(t, ns, "svc", func(d *appsv1.Deployment) {
			rolloutComplete(d)
			d.Status.CollisionCount = ptr.To(int32(i))
		})
		time.Sleep(300 * time.Millisecond)
	}
	time.Sleep(2 * time.Second)
	after, counts := op.writes.snapshot()
	if after != before {
		t.Errorf("steady state made %d writes: %v", after-before, counts)
	}
	// Each update is a watch event for the model's target; the queue may
	// fold two that come together into one pass, never all of them.
	if caused := passes() - passesBefore; caused < 3 {
		t.Errorf("the 5 Deployment status updates caused %v passes, want at least 3: nothing was measured", caused)
	}
	t.Logf("writes during the measured window: %d (total since start %d)", after-before, after)
}
