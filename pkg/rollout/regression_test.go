package rollout

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// Regression tests for defects of the Python (Kopf) operator this one
// replaces: each test holds the behaviour that fixes one.

// TestRecoverableBlockersRecover: ContainerNotFound and TargetConflict recover by themselves.
func TestRecoverableBlockersRecover(t *testing.T) {
	c := newClusterWith(t, func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Name = "other" })
	if p := c.pass(); p.Status.Phase != v1alpha1.PhaseFailed || p.Status.FailedSpecHash != "" {
		t.Fatalf("ContainerNotFound: %s failed=%q", p.Status.Phase, p.Status.FailedSpecHash)
	}
	c.editDeployment("helm", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Name = "openmed-service" })
	if p := c.pass(); p.Status.Phase != v1alpha1.PhaseRollingOut || p.ApplyDeployment == nil {
		t.Fatalf("after the container came back: %s", p.Status.Phase)
	}

	c = newCluster(t)
	c.editDeployment("helm", func(d *appsv1.Deployment) {
		d.Annotations = map[string]string{v1alpha1.ModelResourceAnnotation: c.ns + "/other"}
	})
	c.pass()
	if p := c.pass(); len(p.Events) != 0 {
		t.Errorf("TargetConflict re-reported: %v", eventReasons(p.Events))
	}
	c.editDeployment("helm", func(d *appsv1.Deployment) { delete(d.Annotations, v1alpha1.ModelResourceAnnotation) })
	if p := c.pass(); p.Status.Phase != v1alpha1.PhaseRollingOut || !p.Claim {
		t.Fatalf("after release by the other owner: %s claim=%v", p.Status.Phase, p.Claim)
	}
}

// TestRejectedManualRollbackRecovers: a rejected manual rollback clears when the annotation goes.
func TestRejectedManualRollbackRecovers(t *testing.T) {
	c := newCluster(t)
	c.readyAt(v1)
	c.annotate(v1alpha1.RollbackToAnnotation, "OpenMed/typo")
	if p := c.pass(); p.Status.Phase != v1alpha1.PhaseFailed || p.Status.FailedSpecHash != "" || p.Status.RollbackRequest != "" {
		t.Fatalf("rejection: %+v", p.Status)
	}
	c.annotate(v1alpha1.RollbackToAnnotation, "")
	if p := c.pass(); p.Status.Phase != v1alpha1.PhaseReady || p.ApplyDeployment != nil {
		t.Fatalf("after removing the annotation: %s %v", p.Status.Phase, condSummary(p.Status))
	}
}

// TestFailedManualRollbackDoesNotLoop: a failed manual rollback does not loop while the annotation stays.
func TestFailedManualRollbackDoesNotLoop(t *testing.T) {
	c := newCluster(t)
	c.readyAt(v1)
	c.readyAt(v2)
	c.annotate(v1alpha1.RollbackToAnnotation, v1)
	c.pass()
	for i := 0; i < 3; i++ {
		c.markFailed()
		p := c.pass()
		if p.ApplyDeployment != nil || p.Status.Phase != v1alpha1.PhaseFailed || p.Status.RollbackCount != 1 {
			t.Fatalf("pass %d: apply=%v phase=%s count=%d", i, p.ApplyDeployment != nil, p.Status.Phase, p.Status.RollbackCount)
		}
	}
}

// TestDeploymentFailureWhileReadyIsNotRolledBack: a Deployment failure while Ready is not blamed on the model; it is
// reported and clears when the Deployment recovers.
func TestDeploymentFailureWhileReadyIsNotRolledBack(t *testing.T) {
	c := newCluster(t)
	c.readyAt(v1)
	c.readyAt(v2)
	// Helm upgrades the image and that rollout fails: not the model's.
	c.editDeployment("helm", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "openmed:broken" })
	c.markFailed()
	p := c.pass()
	if p.ApplyDeployment != nil || p.Status.FailedSpecHash != "" || p.Status.Phase == v1alpha1.PhaseRolledBack ||
		!conditionIs(&p.Status, v1alpha1.DegradedCondition, metav1.ConditionTrue, v1alpha1.DeploymentUnavailableReason) {
		t.Fatalf("failure while Ready: %+v", p)
	}
	// A later replicas-only change of the model is no rollout: the old
	// failure is still not blamed on it.
	c.editModel(func(m *v1alpha1.OpenMedModel) { m.Spec.Replicas = ptrTo(int32(3)) })
	c.pass()
	c.markFailed()
	if p := c.pass(); p.Status.FailedSpecHash != "" || p.Status.Phase != v1alpha1.PhaseReady || p.ApplyDeployment != nil {
		t.Fatalf("old failure blamed on a replicas change: %s %v", p.Status.Phase, condSummary(p.Status))
	}
	c.markReady()
	if p := c.pass(); !conditionIs(&p.Status, v1alpha1.ReadyCondition, metav1.ConditionTrue, v1alpha1.RolloutSucceededReason) || len(p.Events) != 0 {
		t.Fatalf("after recovery: %v events %v", condSummary(p.Status), eventReasons(p.Events))
	}
}

