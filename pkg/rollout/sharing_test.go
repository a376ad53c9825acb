package rollout

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

const preloadField = `spec.template.spec.containers[name="openmed-service"].env[name="OPENMED_SERVICE_PRELOAD_MODELS"]`

// TestSharingTheTarget: the target belongs to other field managers; values
// of theirs that would make the operator's apply invalid are replaced in the
// same pass and named, and their changes of other kinds are not the model's.
func TestSharingTheTarget(t *testing.T) {
	t.Run("a chart's literal preload value is replaced and named", func(t *testing.T) {
		c := newClusterWith(t, func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: v1alpha1.PreloadEnvVar, Value: "OpenMed/chart-default"}}
		})
		p := c.pass()
		if p.Status.Phase != v1alpha1.PhaseRollingOut {
			t.Fatalf("first rollout: %s %v", p.Status.Phase, condSummary(p.Status))
		}
		if e := PreloadEnv(c.dep(), "openmed-service"); e.Value != "" || e.ValueFrom == nil {
			t.Fatalf("env entry %+v", e)
		}
		assertStrings(t, "events", eventReasons(p.Events), []string{v1alpha1.FieldReplacedReason, v1alpha1.RolloutStartedReason})
		if want := preloadField + `.value replaced (set by "helm")`; !strings.Contains(p.Events[0].Message, want) {
			t.Errorf("event %q does not name %s", p.Events[0].Message, want)
		}
		if got := c.obj.Status.Corrections; len(got) != 1 || got[0].Field != preloadField+".value" || got[0].Manager != "helm" {
			t.Errorf("status.corrections %+v", got)
		}
	})

	t.Run("kubectl set env on a Ready model is corrected and named", func(t *testing.T) {
		c := newCluster(t)
		c.readyAt(v1)
		// What `kubectl set env deploy/openmed-service OPENMED_SERVICE_PRELOAD_MODELS=x` sends.
		c.patchDeployment("kubectl-set", types.StrategicMergePatchType,
			`{"spec":{"template":{"spec":{"containers":[{"name":"openmed-service","env":[{"name":"`+v1alpha1.PreloadEnvVar+`","value":"OpenMed/by-hand","valueFrom":null}]}]}}}}`)
		p := c.pass()
		if p.ApplyDeployment == nil || c.pointedVersion() != v1 {
			t.Fatalf("hand-set value not corrected: pointed %q", c.pointedVersion())
		}
		if e := PreloadEnv(c.dep(), "openmed-service"); e.Value != "" {
			t.Fatalf("literal value left: %+v", e)
		}
		var msgs []string
		for _, e := range p.Events {
			msgs = append(msgs, e.Message)
		}
		if all := strings.Join(msgs, " "); !strings.Contains(all, `changed by "kubectl-set"`) || !strings.Contains(all, `.value replaced (set by "kubectl-set")`) {
			t.Errorf("events do not name kubectl-set: %q", msgs)
		}
	})

	t.Run("Recreate on a chart that renders rollingUpdate takes the block over", func(t *testing.T) {
		c := newCluster(t)
		c.editModel(func(m *v1alpha1.OpenMedModel) {
			m.Spec.RolloutStrategy = v1alpha1.RolloutStrategy{Type: v1alpha1.RecreateRolloutStrategyType}
		})
		p := c.pass()
		if p.Takeover == nil || p.Status.Phase != v1alpha1.PhaseRollingOut {
			t.Fatalf("no takeover: %+v", p)
		}
		d := c.dep()
		if d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType || d.Spec.Strategy.RollingUpdate != nil {
			t.Fatalf("strategy %+v", d.Spec.Strategy)
		}
		if !strings.Contains(p.Events[0].Message, `spec.strategy.rollingUpdate replaced (set by "helm")`) {
			t.Errorf("event %q", p.Events[0].Message)
		}
		c.markReady()
		if p := c.pass(); p.Status.Phase != v1alpha1.PhaseReady || p.HasChanges() {
			t.Fatalf("after the takeover: %s %+v", p.Status.Phase, p)
		}
	})

	t.Run("dropping spec.replicas releases them at their live value", func(t *testing.T) {
		c := newCluster(t)
		c.readyAt(v1)
		c.editModel(func(m *v1alpha1.OpenMedModel) { m.Spec.Replicas = nil })
		p := c.pass()
		if !p.ReleaseReplicas || *c.dep().Spec.Replicas != 2 {
			t.Fatalf("release: %v replicas %d", p.ReleaseReplicas, *c.dep().Spec.Replicas)
		}
		if ownedByOperator(c.dep(), DefaultFieldManager).Has(replicasPath) {
			t.Fatal("the operator still owns spec.replicas")
		}
		// The next rollout keeps the live count.
		c.markReady()
		c.pass()
		c.setVersion(v2)
		c.pass()
		if r := *c.dep().Spec.Replicas; r != 2 {
			t.Fatalf("the next rollout reset replicas to %d", r)
		}
	})

	t.Run("another manager's template change is not a model rollout", func(t *testing.T) {
		c := newCluster(t)
		c.readyAt(v1)
		c.editDeployment("helm", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "openmed:2.4.0" })
		c.markRolling()
		p := c.pass()
		if p.HasChanges() || len(p.Events) != 0 || p.Status.Phase != v1alpha1.PhaseReady ||
			!conditionIs(&p.Status, v1alpha1.ReadyCondition, metav1.ConditionFalse, v1alpha1.DeploymentRollingReason) {
			t.Fatalf("helm upgrade: %v events %v", condSummary(p.Status), eventReasons(p.Events))
		}
		c.markReady()
		p = c.pass()
		if len(p.Events) != 0 || !conditionIs(&p.Status, v1alpha1.ReadyCondition, metav1.ConditionTrue, "") || len(p.Status.History) != 1 {
			t.Fatalf("end of the helm rollout: %v events %v", condSummary(p.Status), eventReasons(p.Events))
		}
	})

	t.Run("a forced applier that keeps reverting replicas is an ownership conflict", func(t *testing.T) {
		c := newCluster(t)
		c.readyAt(v1)
		var conflicts int
		for i := 0; i < ConflictThreshold+1; i++ {
			c.now = c.now.Add(time.Minute)
			c.applyAs("kustomize-controller", `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"openmed-service"},"spec":{"replicas":1}}`)
			c.markReady()
			p := c.pass()
			if *c.dep().Spec.Replicas != 2 {
				t.Fatalf("revert %d not corrected", i)
			}
			conflicts += len(p.Conflicts)
			if i == ConflictThreshold-1 {
				assertStrings(t, "events", eventReasons(p.Events), []string{v1alpha1.DriftCorrectedReason, v1alpha1.OwnershipConflictReason})
			}
		}
		if conflicts != 1 {
			t.Errorf("%d conflicts reported, want 1", conflicts)
		}
		st := c.obj.Status
		cond := findCondition(st, v1alpha1.OwnershipConflictCondition)
		if cond == nil || cond.Status != metav1.ConditionTrue || !strings.Contains(cond.Message, `spec.replicas`) ||
			!strings.Contains(cond.Message, `"kustomize-controller"`) || !strings.Contains(cond.Message, "kustomize.toolkit.fluxcd.io/ssa: IfNotPresent") {
			t.Fatalf("conflict condition %+v", cond)
		}
		if !conditionIs(&st, v1alpha1.StalledCondition, metav1.ConditionTrue, v1alpha1.OwnershipConflictReason) {
			t.Errorf("conflict is not Stalled: %v", condSummary(st))
		}
		// An hour without a revert clears it.
		c.markReady()
		c.now = c.now.Add(CorrectionWindow + time.Second)
		if p := c.pass(); findCondition(p.Status, v1alpha1.OwnershipConflictCondition) != nil ||
			!conditionIs(&p.Status, v1alpha1.ReadyCondition, metav1.ConditionTrue, "") {
			t.Fatalf("conflict did not clear: %v", condSummary(p.Status))
		}
	})

	// configMapKeyRef is atomic in the Deployment schema: the operator's
	// apply replaces the chart's whole reference, optional flag included,
	// so the release leaves no half reference behind.
	t.Run("a chart's own optional reference is released into a valid Deployment", func(t *testing.T) {
		c := newClusterWith(t, func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: v1alpha1.PreloadEnvVar, ValueFrom: &corev1.EnvVarSource{
				ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "chart-config"}, Key: "preload", Optional: ptr.To(true)}}}}
		})
		c.readyAt(v1)
		c.deleteModel()
		p := c.pass()
		if p.Release == nil || !p.RemoveFinalizer {
			t.Fatalf("release %+v", p.Release)
		}
		if e := PreloadEnv(c.dep(), "openmed-service"); e == nil || e.ValueFrom != nil {
			t.Fatalf("after the release: %+v", e)
		}
	})

	t.Run("a rolling update strategy keeps its JSON types", func(t *testing.T) {
		c := newCluster(t)
		c.editModel(func(m *v1alpha1.OpenMedModel) {
			m.Spec.RolloutStrategy.MaxSurge = ptr.To(intstr.FromString("50%"))
		})
		c.pass()
		if ru := c.dep().Spec.Strategy.RollingUpdate; ru.MaxSurge.String() != "50%" || ru.MaxUnavailable.IntValue() != 0 {
			t.Fatalf("rollingUpdate %+v", ru)
		}
		c.markReady()
		if p := c.pass(); p.HasChanges() {
			t.Fatalf("the strategy reads as drift: %+v", p.Drift)
		}
	})
}
