package rollout

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// TestStatusNeverLies has one case per way the status could lie (the
// issue "Status that never lies"), each named for it.
func TestStatusNeverLies(t *testing.T) {
	t.Run("an apply error is reported in the same pass", func(t *testing.T) {
		c := newCluster(t)
		c.readyAt(v1)
		c.setVersion(v2)
		c.refresh()
		before := c.obj.Status.DeepCopy()
		for _, kind := range []FailureKind{Transient, Rejected} {
			obs := c.observed()
			obs.Failure = &Failure{Step: StepApply, Kind: kind}
			p := decide(t, c.obj, obs)
			if p.HasChanges() || p.Status.AppliedSpecHash != before.AppliedSpecHash || p.Status.Phase != v1alpha1.PhaseReady {
				t.Fatalf("%s: a failed pass must keep the bookkeeping: %+v", kind, p.Status)
			}
			reason, ks := v1alpha1.ApplyFailedReason, v1alpha1.ReconcilingCondition
			if kind == Rejected {
				reason, ks = v1alpha1.ApplyRejectedReason, v1alpha1.StalledCondition
			}
			if !conditionIs(&p.Status, v1alpha1.ReadyCondition, metav1.ConditionFalse, reason) || !conditionIs(&p.Status, ks, metav1.ConditionTrue, reason) {
				t.Errorf("%s: %v", kind, condSummary(p.Status))
			}
			assertStrings(t, "events", eventReasons(p.Events), []string{reason})
			// The same failure on the next pass is not reported again.
			again := c.obj.DeepCopy()
			again.Status = p.Status
			if p2 := decide(t, again, obs); len(p2.Events) != 0 {
				t.Errorf("%s reported twice: %v", kind, eventReasons(p2.Events))
			}
		}
	})

	t.Run("a transient failure does not mark the generation observed", func(t *testing.T) {
		c := newCluster(t)
		c.readyAt(v1)
		c.setVersion(v2)
		c.refresh()
		obs := c.observed()
		obs.Failure = &Failure{Step: StepManifest, Kind: Transient}
		p := decide(t, c.obj, obs)
		if p.Status.ObservedGeneration == c.obj.Generation {
			t.Fatal("a pass that did nothing marked the new generation observed")
		}
		if got := kstatusOf(t, c.obj, p.Status); got != "InProgress" {
			t.Errorf("kstatus %s", got)
		}
	})

	t.Run("a lost status write after the apply never records a version that did not roll out", func(t *testing.T) {
		c := newCluster(t)
		c.readyAt(v1)
		c.setVersion(v2)
		c.passLosingStatus()
		// The Deployment controller has not seen the new template yet: its
		// status still counts the v1 pods as updated and available.
		if d := c.dep(); d.Status.ObservedGeneration >= d.Generation {
			t.Fatal("setup: the controller must not have observed the new generation")
		}
		p := c.pass()
		if p.Status.Phase == v1alpha1.PhaseReady || p.Status.ActiveVersion == v2 || p.Status.History[0].Version == v2 {
			t.Fatalf("v2 recorded Ready before it rolled out: %s active %s", p.Status.Phase, p.Status.ActiveVersion)
		}
		// Its failure is then the model's, and rolled back.
		c.markFailed()
		if p := c.pass(); p.Status.Phase != v1alpha1.PhaseRolledBack || p.Status.FailedSpecHash != p.Status.DesiredSpecHash {
			t.Fatalf("failure after a lost write: %s %v", p.Status.Phase, condSummary(p.Status))
		}
	})

	t.Run("a lost status write after the rollback apply never applies the failed version again", func(t *testing.T) {
		c := newCluster(t)
		c.readyAt(v1)
		c.setVersion(v2)
		c.pass()
		c.markFailed()
		c.pass() // records the rollback
		c.passLosingStatus()
		if c.pointedVersion() != v1 {
			t.Fatalf("rollback not applied: %s", c.pointedVersion())
		}
		for i := 0; i < 3; i++ {
			p := c.pass()
			if c.pointedVersion() != v1 || p.Status.Phase != v1alpha1.PhaseRolledBack {
				t.Fatalf("pass %d re-applied the failed version: pointed %s phase %s", i, c.pointedVersion(), p.Status.Phase)
			}
		}
	})

	t.Run("resetAt retries a Failed spec with nothing retained", func(t *testing.T) {
		c := newCluster(t)
		c.pass()
		c.markFailed()
		if p := c.pass(); p.Status.Phase != v1alpha1.PhaseFailed {
			t.Fatalf("setup: %s", p.Status.Phase)
		}
		c.now = clock.Add(time.Minute)
		c.annotate(v1alpha1.ResetRequestAnnotation, "retry-1")
		p := c.pass()
		if p.Status.Phase != v1alpha1.PhaseRollingOut || p.Status.RetryStartedAt == nil || containsString(eventReasons(p.Events), v1alpha1.RolloutFailedReason) {
			t.Fatalf("reset: %s %v events %v", p.Status.Phase, condSummary(p.Status), eventReasons(p.Events))
		}
		// The Deployment's old failure predates the retry: still rolling.
		if p := c.pass(); p.Status.Phase != v1alpha1.PhaseRollingOut || p.RequeueAfter == 0 {
			t.Fatalf("the stale failure was read again: %s", p.Status.Phase)
		}
		// Pods that recover make it Ready.
		c.markReady()
		if p := c.pass(); p.Status.Phase != v1alpha1.PhaseReady || p.Status.RetryStartedAt != nil {
			t.Fatalf("recovered retry: %s", p.Status.Phase)
		}

		// Without recovery the retry fails again once its deadline passes.
		r := newCluster(t)
		r.pass()
		r.markFailed()
		r.pass()
		r.now = clock.Add(time.Minute)
		r.annotate(v1alpha1.ResetRequestAnnotation, "retry-1")
		r.pass()
		r.now = r.now.Add(61 * time.Second)
		if p := r.pass(); p.Status.Phase != v1alpha1.PhaseFailed {
			t.Fatalf("retry past its deadline: %s", p.Status.Phase)
		}
	})

	t.Run("suspend together with a spec change does not re-stamp a stale Ready", func(t *testing.T) {
		c := newCluster(t)
		c.readyAt(v1)
		c.editModel(func(m *v1alpha1.OpenMedModel) { m.Spec.Suspend, m.Spec.Version = true, v2 })
		p := c.pass()
		if p.Status.ObservedGeneration == c.obj.Generation || conditionIs(&p.Status, v1alpha1.ReadyCondition, metav1.ConditionTrue, "") {
			t.Fatalf("suspend + edit: og %d gen %d %v", p.Status.ObservedGeneration, c.obj.Generation, condSummary(p.Status))
		}
		if got := kstatusOf(t, c.obj, p.Status); got == "Current" {
			t.Error("kstatus Current for a spec that was never evaluated")
		}
	})

	t.Run("drift corrected with a generation change stamps every condition", func(t *testing.T) {
		c := newCluster(t)
		c.readyAt(v1)
		c.editModel(func(m *v1alpha1.OpenMedModel) { m.Spec.RevisionHistoryLimit = ptr.To[int32](5) })
		c.editDeployment("helm", func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](4) })
		p := c.pass()
		if p.ApplyDeployment == nil || p.Status.ObservedGeneration != c.obj.Generation {
			t.Fatalf("drift pass: apply %v og %d", p.ApplyDeployment != nil, p.Status.ObservedGeneration)
		}
		for _, cond := range p.Status.Conditions {
			if cond.ObservedGeneration != c.obj.Generation {
				t.Errorf("condition %s at generation %d, status at %d", cond.Type, cond.ObservedGeneration, c.obj.Generation)
			}
		}
	})

	t.Run("no timer while waiting for the target", func(t *testing.T) {
		c := newClusterWith(t, func(d *appsv1.Deployment) { d.Name = "elsewhere" })
		if p := c.pass(); p.RequeueAfter != 0 || p.Requeue || p.Status.Phase != v1alpha1.PhasePending {
			t.Fatalf("TargetNotFound requeues after %v", p.RequeueAfter)
		}
		c2 := newClusterWith(t, func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Name = "other" })
		if p := c2.pass(); p.RequeueAfter != 0 {
			t.Fatalf("ContainerNotFound requeues after %v", p.RequeueAfter)
		}
	})

	t.Run("a release only removes the pointer of the model being released", func(t *testing.T) {
		c := newCluster(t)
		c.readyAt(v1)
		// The owner annotations go (kubectl edit); another model that never
		// owned the target is deleted.
		c.editDeployment("kubectl-edit", func(d *appsv1.Deployment) {
			delete(d.Annotations, v1alpha1.ModelResourceAnnotation)
			delete(d.Spec.Template.Annotations, v1alpha1.ModelResourceAnnotation)
		})
		other := c.obj.DeepCopy()
		other.ObjectMeta = metav1.ObjectMeta{Namespace: c.ns, Name: "other", UID: "00000000-0000-4000-8000-000000000999",
			Generation: 1, DeletionTimestamp: &metav1.Time{Time: clock}, Finalizers: []string{v1alpha1.Finalizer}}
		other.Status = v1alpha1.OpenMedModelStatus{}
		p := decide(t, other, Observed{Now: metav1.NewTime(clock), Deployment: c.dep()})
		if p.Release != nil || !p.RemoveFinalizer {
			t.Fatalf("another model's deletion releases this model's pointer: %+v", p.Release)
		}
		// The model that does own it still releases it.
		c.deleteModel()
		if p := c.pass(); p.Release == nil || pointedConfigMap(c.dep(), "openmed-service") != "" {
			t.Fatal("the owner's release was skipped")
		}
	})

	t.Run("ContainerNotFound clears once the container appears", func(t *testing.T) {
		c := newClusterWith(t, func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Name = "other" })
		c.pass()
		c.editDeployment("helm", func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.Containers = append(d.Spec.Template.Spec.Containers, corev1.Container{Name: "openmed-service", Image: "openmed:2.3.0"})
		})
		if p := c.pass(); p.Status.Phase != v1alpha1.PhaseRollingOut || p.ApplyDeployment == nil {
			t.Fatalf("after the container appeared: %s %v", p.Status.Phase, condSummary(p.Status))
		}
	})
}