// TestDeletionFinishesWhenSpecInvalidOrTargetGone: deletion finishes with an invalid stored spec and with the target gone.
func TestDeletionFinishesWhenSpecInvalidOrTargetGone(t *testing.T) {
	c := newCluster(t)
	c.readyAt(v1)
	c.deleteModel()
	c.override = func(m *v1alpha1.OpenMedModel) {
		m.Spec.Tier = "Huge"
		m.Spec.RolloutStrategy.MaxSurge = nil
	}
	if p := c.pass(); !p.RemoveFinalizer || p.Release == nil || len(c.configMaps()) != 0 {
		t.Fatalf("invalid spec blocks deletion: %+v", p)
	}
	c = newCluster(t)
	c.readyAt(v1)
	c.deleteTarget()
	c.deleteModel()
	if p := c.pass(); !p.RemoveFinalizer || p.Release != nil || len(c.configMaps()) != 0 {
		t.Fatalf("missing target blocks deletion: %+v", p)
	}
}

// TestContentAddressedConfigMaps: manifest ConfigMaps are content-addressed and immutable; the old one
// stays while the rollout is in flight and goes once it settles.
func TestContentAddressedConfigMaps(t *testing.T) {
	c := newCluster(t)
	c.readyAt(v1)
	old := pointedConfigMap(c.dep(), "openmed-service")
	c.setVersion(v2)
	p := c.pass()
	if len(p.EnsureConfigMaps) != 1 || p.EnsureConfigMaps[0].Name == old || !*p.EnsureConfigMaps[0].Immutable {
		t.Fatalf("new version must get a new immutable ConfigMap: %+v", p.EnsureConfigMaps)
	}
	if _, ok := c.configMaps()[old]; !ok || len(p.PruneConfigMaps) != 0 {
		t.Fatal("old ConfigMap pruned mid-rollout")
	}
	// Old pods keep loading v1 from the old name throughout.
	if c.configMaps()[old].Data[v1alpha1.PreloadEnvVar] != v1 {
		t.Fatal("old ConfigMap changed")
	}
	// Settled with revisionHistoryLimit 1: v1 is no longer retained.
	c.editModel(func(m *v1alpha1.OpenMedModel) { m.Spec.RevisionHistoryLimit = ptrTo(int32(1)) })
	c.markReady()
	if p := c.pass(); !reflect.DeepEqual(p.PruneConfigMaps, []string{old}) {
		t.Fatalf("prune %v, want [%s]", p.PruneConfigMaps, old)
	}
}

// TestUnsetReplicasAreLeftAlone: spec.replicas is optional; unset, the operator leaves replicas alone
// and waits for the Deployment's own count.
func TestUnsetReplicasAreLeftAlone(t *testing.T) {
	c := newClusterWith(t, func(d *appsv1.Deployment) { d.Spec.Replicas = ptrTo(int32(4)) })
	c.editModel(func(m *v1alpha1.OpenMedModel) { m.Spec.Replicas = nil })
	p := c.pass()
	if _, ok := p.ApplyDeployment.Object["spec"].(map[string]any)["replicas"]; ok {
		t.Fatal("intent sets replicas")
	}
	if *c.dep().Spec.Replicas != 4 {
		t.Fatal("replicas changed")
	}
	// An HPA scales (through the scale subresource): not drift.
	c.markReady()
	c.pass()
	c.scaleAs("kube-controller-manager", 7)
	c.markReady()
	if p := c.pass(); p.ApplyDeployment != nil || p.Status.Phase != v1alpha1.PhaseReady {
		t.Fatalf("HPA scaling treated as drift: %+v", p)
	}
}

