package rollout

import (
	"reflect"
	"strings"
	"testing"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// One regression test per reference bug the contract fixes (reference §10).

// B2: ContainerNotFound and TargetConflict recover by themselves.
func TestB2RecoverableBlockersRecover(t *testing.T) {
	c := newCluster(t)
	c.dep.Spec.Template.Spec.Containers[0].Name = "other"
	if p := c.pass(); p.Status.Phase != v1alpha1.PhaseFailed || p.Status.FailedSpecHash != "" {
		t.Fatalf("ContainerNotFound: %s failed=%q", p.Status.Phase, p.Status.FailedSpecHash)
	}
	c.dep.Spec.Template.Spec.Containers[0].Name = "openmed-service"
	if p := c.pass(); p.Status.Phase != v1alpha1.PhaseRollingOut || p.ApplyDeployment == nil {
		t.Fatalf("after the container came back: %s", p.Status.Phase)
	}

	c = newCluster(t)
	c.dep.Annotations = map[string]string{v1alpha1.ModelResourceAnnotation: "synthetic/other"}
	c.pass()
	if p := c.pass(); len(p.Events) != 0 {
		t.Errorf("TargetConflict re-reported: %v", eventReasons(p.Events))
	}
	delete(c.dep.Annotations, v1alpha1.ModelResourceAnnotation)
	if p := c.pass(); p.Status.Phase != v1alpha1.PhaseRollingOut || !p.Claim {
		t.Fatalf("after release by the other owner: %s claim=%v", p.Status.Phase, p.Claim)
	}
}

// B3: a rejected manual rollback clears when the annotation goes.
func TestB3RejectedManualRollbackRecovers(t *testing.T) {
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

// B4: a failed manual rollback does not loop while the annotation stays.
func TestB4FailedManualRollbackDoesNotLoop(t *testing.T) {
	c := newCluster(t)
	c.readyAt(v1)
	c.readyAt(v2)
	c.annotate(v1alpha1.RollbackToAnnotation, v1)
	c.pass()
	for i := 0; i < 3; i++ {
		markFailed(c.dep)
		p := c.pass()
		if p.ApplyDeployment != nil || p.Status.Phase != v1alpha1.PhaseFailed || p.Status.RollbackCount != 1 {
			t.Fatalf("pass %d: apply=%v phase=%s count=%d", i, p.ApplyDeployment != nil, p.Status.Phase, p.Status.RollbackCount)
		}
	}
}

// B5: a Deployment failure while Ready is not blamed on the model; it is
// reported and clears when the Deployment recovers.
func TestB5DeploymentFailureWhileReadyIsNotRolledBack(t *testing.T) {
	c := newCluster(t)
	c.readyAt(v1)
	c.readyAt(v2)
	markFailed(c.dep)
	p := c.pass()
	if p.ApplyDeployment != nil || p.Status.FailedSpecHash != "" || p.Status.Phase == v1alpha1.PhaseRolledBack ||
		!conditionIs(&p.Status, v1alpha1.DegradedCondition, metav1.ConditionTrue, v1alpha1.DeploymentUnavailableReason) {
		t.Fatalf("failure while Ready: %+v", p)
	}
	markReady(c.dep)
	if p := c.pass(); !conditionIs(&p.Status, v1alpha1.ReadyCondition, metav1.ConditionTrue, v1alpha1.RolloutSucceededReason) {
		t.Fatalf("after recovery: %v", condSummary(p.Status))
	}
}

// B6: deletion finishes with an invalid stored spec and with the target gone.
func TestB6DeletionFinishesWhenSpecInvalidOrTargetGone(t *testing.T) {
	c := newCluster(t)
	c.readyAt(v1)
	c.obj.Spec.Tier = "Huge"
	c.obj.Spec.RolloutStrategy.MaxSurge = nil
	c.obj.DeletionTimestamp = &metav1.Time{Time: clock}
	if p := c.pass(); !p.RemoveFinalizer || p.Release == nil || len(c.cms) != 0 {
		t.Fatalf("invalid spec blocks deletion: %+v", p)
	}
	c = newCluster(t)
	c.readyAt(v1)
	c.dep = nil
	c.obj.DeletionTimestamp = &metav1.Time{Time: clock}
	if p := c.pass(); !p.RemoveFinalizer || p.Release != nil || len(c.cms) != 0 {
		t.Fatalf("missing target blocks deletion: %+v", p)
	}
}

// B7: manifest ConfigMaps are content-addressed and immutable; the old one
// stays while the rollout is in flight and goes once it settles.
func TestB7ContentAddressedConfigMaps(t *testing.T) {
	c := newCluster(t)
	c.readyAt(v1)
	old := pointedConfigMap(c.dep, "openmed-service")
	c.setVersion(v2)
	p := c.pass()
	if len(p.EnsureConfigMaps) != 1 || p.EnsureConfigMaps[0].Name == old || !*p.EnsureConfigMaps[0].Immutable {
		t.Fatalf("new version must get a new immutable ConfigMap: %+v", p.EnsureConfigMaps)
	}
	if _, ok := c.cms[old]; !ok || len(p.PruneConfigMaps) != 0 {
		t.Fatal("old ConfigMap pruned mid-rollout")
	}
	// Old pods keep loading v1 from the old name throughout.
	if c.cms[old].Data[v1alpha1.PreloadEnvVar] != v1 {
		t.Fatal("old ConfigMap changed")
	}
	// Settled with revisionHistoryLimit 1: v1 is no longer retained.
	c.obj.Spec.RevisionHistoryLimit = ptrTo(int32(1))
	markReady(c.dep)
	if p := c.pass(); !reflect.DeepEqual(p.PruneConfigMaps, []string{old}) {
		t.Fatalf("prune %v, want [%s]", p.PruneConfigMaps, old)
	}
}

// B11: spec.replicas is optional; unset, the operator leaves replicas alone
// and waits for the Deployment's own count.
func TestB11UnsetReplicasAreLeftAlone(t *testing.T) {
	c := newCluster(t)
	c.obj.Spec.Replicas = nil
	c.dep.Spec.Replicas = ptrTo(int32(4))
	p := c.pass()
	if _, ok := p.ApplyDeployment.Object["spec"].(map[string]any)["replicas"]; ok {
		t.Fatal("intent sets replicas")
	}
	if *c.dep.Spec.Replicas != 4 {
		t.Fatal("replicas changed")
	}
	// An HPA scales: not drift.
	markReady(c.dep)
	c.pass()
	c.dep.Spec.Replicas = ptrTo(int32(7))
	markReady(c.dep)
	if p := c.pass(); p.ApplyDeployment != nil || p.Status.Phase != v1alpha1.PhaseReady {
		t.Fatalf("HPA scaling treated as drift: %+v", p)
	}
}

// B12: transient unavailability of a Ready resource is DeploymentUnavailable,
// not a rollout, and RolloutSucceeded is reported again on recovery.
func TestB12TransientUnavailability(t *testing.T) {
	c := newCluster(t)
	c.readyAt(v1)
	markUnavailable(c.dep)
	p := c.pass()
	if p.Status.Phase == v1alpha1.PhaseRollingOut || !conditionIs(&p.Status, v1alpha1.ReadyCondition, metav1.ConditionFalse, v1alpha1.DeploymentUnavailableReason) {
		t.Fatalf("unavailable: %s %v", p.Status.Phase, condSummary(p.Status))
	}
	markReady(c.dep)
	p = c.pass()
	assertStrings(t, "events", eventReasons(p.Events), []string{v1alpha1.RolloutSucceededReason})
}

// B13: a retarget releases the old Deployment, and a rollback never patches
// another Deployment than the one being monitored.
func TestB13RetargetReleasesOldTarget(t *testing.T) {
	c := newCluster(t)
	c.readyAt(v1)
	oldDep := c.dep
	newDep := fixtureDeployment(t)
	newDep.Name = "openmed-service-b"
	c.obj.Spec.TargetRef.Name = newDep.Name
	c.setVersion(v2)
	if desired, previous := TargetNames(c.obj); desired != newDep.Name || previous != oldDep.Name {
		t.Fatalf("TargetNames = %s, %s", desired, previous)
	}
	c.dep, c.prev = newDep, oldDep
	p := c.pass()
	if p.ReleasePrevious == nil || p.ReleasePrevious.DeploymentName != oldDep.Name || p.ApplyDeployment.GetName() != newDep.Name {
		t.Fatalf("retarget plan: %+v", p)
	}
	if oldDep.Annotations[v1alpha1.ModelResourceAnnotation] != "" || pointedConfigMap(oldDep, "openmed-service") != "" {
		t.Fatal("old target still points at the manifest")
	}
	if c.obj.Status.TargetName != newDep.Name {
		t.Fatalf("targetName %s", c.obj.Status.TargetName)
	}
	// v2 fails on the new target: the rollback restores v1 there (the
	// fake cluster fails the test if an apply names another Deployment).
	c.prev = nil
	markFailed(c.dep)
	p = c.pass()
	if p.Status.Phase != v1alpha1.PhaseRolledBack || p.ApplyDeployment.GetName() != newDep.Name || c.pointedVersion() != v1 {
		t.Fatalf("rollback after retarget: %s", p.Status.Phase)
	}
}

// B14: history holds one entry per version, so a replicas-only change does
// not push the previous version out of the rollback candidates.
func TestB14HistoryOnePerVersion(t *testing.T) {
	c := newCluster(t)
	c.readyAt(v1)
	c.readyAt(v2)
	c.obj.Spec.Replicas = ptrTo(int32(3))
	c.obj.Generation++
	c.pass()
	markReady(c.dep)
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

// B15: a manual rollback does not mark the healthy desired spec as failed;
// removing the annotation rolls the desired spec out again.
func TestB15ManualRollbackDoesNotFailDesiredSpec(t *testing.T) {
	c := newCluster(t)
	c.readyAt(v1)
	c.readyAt(v2)
	c.annotate(v1alpha1.RollbackToAnnotation, v1)
	p := c.pass()
	if p.Status.FailedSpecHash != "" {
		t.Fatal("manual rollback marked the desired spec failed")
	}
	markReady(c.dep)
	p = c.pass()
	if ready := findCondition(p.Status, v1alpha1.ReadyCondition); !strings.Contains(ready.Message, "remove the annotation") {
		t.Errorf("held status does not say how to release it: %q", ready.Message)
	}
	c.annotate(v1alpha1.RollbackToAnnotation, "")
	if p := c.pass(); p.Status.Phase != v1alpha1.PhaseRollingOut || c.pointedVersion() != v2 {
		t.Fatalf("release of the hold: %s pointed %s", p.Status.Phase, c.pointedVersion())
	}
}

// B16: observedGeneration advances when the generation changes without a
// spec hash change (a field set to its default), in every state.
func TestB16ObservedGenerationAdvances(t *testing.T) {
	c := newCluster(t)
	c.readyAt(v1)
	c.obj.Spec.RevisionHistoryLimit = ptrTo(int32(10))
	c.obj.Generation++
	if p := c.pass(); p.Status.ObservedGeneration != c.obj.Generation {
		t.Fatalf("Ready: observedGeneration %d", p.Status.ObservedGeneration)
	}
	c.pass()
	markFailed(c.dep)
	c.obj.Spec.RolloutStrategy.RollbackOnFailure = ptrTo(false)
	c.failRollout(v2)
	c.obj.Generation++
	if p := c.pass(); p.Status.Phase != v1alpha1.PhaseFailed || p.Status.ObservedGeneration != c.obj.Generation {
		t.Fatalf("Failed: %s observedGeneration %d", p.Status.Phase, p.Status.ObservedGeneration)
	}
}

// B17: lastTransitionTime changes only with the status, other writers'
// conditions are kept, and Unknown is used where the state is not known.
func TestB17ConditionConventions(t *testing.T) {
	c := newCluster(t)
	c.pass()
	c.obj.Status.Conditions = append(c.obj.Status.Conditions, metav1.Condition{
		Type: "Audited", Status: metav1.ConditionTrue, Reason: "Reviewed", Message: "x", ObservedGeneration: 1, LastTransitionTime: metav1.NewTime(clock),
	})
	before := findCondition(c.obj.Status, v1alpha1.ReadyCondition).LastTransitionTime
	later := clock.Add(3600e9)
	p := Decide(c.obj, Observed{Deployment: c.dep, Now: metav1.NewTime(later)}, Options{})
	ready := findCondition(p.Status, v1alpha1.ReadyCondition)
	// Reason changed (RolloutStarted -> RolloutInProgress), status did not.
	if ready.Reason != v1alpha1.RolloutInProgressReason || !ready.LastTransitionTime.Equal(&before) {
		t.Errorf("Ready %s at %v, want RolloutInProgress at %v", ready.Reason, ready.LastTransitionTime, before)
	}
	if findCondition(p.Status, "Audited") == nil {
		t.Error("another writer's condition was dropped")
	}
	c.obj.Spec.Tier = "Huge"
	p = Decide(c.obj, Observed{Deployment: c.dep, Now: metav1.NewTime(later)}, Options{})
	if !conditionIs(&p.Status, v1alpha1.RolledBackCondition, metav1.ConditionUnknown, v1alpha1.InvalidSpecReason) {
		t.Errorf("invalid spec: %v", condSummary(p.Status))
	}
}

// B18: deleting a resource that never claimed its target warns about nothing.
func TestB18DeletionOfNeverClaimedTarget(t *testing.T) {
	c := newCluster(t)
	c.dep.Spec.Template.Spec.Containers[0].Name = "other"
	c.pass()
	c.obj.DeletionTimestamp = &metav1.Time{Time: clock}
	p := c.pass()
	if p.Release != nil || len(p.Events) != 0 || !p.RemoveFinalizer {
		t.Fatalf("never-claimed target: %+v", p)
	}
}

// B25: rollbackRequest names the restored version and rollbackCount restarts
// when a desired spec becomes Ready.
func TestB25RollbackBookkeeping(t *testing.T) {
	c := newCluster(t)
	c.readyAt(v1)
	c.setVersion(v2)
	c.pass()
	markFailed(c.dep)
	p := c.pass()
	if p.Status.RollbackRequest != "automatic:"+v1 || p.Status.RollbackCount != 1 {
		t.Fatalf("request %q count %d", p.Status.RollbackRequest, p.Status.RollbackCount)
	}
	c.readyAt(v3)
	if c.obj.Status.RollbackCount != 0 || c.obj.Status.RollbackRequest != "" {
		t.Fatalf("after Ready: count %d request %q", c.obj.Status.RollbackCount, c.obj.Status.RollbackRequest)
	}
}

// B30: a hand-edited or corrupt retained spec in status is not reported as
// an invalid spec; the desired spec still rolls out.
func TestB30CorruptStatusIsNotInvalidSpec(t *testing.T) {
	c := newCluster(t)
	c.obj.Status.LastSuccessfulSpec = &v1alpha1.NormalizedSpec{}
	c.obj.Status.History = []v1alpha1.HistoryEntry{{Version: "", SpecHash: "garbage"}}
	p := c.pass()
	if p.Status.Phase != v1alpha1.PhaseRollingOut || conditionIs(&p.Status, v1alpha1.ReadyCondition, metav1.ConditionFalse, v1alpha1.InvalidSpecReason) {
		t.Fatalf("corrupt status: %s %v", p.Status.Phase, condSummary(p.Status))
	}
	markReady(c.dep)
	if p := c.pass(); p.Status.Phase != v1alpha1.PhaseReady || p.Status.History[0].Version != v1 {
		t.Fatalf("Ready with corrupt history: %+v", p.Status.History)
	}
}

// resetAt retries a failed desired spec once, without a spec change.
func TestResetAtRetriesFailedSpec(t *testing.T) {
	c := newCluster(t)
	c.readyAt(v1)
	c.failRollout(v2)
	markReady(c.dep)
	c.pass()
	c.annotate(v1alpha1.ResetRequestAnnotation, "2026-08-18T13:00:00Z")
	p := c.pass()
	if p.Status.Phase != v1alpha1.PhaseRollingOut || c.pointedVersion() != v2 || p.Status.LastHandledResetAt != "2026-08-18T13:00:00Z" {
		t.Fatalf("reset: %s pointed %s", p.Status.Phase, c.pointedVersion())
	}
	// Failing again holds it again; the same resetAt value does not retry.
	markFailed(c.dep)
	c.pass()
	markReady(c.dep)
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
	if p.ApplyDeployment != nil || !apiequality.Semantic.DeepEqual(*in, p.Status) {
		t.Fatalf("requestedAt: %+v", p)
	}
}

// Drift is attributed to the field manager that changed the field.
func TestDriftAttribution(t *testing.T) {
	c := newCluster(t)
	c.readyAt(v1)
	c.dep.Spec.Replicas = ptrTo(int32(3))
	setManager(c.dep, "helm", metav1.ManagedFieldsOperationUpdate, `{"f:spec":{"f:replicas":{}}}`)
	p := c.pass()
	want := []Drift{{Field: "spec.replicas", Managers: []string{"helm"}}}
	if !reflect.DeepEqual(p.Drift, want) || p.Drift[0].String() != `spec.replicas changed by "helm"` {
		t.Fatalf("drift %v", p.Drift)
	}
	if !strings.Contains(p.Events[0].Message, `spec.replicas changed by "helm"`) {
		t.Errorf("event %q", p.Events[0].Message)
	}

	removeEnv(findContainer(c.dep, "openmed-service"))
	setManager(c.dep, "kubectl-edit", metav1.ManagedFieldsOperationUpdate,
		`{"f:spec":{"f:template":{"f:spec":{"f:containers":{"k:{\"name\":\"openmed-service\"}":{"f:env":{}}}}}}}`)
	p = c.pass()
	if len(p.Drift) != 1 || !reflect.DeepEqual(p.Drift[0].Managers, []string{"kubectl-edit"}) {
		t.Fatalf("removed env entry: %v", p.Drift)
	}
}

// A status written in the reference's format (two retained slots, no
// history) is read as a history, so its versions stay rollback targets.
func TestReferenceStatusFormatMigrates(t *testing.T) {
	c := newCluster(t)
	c.readyAt(v1)
	c.readyAt(v2)
	c.obj.Status.History = nil
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
	markReady(c.dep)
	c.pass()
	removeEnv(findContainer(c.dep, "openmed-service"))
	p := c.pass()
	if p.ApplyDeployment == nil || p.Status.Phase != v1alpha1.PhaseRolledBack || c.pointedVersion() != v1 {
		t.Fatalf("drift while held: %s pointed %s", p.Status.Phase, c.pointedVersion())
	}
	assertStrings(t, "events", eventReasons(p.Events), []string{v1alpha1.DriftCorrectedReason})
}
