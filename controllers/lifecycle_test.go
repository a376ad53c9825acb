package controllers_test

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"strings"
	"testing"

	kstatus "github.com/fluxcd/cli-utils/pkg/kstatus/status"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/health"
	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/rollout"
)

// unowned is the part of the Deployment the operator must never change.
func unowned(d *appsv1.Deployment) any {
	c := d.Spec.Template.Spec.Containers[0]
	var env []string
	for _, e := range c.Env {
		if e.Name != v1alpha1.PreloadEnvVar {
			env = append(env, e.Name+"="+e.Value)
		}
	}
	labels := maps.Clone(d.Labels)
	delete(labels, v1alpha1.ClaimedLabel) // the operator's own
	return []any{labels, d.Spec.Selector, d.Spec.Template.Labels, c.Image, env, c.EnvFrom, c.ReadinessProbe, c.Resources, len(d.Spec.Template.Spec.Containers)}
}

// TestLifecycle runs the Kopf operator's test scenarios through the real reconciler:
// first rollout, a version whose rollout exceeds its deadline and is rolled
// back automatically, a failed rollback, manual rollback to a retained
// version only, and deletion releasing the pointer. kstatus is computed on
// the live object at each stage.
func TestLifecycle(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	op := startOperator(t)
	dep := createDeployment(t, chartDeployment(ns, "svc", 2))
	before := unowned(dep)

	m := newModel(ns, "svc", "OpenMed/pii-v1")
	createModel(t, m)

	// First rollout: the pointer is applied, the model is RollingOut.
	got := waitFor(t, ns, "svc", v1alpha1.PhaseRollingOut)
	if s := kstatusOf(t, got); s != kstatus.InProgressStatus {
		t.Errorf("kstatus while rolling out = %s, want InProgress", s)
	}
	if h := argoHealth(t, got); h != health.Progressing {
		t.Errorf("Argo CD health while rolling out = %s, want Progressing", h)
	}
	d := getDeployment(t, ns, "svc")
	cm := pointerConfigMap(t, d)
	if cm.Data[v1alpha1.PreloadEnvVar] != "OpenMed/pii-v1" || cm.Immutable == nil || !*cm.Immutable {
		t.Fatalf("manifest ConfigMap = %+v", cm)
	}
	if d.Annotations[v1alpha1.ModelResourceAnnotation] != ns+"/svc" || d.Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation] == "" {
		t.Fatalf("Deployment not claimed: %v %v", d.Annotations, d.Spec.Template.Annotations)
	}
	updateDeploymentStatus(t, ns, "svc", rolloutComplete)
	got = waitFor(t, ns, "svc", v1alpha1.PhaseReady, v1alpha1.RolloutSucceededReason)
	if s := kstatusOf(t, got); s != kstatus.CurrentStatus {
		t.Errorf("kstatus when Ready = %s, want Current", s)
	}
	if h := argoHealth(t, got); h != health.Healthy {
		t.Errorf("Argo CD health when Ready = %s, want Healthy", h)
	}
	if got.Status.ActiveVersion != "OpenMed/pii-v1" || len(got.Status.History) != 1 {
		t.Errorf("active %q history %d", got.Status.ActiveVersion, len(got.Status.History))
	}
	v1CM := cm.Name

	// A version whose pods never become ready: the deadline passes and the
	// previous pointer is restored.
	patchModel(t, ns, "svc", func(m *v1alpha1.OpenMedModel) { m.Spec.Version = "OpenMed/pii-v2" })
	waitFor(t, ns, "svc", v1alpha1.PhaseRollingOut)
	d = getDeployment(t, ns, "svc")
	if pointerConfigMap(t, d).Data[v1alpha1.PreloadEnvVar] != "OpenMed/pii-v2" {
		t.Fatal("v2 pointer not applied")
	}
	updateDeploymentStatus(t, ns, "svc", rolloutStuck)
	got = waitFor(t, ns, "svc", v1alpha1.PhaseRolledBack, v1alpha1.RolledBackReason)
	// The status that records the rollback is written before the pass that
	// applies it (the decision is durable before the act): wait for the
	// pointer itself.
	eventually(t, "the v1 pointer restored", func() (bool, string) {
		name := preload(getDeployment(t, ns, "svc")).ValueFrom.ConfigMapKeyRef.Name
		return name == v1CM, name
	})
	if s := kstatusOf(t, got); s != kstatus.InProgressStatus {
		t.Errorf("kstatus while the rollback rolls = %s, want InProgress", s)
	}
	updateDeploymentStatus(t, ns, "svc", rolloutComplete)
	eventually(t, "rollback held", func() (bool, string) {
		got = getModel(t, ns, "svc")
		rb := condition(got, v1alpha1.RolledBackCondition)
		return rb != nil && rb.Status == "True" && kstatusOf(t, got) == kstatus.FailedStatus, string(kstatusOf(t, got))
	})
	if got.Status.ActiveVersion != "OpenMed/pii-v1" {
		t.Errorf("active version %q after rollback", got.Status.ActiveVersion)
	}
	if h := argoHealth(t, got); h != health.Degraded {
		t.Errorf("Argo CD health when rolled back = %s, want Degraded", h)
	}

	// Manual rollback accepts retained versions only: an unknown version is
	// rejected and leaves the Deployment alone.
	gen := getDeployment(t, ns, "svc").Generation
	annotate(t, ns, "svc", v1alpha1.RollbackToAnnotation, "OpenMed/never-deployed")
	eventually(t, "manual rollback rejected", func() (bool, string) {
		got = getModel(t, ns, "svc")
		rb := condition(got, v1alpha1.RolledBackCondition)
		return rb != nil && rb.Reason == v1alpha1.RollbackRejectedReason, rb.String()
	})
	if g := getDeployment(t, ns, "svc").Generation; g != gen {
		t.Errorf("rejected manual rollback changed the Deployment (generation %d -> %d)", gen, g)
	}

	// Go back to a spec that works, then ask for the retained v1 by hand.
	annotate(t, ns, "svc", v1alpha1.RollbackToAnnotation, "")
	patchModel(t, ns, "svc", func(m *v1alpha1.OpenMedModel) { m.Spec.Version = "OpenMed/pii-v3" })
	waitFor(t, ns, "svc", v1alpha1.PhaseRollingOut)
	updateDeploymentStatus(t, ns, "svc", rolloutComplete)
	waitFor(t, ns, "svc", v1alpha1.PhaseReady, v1alpha1.RolloutSucceededReason)
	annotate(t, ns, "svc", v1alpha1.RollbackToAnnotation, "OpenMed/pii-v1")
	waitFor(t, ns, "svc", v1alpha1.PhaseRolledBack, v1alpha1.ManualRollbackReason)
	// The Deployment says when the rollback's apply landed, not the status.
	eventually(t, "the manual rollback's pointer", func() (bool, string) {
		name := preload(getDeployment(t, ns, "svc")).ValueFrom.ConfigMapKeyRef.Name
		return name == v1CM, fmt.Sprintf("points at %s, want %s", name, v1CM)
	})
	// The rolled-back pods fail too: the rollback itself fails.
	updateDeploymentStatus(t, ns, "svc", rolloutStuck)
	got = waitFor(t, ns, "svc", v1alpha1.PhaseFailed, v1alpha1.RollbackFailedReason)
	if s := kstatusOf(t, got); s != kstatus.FailedStatus {
		t.Errorf("kstatus after a failed rollback = %s, want Failed", s)
	}
	if h := argoHealth(t, got); h != health.Degraded {
		t.Errorf("Argo CD health after a failed rollback = %s, want Degraded", h)
	}

	// The metrics are recorded once a pass's status write answered: the
	// status can be read a moment before, so wait for them.
	eventually(t, "the rollout and rollback metrics", func() (bool, string) {
		var bad []string
		for trigger, want := range map[string]float64{"automatic": 1, "manual": 1} {
			if n := op.metric(t, "openmed_rollbacks_total", map[string]string{"namespace": ns, "trigger": trigger}); n != want {
				bad = append(bad, fmt.Sprintf("openmed_rollbacks_total{trigger=%q} = %v, want %v", trigger, n, want))
			}
		}
		if n := op.metric(t, "openmed_rollouts_total", map[string]string{"namespace": ns, "result": "succeeded"}); n < 2 {
			bad = append(bad, fmt.Sprintf("openmed_rollouts_total{result=succeeded} = %v, want at least 2", n))
		}
		if n := op.metric(t, "openmed_rollouts_total", map[string]string{"namespace": ns, "result": "failed"}); n != 1 {
			bad = append(bad, fmt.Sprintf("openmed_rollouts_total{result=failed} = %v, want 1", n))
		}
		if n := op.metric(t, "openmed_rollout_duration_seconds", nil); n < 2 {
			bad = append(bad, fmt.Sprintf("rollout duration observed %v times, want at least 2", n))
		}
		return len(bad) == 0, strings.Join(bad, "; ")
	})

	// Fields the operator does not own survived the whole story.
	if after := unowned(getDeployment(t, ns, "svc")); !reflect.DeepEqual(before, after) {
		t.Errorf("unowned fields changed:\n before %v\n after  %v", before, after)
	}

	// Deletion releases the pointer and keeps replicas.
	replicas := *getDeployment(t, ns, "svc").Spec.Replicas
	if err := env.Client.Delete(ctx, getModel(t, ns, "svc")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "model gone", func() (bool, string) {
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "svc"}, &v1alpha1.OpenMedModel{})
		return isNotFound(err), "still there"
	})
	assertReleased(t, ns, "svc", replicas)
	if !contains(eventReasons(t, ns, "svc"), v1alpha1.ModelRemovedReason) {
		t.Errorf("no ModelRemoved event: %v", eventReasons(t, ns, "svc"))
	}
	if after := unowned(getDeployment(t, ns, "svc")); !reflect.DeepEqual(before, after) {
		t.Errorf("unowned fields changed by deletion:\n before %v\n after  %v", before, after)
	}
}