// TestTransientUnavailability: transient unavailability of a Ready resource is DeploymentUnavailable,
// not a rollout, and RolloutSucceeded is reported again on recovery.
func TestTransientUnavailability(t *testing.T) {
	c := newCluster(t)
	c.readyAt(v1)
	c.markUnavailable()
	p := c.pass()
	if p.Status.Phase == v1alpha1.PhaseRollingOut || !conditionIs(&p.Status, v1alpha1.ReadyCondition, metav1.ConditionFalse, v1alpha1.DeploymentUnavailableReason) {
		t.Fatalf("unavailable: %s %v", p.Status.Phase, condSummary(p.Status))
	}
	// Recovery is not a rollout: Ready again, no RolloutSucceeded.
	c.markReady()
	p = c.pass()
	if !conditionIs(&p.Status, v1alpha1.ReadyCondition, metav1.ConditionTrue, v1alpha1.RolloutSucceededReason) || len(p.Events) != 0 {
		t.Fatalf("recovery: %v events %v", condSummary(p.Status), eventReasons(p.Events))
	}
}

// TestRetargetReleasesOldTarget: a retarget releases the old Deployment, and a rollback never patches
// another Deployment than the one being monitored.
func TestRetargetReleasesOldTarget(t *testing.T) {
	c := newCluster(t)
	c.readyAt(v1)
	c.recreateTarget("openmed-service-b")
	c.editModel(func(m *v1alpha1.OpenMedModel) {
		m.Spec.TargetRef.Name = "openmed-service-b"
		m.Spec.Version = v2
	})
	if desired, previous := TargetNames(c.obj); desired != "openmed-service-b" || !slices.Equal(previous, []string{"openmed-service"}) {
		t.Fatalf("TargetNames = %s, %v", desired, previous)
	}
	p := c.pass()
	if len(p.ReleasePrevious) != 1 || p.ReleasePrevious[0].DeploymentName != "openmed-service" || p.ApplyDeployment.GetName() != "openmed-service-b" {
		t.Fatalf("retarget plan: %+v", p)
	}
	if !slices.Equal(p.ClaimTargets, []string{"openmed-service-b"}) {
		t.Fatalf("the new target is not recorded ahead of the write: %v", p.ClaimTargets)
	}
	old := c.dep()
	if old.Annotations[v1alpha1.ModelResourceAnnotation] != "" || pointedConfigMap(old, "openmed-service") != "" {
		t.Fatal("old target still points at the manifest")
	}
	// The status lists the old target until a pass finds nothing of the
	// operator left on it: an interrupted release is found again from there.
	if !slices.Equal(c.obj.Status.ClaimedTargets, []string{"openmed-service", "openmed-service-b"}) {
		t.Fatalf("claimedTargets %v in the pass that released the old target", c.obj.Status.ClaimedTargets)
	}
	if p := c.pass(); len(p.ReleasePrevious) != 0 || c.obj.Status.TargetName != "openmed-service-b" ||
		!slices.Equal(c.obj.Status.ClaimedTargets, []string{"openmed-service-b"}) {
		t.Fatalf("after the release: release %v, targetName %s, claimed %v", p.ReleasePrevious, c.obj.Status.TargetName, c.obj.Status.ClaimedTargets)
	}
	// v2 fails on the new target: the rollback restores v1 there.
	c.setStatusOf("openmed-service-b", func(d *appsv1.Deployment) { c.failedStatusOf(d) })
	c.pass()
	p = c.pass()
	if p.Status.Phase != v1alpha1.PhaseRolledBack || p.ApplyDeployment.GetName() != "openmed-service-b" {
		t.Fatalf("rollback after retarget: %s", p.Status.Phase)
	}
	if pointedConfigMap(c.dep(), "openmed-service") != "" {
		t.Fatal("the rollback pointed the old target again")
	}
}