// TestManifestNameTakenIsReported: a ConfigMap of someone else under the
// manifest's name makes the create fail, and the failure is reported as
// ManifestConflict until the name is free.
func TestManifestNameTakenIsReported(t *testing.T) {
	c := newCluster(t)
	cm := ManifestConfigMap(c.obj, normalize(t, c.obj))
	cm.OwnerReferences = nil
	if err := env.Client.Create(t.Context(), cm); err != nil {
		t.Fatal(err)
	}
	if _, err := c.passWith(true); err == nil {
		t.Fatal("the create of a taken name succeeded")
	}
	c.refresh()
	obs := c.observed()
	obs.Failure = &Failure{Step: StepManifest, Kind: NameTaken}
	p := decide(t, c.obj, obs)
	if !conditionIs(&p.Status, v1alpha1.ReadyCondition, metav1.ConditionFalse, v1alpha1.ManifestConflictReason) ||
		!conditionIs(&p.Status, v1alpha1.ReconcilingCondition, metav1.ConditionTrue, "") {
		t.Fatalf("name taken: %v", condSummary(p.Status))
	}
	c.writeStatus(p.Status)
	if err := env.Client.Delete(t.Context(), cm, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	if p := c.pass(); p.Status.Phase != v1alpha1.PhaseRollingOut {
		t.Fatalf("after the name was freed: %s", p.Status.Phase)
	}
}

func containsString(list []string, s string) bool { return contains(list, s) }