// assertReleased checks a released Deployment: no pointer, none of our
// annotations, no managedFields entry of ours, replicas kept.
func assertReleased(t *testing.T, ns, name string, replicas int32) {
	t.Helper()
	d := getDeployment(t, ns, name)
	if e := preload(d); e != nil {
		t.Errorf("preload env still set: %+v", e)
	}
	if _, ok := d.Annotations[v1alpha1.ModelResourceAnnotation]; ok {
		t.Errorf("owner annotation left: %v", d.Annotations)
	}
	if _, ok := d.Spec.Template.Annotations[v1alpha1.ModelResourceAnnotation]; ok {
		t.Errorf("template owner annotation left: %v", d.Spec.Template.Annotations)
	}
	for _, mf := range d.ManagedFields {
		if mf.Manager == rollout.DefaultFieldManager {
			t.Errorf("managedFields still has %s (%s)", mf.Manager, mf.Operation)
		}
	}
	if ptr.Deref(d.Spec.Replicas, 0) != replicas {
		t.Errorf("replicas = %d, want %d", ptr.Deref(d.Spec.Replicas, 0), replicas)
	}
}

func patchModel(t *testing.T, ns, name string, mutate func(*v1alpha1.OpenMedModel)) {
	t.Helper()
	m := getModel(t, ns, name)
	base := m.DeepCopy()
	mutate(m)
	if err := env.Client.Patch(context.Background(), m, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
}

// annotate sets (or, with "", removes) an annotation on the model.
func annotate(t *testing.T, ns, name, key, value string) {
	t.Helper()
	patchModel(t, ns, name, func(m *v1alpha1.OpenMedModel) {
		if m.Annotations == nil {
			m.Annotations = map[string]string{}
		}
		if value == "" {
			delete(m.Annotations, key)
			return
		}
		m.Annotations[key] = value
	})
}