// TestHistoryOnePerVersion: history holds one entry per version, so a replicas-only change does
// not push the previous version out of the rollback candidates.
func TestHistoryOnePerVersion(t *testing.T) {
	c := newCluster(t)
	c.readyAt(v1)
	c.readyAt(v2)
	c.editModel(func(m *v1alpha1.OpenMedModel) { m.Spec.Replicas = ptrTo(int32(3)) })
	c.pass()
	c.markReady()
	c.pass()
	st := c.obj.Status
	if len(st.History) != 2 || st.History[0].Version != v2 || st.History[1].Version != v1 ||
		*st.History[0].Spec.Replicas != 3 || st.PreviousSuccessfulSpec.Version != v1 {
		t.Fatalf("history %+v", st.History)
	}
	// Any retained version can be requested, not only the last two.
	c.readyAt(v3)
	c.annotate(v1alpha1.RollbackToAnnotation, v1)
	if p := c.pass(); p.Status.Phase != v1alpha1.PhaseRolledBack || c.pointedVersion() != v1 {
		t.Fatalf("manual rollback to the third version: %s", p.Status.Phase)
	}
}

// TestManualRollbackDoesNotFailDesiredSpec: a manual rollback does not mark the healthy desired spec as failed;
// removing the annotation rolls the desired spec out again.
func TestManualRollbackDoesNotFailDesiredSpec(t *testing.T) {
	c := newCluster(t)
	c.readyAt(v1)
	c.readyAt(v2)
	c.annotate(v1alpha1.RollbackToAnnotation, v1)
	p := c.pass()
	if p.Status.FailedSpecHash != "" {
		t.Fatal("manual rollback marked the desired spec failed")
	}
	c.markReady()
	p = c.pass()
	if ready := findCondition(p.Status, v1alpha1.ReadyCondition); !strings.Contains(ready.Message, "remove the annotation") {
		t.Errorf("held status does not say how to release it: %q", ready.Message)
	}
	c.annotate(v1alpha1.RollbackToAnnotation, "")
	if p := c.pass(); p.Status.Phase != v1alpha1.PhaseRollingOut || c.pointedVersion() != v2 {
		t.Fatalf("release of the hold: %s pointed %s", p.Status.Phase, c.pointedVersion())
	}
}

// TestObservedGenerationAdvances: observedGeneration advances when the generation changes without a
// spec hash change (a field set to its default), in every state.
func TestObservedGenerationAdvances(t *testing.T) {
	c := newCluster(t)
	c.readyAt(v1)
	c.editModel(func(m *v1alpha1.OpenMedModel) { m.Spec.RevisionHistoryLimit = ptrTo(int32(9)) })
	if p := c.pass(); p.Status.ObservedGeneration != c.obj.Generation {
		t.Fatalf("Ready: observedGeneration %d", p.Status.ObservedGeneration)
	}
	c.editModel(func(m *v1alpha1.OpenMedModel) { m.Spec.RolloutStrategy.RollbackOnFailure = ptrTo(false) })
	c.failRollout(v2)
	c.editModel(func(m *v1alpha1.OpenMedModel) { m.Spec.RevisionHistoryLimit = ptrTo(int32(8)) })
	if p := c.pass(); p.Status.Phase != v1alpha1.PhaseFailed || p.Status.ObservedGeneration != c.obj.Generation {
		t.Fatalf("Failed: %s observedGeneration %d", p.Status.Phase, p.Status.ObservedGeneration)
	}
}

// TestConditionConventions: lastTransitionTime changes only with the status, other writers'
// conditions are kept, and Unknown is used where the state is not known.
func TestConditionConventions(t *testing.T) {
	c := newCluster(t)
	c.pass()
	c.refresh()
	st := c.obj.Status.DeepCopy()
	st.Conditions = append(st.Conditions, metav1.Condition{
		Type: "Audited", Status: metav1.ConditionTrue, Reason: "Reviewed", Message: "x", ObservedGeneration: 1, LastTransitionTime: metav1.NewTime(clock),
	})
	c.writeStatus(*st)
	before := findCondition(c.obj.Status, v1alpha1.ReadyCondition).LastTransitionTime
	c.now = clock.Add(time.Hour)
	c.markReady()
	p := c.pass()
	ready := findCondition(p.Status, v1alpha1.ReadyCondition)
	if ready.Status != metav1.ConditionTrue || ready.LastTransitionTime.Equal(&before) {
		t.Errorf("Ready %s at %v: a status change must move lastTransitionTime", ready.Status, ready.LastTransitionTime)
	}
	degraded := findCondition(p.Status, v1alpha1.DegradedCondition)
	if !degraded.LastTransitionTime.Equal(&before) {
		t.Errorf("Degraded kept its status but lastTransitionTime moved to %v", degraded.LastTransitionTime)
	}
	if findCondition(p.Status, "Audited") == nil {
		t.Error("another writer's condition was dropped")
	}
	c.override = func(m *v1alpha1.OpenMedModel) { m.Spec.Tier = "Huge" }
	p = c.decide()
	if !conditionIs(&p.Status, v1alpha1.RolledBackCondition, metav1.ConditionUnknown, v1alpha1.InvalidSpecReason) {
		t.Errorf("invalid spec: %v", condSummary(p.Status))
	}
}

