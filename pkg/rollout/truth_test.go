package rollout

import (
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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

	t.Run("a rejection's detail is bounded in the status and the event", func(t *testing.T) {
		c := newCluster(t)
		c.readyAt(v1)
		c.setVersion(v2)
		c.refresh()
		obs := c.observed()
		detail := strings.Repeat("spec.x: Invalid value: ü; ", 200) // 5,400 bytes
		obs.Failure = &Failure{Step: StepApply, Kind: Rejected, Detail: detail}
		p := decide(t, c.obj, obs)
		ready := apimeta.FindStatusCondition(p.Status.Conditions, v1alpha1.ReadyCondition)
		if ready == nil || len(p.Events) != 1 {
			t.Fatalf("Ready %+v, events %v", ready, eventReasons(p.Events))
		}
		// The fixed text around the detail and the fixture's Deployment
		// name take under 200 bytes.
		limit := MaxFailureDetail + 200
		for _, m := range []string{ready.Message, kstatusMessage(p.Status), p.Events[0].Message} {
			if len(m) > limit || !strings.Contains(m, ": spec.x: Invalid value: ü; spec.x") || !utf8.ValidString(m) {
				t.Errorf("%d bytes (limit %d): %q", len(m), limit, m)
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
		if p.Status.Phase != v1alpha1.PhaseRollingOut || p.Status.RetryStartedAt == nil || slices.Contains(eventReasons(p.Events), v1alpha1.RolloutFailedReason) {
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

// TestReviewFindings has one case per finding of the line-by-line review
// of the pass (issue "Scaling is not failing", item 4), each failing before
// its fix. The ones whose cause is the API server (cache lag, lost answers,
// 409s) are in controllers/review_test.go.
func TestReviewFindings(t *testing.T) {
	t.Run("a replicas-only change is not Ready before the Deployment controller observed it", func(t *testing.T) {
		c := newCluster(t)
		c.readyAt(v1)
		c.editModel(func(m *v1alpha1.OpenMedModel) { m.Spec.Replicas = ptr.To[int32](4) })
		p := c.pass()
		if p.ApplyDeployment == nil || c.dep().Status.ObservedGeneration >= c.dep().Generation {
			t.Fatalf("setup: apply %v, Deployment observed %d of %d", p.ApplyDeployment != nil, c.dep().Status.ObservedGeneration, c.dep().Generation)
		}
		if conditionIs(&p.Status, v1alpha1.ReadyCondition, metav1.ConditionTrue, "") {
			t.Fatalf("Ready=True for generation %d in the pass that applied it: %v", c.obj.Generation, condSummary(p.Status))
		}
		if p.Status.Phase != v1alpha1.PhaseReady || p.Status.ActiveVersion != v1 {
			t.Errorf("a capacity change is not a rollout: %s active %s", p.Status.Phase, p.Status.ActiveVersion)
		}
		// The controller observes the new generation and brings the pods up.
		c.markScaling(2)
		if p := c.pass(); !conditionIs(&p.Status, v1alpha1.ReadyCondition, metav1.ConditionFalse, v1alpha1.ScalingReason) {
			t.Fatalf("scaling: %v", condSummary(p.Status))
		}
		c.markReady()
		if p := c.pass(); !conditionIs(&p.Status, v1alpha1.ReadyCondition, metav1.ConditionTrue, "") || slices.Contains(eventReasons(p.Events), v1alpha1.RolloutSucceededReason) {
			t.Fatalf("scaled: %v events %v", condSummary(p.Status), eventReasons(p.Events))
		}
	})

	t.Run("a transient failure does not outlive the pass that recovered", func(t *testing.T) {
		c := newCluster(t)
		c.readyAt(v1)
		c.setVersion(v2)
		c.pass()
		// Mid-rollout, `kubectl set env` takes the pointer away; the
		// correcting apply takes effect, but its answer is lost: the pass
		// reports ApplyFailed.
		c.patchDeployment("kubectl-set", types.StrategicMergePatchType,
			`{"spec":{"template":{"spec":{"containers":[{"name":"openmed-service","env":[{"name":"`+v1alpha1.PreloadEnvVar+`","value":"x","valueFrom":null}]}]}}}}`)
		c.refresh()
		obs := c.observed()
		plan := decide(t, c.obj, obs)
		if err := c.execute(obs, plan); err != nil {
			t.Fatal(err)
		}
		obs.Failure = &Failure{Step: StepApply, Kind: Transient}
		c.writeStatus(decide(t, c.obj, obs).Status)
		// The next pass finds the pointer in place and the rollout going.
		c.markRolling()
		p := c.pass()
		for _, typ := range []string{v1alpha1.ReadyCondition, v1alpha1.ReconcilingCondition} {
			if cond := apimeta.FindStatusCondition(p.Status.Conditions, typ); cond == nil || cond.Reason == v1alpha1.ApplyFailedReason ||
				strings.Contains(cond.Message, "failed") {
				t.Errorf("%s after recovery: %+v", typ, cond)
			}
		}
		if !strings.HasPrefix(kstatusMessage(p.Status), "Rolling out "+v2) {
			t.Errorf("message after recovery: %q", kstatusMessage(p.Status))
		}
	})

	t.Run("the operator's own unrecorded apply is not drift", func(t *testing.T) {
		// v1 -> v2 -> v1: the pass that applies v2 loses its status write
		// (a crash, or the revert's edit won the race for the model), so
		// the status still says v1 is applied and Ready while the
		// Deployment carries the operator's own v2 pointer.
		c := newCluster(t)
		c.readyAt(v1)
		c.setVersion(v2)
		c.passLosingStatus()
		if got := c.pointedVersion(); got != v2 {
			t.Fatalf("setup: the Deployment points at %q", got)
		}
		c.setVersion(v1)
		p := c.pass()
		if len(p.Drift) != 0 || p.ApplyDeployment == nil {
			t.Errorf("drift %v, apply %v: the operator's own write is no other manager's change", p.Drift, p.ApplyDeployment != nil)
		}
		assertStrings(t, "events", eventReasons(p.Events), []string{v1alpha1.RolloutStartedReason})
		if !conditionIs(&p.Status, v1alpha1.ProgressingCondition, metav1.ConditionTrue, v1alpha1.SpecChangedReason) ||
			conditionIs(&p.Status, v1alpha1.ReadyCondition, metav1.ConditionTrue, "") {
			t.Errorf("conditions %v, want the rollout of the changed spec", condSummary(p.Status))
		}
		if got := c.pointedVersion(); got != v1 {
			t.Errorf("the Deployment points at %q after the pass, want %s", got, v1)
		}
		// Another manager's change of the same fields is still drift,
		// and named.
		c.markReady()
		c.pass()
		c.patchDeployment("kubectl-set", types.StrategicMergePatchType,
			`{"spec":{"template":{"metadata":{"annotations":{"`+v1alpha1.ManifestHashAnnotation+`":"sha256:other"}}}}}`)
		p = c.pass()
		if len(p.Drift) != 1 || len(p.Drift[0].Managers) != 1 || p.Drift[0].Managers[0] != "kubectl-set" {
			t.Errorf("drift %v, want the template hash changed by kubectl-set", p.Drift)
		}
	})

	t.Run("a blocked pass does not use up resetAt", func(t *testing.T) {
		c := newCluster(t)
		c.pass()
		c.markFailed()
		if p := c.pass(); p.Status.Phase != v1alpha1.PhaseFailed {
			t.Fatalf("setup: %s", p.Status.Phase)
		}
		// The container is renamed (a chart change), so the pass is
		// blocked, and a retry is asked for meanwhile.
		c.editDeployment("helm", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Name = "renamed" })
		c.now = clock.Add(time.Minute)
		c.annotate(v1alpha1.ResetRequestAnnotation, "retry-1")
		if p := c.pass(); p.Status.LastHandledResetAt != "" || p.Status.FailedSpecHash == "" {
			t.Fatalf("the blocked pass (%v) used up the retry: lastHandledResetAt %q failedSpecHash %q",
				condSummary(p.Status), p.Status.LastHandledResetAt, p.Status.FailedSpecHash)
		}
		c.editDeployment("helm", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Name = "openmed-service" })
		c.markFailed() // the controller reports the failed template again
		c.now = clock.Add(2 * time.Minute)
		p := c.pass()
		if p.Status.Phase != v1alpha1.PhaseRollingOut || p.Status.LastHandledResetAt != "retry-1" || slices.Contains(eventReasons(p.Events), v1alpha1.RolloutFailedReason) {
			t.Fatalf("the unblocked pass: %s %v events %v", p.Status.Phase, condSummary(p.Status), eventReasons(p.Events))
		}
	})

	t.Run("a stalled failure does not stamp older verdicts with the new generation", func(t *testing.T) {
		c := newCluster(t)
		c.readyAt(v1)
		c.failRollout(v2)
		c.markReady()
		if p := c.pass(); !conditionIs(&p.Status, v1alpha1.RolledBackCondition, metav1.ConditionTrue, "") {
			t.Fatalf("setup: %v", condSummary(p.Status))
		}
		c.setVersion(v3)
		obs := c.observed()
		obs.Failure = &Failure{Step: StepApply, Kind: Rejected, Detail: "spec.progressDeadlineSeconds: Invalid value: 8: must be greater than minReadySeconds"}
		p := decide(t, c.obj, obs)
		if p.Status.ObservedGeneration != c.obj.Generation {
			t.Fatalf("a rejected apply marks the generation observed: og %d", p.Status.ObservedGeneration)
		}
		for _, typ := range []string{v1alpha1.RolledBackCondition, v1alpha1.ProgressingCondition} {
			if cond := apimeta.FindStatusCondition(p.Status.Conditions, typ); cond == nil || cond.Status != metav1.ConditionUnknown {
				t.Errorf("%s for generation %d, which the pass never judged: %+v", typ, c.obj.Generation, cond)
			}
		}
		ready := apimeta.FindStatusCondition(p.Status.Conditions, v1alpha1.ReadyCondition)
		for _, m := range []string{ready.Message, kstatusMessage(p.Status), p.Events[0].Message} {
			if !strings.Contains(m, "spec.progressDeadlineSeconds: Invalid value: 8: must be greater than minReadySeconds") {
				t.Errorf("the message does not say what to fix: %q", m)
			}
		}
	})
}