// TestDeletionOfNeverClaimedTarget: deleting a resource that never claimed its target warns about nothing.
func TestDeletionOfNeverClaimedTarget(t *testing.T) {
	c := newClusterWith(t, func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Name = "other" })
	c.pass()
	c.deleteModel()
	p := c.pass()
	if p.Release != nil || len(p.Events) != 0 || !p.RemoveFinalizer {
		t.Fatalf("never-claimed target: %+v", p)
	}
}

// TestRollbackBookkeeping: rollbackRequest names the restored version and rollbackCount restarts
// when a desired spec becomes Ready.
func TestRollbackBookkeeping(t *testing.T) {
	c := newCluster(t)
	c.readyAt(v1)
	c.setVersion(v2)
	c.pass()
	c.markFailed()
	p := c.pass()
	if p.Status.RollbackRequest != "automatic:"+v1 || p.Status.RollbackCount != 1 {
		t.Fatalf("request %q count %d", p.Status.RollbackRequest, p.Status.RollbackCount)
	}
	c.pass()
	c.readyAt(v3)
	if c.obj.Status.RollbackCount != 0 || c.obj.Status.RollbackRequest != "" {
		t.Fatalf("after Ready: count %d request %q", c.obj.Status.RollbackCount, c.obj.Status.RollbackRequest)
	}
}

// TestCorruptStatusIsNotInvalidSpec: a hand-edited or corrupt retained spec in status is not reported as
// an invalid spec; the desired spec still rolls out.
func TestCorruptStatusIsNotInvalidSpec(t *testing.T) {
	c := newCluster(t)
	// The CRD's status schema rejects such a write today; a status stored by
	// an older CRD, or edited in etcd, can still hold it.
	c.override = func(m *v1alpha1.OpenMedModel) {
		m.Status.LastSuccessfulSpec = &v1alpha1.NormalizedSpec{}
		m.Status.History = []v1alpha1.HistoryEntry{{Version: "", SpecHash: "garbage", ReadyAt: metav1.NewTime(clock)}}
	}
	p := c.decide()
	c.override = nil
	if p.Status.Phase != v1alpha1.PhaseRollingOut || conditionIs(&p.Status, v1alpha1.ReadyCondition, metav1.ConditionFalse, v1alpha1.InvalidSpecReason) ||
		len(p.Status.History) != 0 || p.Status.LastSuccessfulSpec != nil {
		t.Fatalf("corrupt status: %s %v history %+v", p.Status.Phase, condSummary(p.Status), p.Status.History)
	}
	c.pass()
	c.markReady()
	if p := c.pass(); p.Status.Phase != v1alpha1.PhaseReady || p.Status.History[0].Version != v1 {
		t.Fatalf("Ready with corrupt history: %+v", p.Status.History)
	}
}

// resetAt retries a failed desired spec once, without a spec change.
func TestResetAtRetriesFailedSpec(t *testing.T) {
	c := newCluster(t)
	c.readyAt(v1)
	c.failRollout(v2)
	c.markReady()
	c.pass()
	c.annotate(v1alpha1.ResetRequestAnnotation, "2026-08-18T13:00:00Z")
	p := c.pass()
	if p.Status.Phase != v1alpha1.PhaseRollingOut || c.pointedVersion() != v2 || p.Status.LastHandledResetAt != "2026-08-18T13:00:00Z" {
		t.Fatalf("reset: %s pointed %s", p.Status.Phase, c.pointedVersion())
	}
	// Failing again holds it again; the same resetAt value does not retry.
	c.markFailed()
	c.pass()
	c.pass()
	c.markReady()
	if p := c.pass(); p.Status.Phase != v1alpha1.PhaseRolledBack || c.pointedVersion() != v1 {
		t.Fatalf("second failure: %s pointed %s", p.Status.Phase, c.pointedVersion())
	}
}

// requestedAt is recorded; it changes nothing else.
func TestRequestedAtIsHandled(t *testing.T) {
	c := newCluster(t)
	c.readyAt(v1)
	c.annotate("reconcile.fluxcd.io/requestedAt", "now-1")
	in := c.obj.Status.DeepCopy()
	p := c.pass()
	in.LastHandledReconcileAt = "now-1"
	if p.HasChanges() || !apiequality.Semantic.DeepEqual(*in, p.Status) {
		t.Fatalf("requestedAt: %+v", p)
	}
}

// Drift is attributed to the field manager that set the field's value, and
// a removal, which managedFields cannot attribute, names nobody.
func TestDriftAttribution(t *testing.T) {
	c := newCluster(t)
	c.readyAt(v1)
	c.editDeployment("helm", func(d *appsv1.Deployment) { d.Spec.Replicas = ptrTo(int32(3)) })
	p := c.pass()
	want := []Drift{{Field: "spec.replicas", Managers: []string{"helm"}}}
	if !reflect.DeepEqual(p.Drift, want) || p.Drift[0].String() != `spec.replicas changed by "helm"` {
		t.Fatalf("drift %v", p.Drift)
	}
	if !strings.Contains(p.Events[0].Message, `spec.replicas changed by "helm"`) {
		t.Errorf("event %q", p.Events[0].Message)
	}
	if got := c.obj.Status.Corrections; len(got) != 1 || got[0].Field != "spec.replicas" || got[0].Manager != "helm" || got[0].Count != 1 {
		t.Errorf("status.corrections %+v", got)
	}

	c.markReady()
	c.pass()
	c.editDeployment("kubectl-edit", func(d *appsv1.Deployment) {
		removeEnv(&d.Spec.Template.Spec.Containers[0])
		d.Spec.Template.Spec.Containers[0].Image = "openmed:2.3.1"
	})
	p = c.pass()
	env := `spec.template.spec.containers[name="openmed-service"].env[name="OPENMED_SERVICE_PRELOAD_MODELS"]`
	if len(p.Drift) != 1 || p.Drift[0].Field != env || len(p.Drift[0].Managers) != 0 || !p.Drift[0].Removed ||
		p.Drift[0].String() != env+" removed (manager unknown)" {
		t.Fatalf("removed env entry: %+v", p.Drift)
	}
}

// TestKopfStatusFormatMigrates: a status written in the Kopf operator's
// format (two retained slots, no history) is read as a history, so its
// versions stay rollback targets.
func TestKopfStatusFormatMigrates(t *testing.T) {
	c := newCluster(t)
	c.readyAt(v1)
	c.readyAt(v2)
	st := c.obj.Status.DeepCopy()
	st.History = nil
	c.writeStatus(*st)
	c.annotate(v1alpha1.RollbackToAnnotation, v1)
	p := c.pass()
	if p.Status.Phase != v1alpha1.PhaseRolledBack || c.pointedVersion() != v1 || len(p.Status.History) != 2 {
		t.Fatalf("legacy status: %s pointed %s history %d", p.Status.Phase, c.pointedVersion(), len(p.Status.History))
	}
}

// While held by a rollback, fields the operator owns are still corrected.
func TestRollbackHoldCorrectsDrift(t *testing.T) {
	c := newCluster(t)
	c.readyAt(v1)
	c.failRollout(v2)
	c.markReady()
	c.pass()
	c.editDeployment("kubectl-edit", func(d *appsv1.Deployment) { removeEnv(&d.Spec.Template.Spec.Containers[0]) })
	p := c.pass()
	if p.ApplyDeployment == nil || p.Status.Phase != v1alpha1.PhaseRolledBack || c.pointedVersion() != v1 {
		t.Fatalf("drift while held: %s pointed %s", p.Status.Phase, c.pointedVersion())
	}
	assertStrings(t, "events", eventReasons(p.Events), []string{v1alpha1.DriftCorrectedReason})
}
