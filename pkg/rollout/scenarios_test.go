package rollout

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// The scenarios of the Kopf operator's test suite (its tests 3–8) as
// sequences of passes over Decide, carried out on the real API server.
// Where this operator behaves differently the test says how.

// Test 3: apply drives the manifest rollout and the Ready conditions.
func TestScenarioApplyDrivesRolloutToReady(t *testing.T) {
	c := newCluster(t)
	plan := c.pass()
	if plan.Status.Phase != v1alpha1.PhaseRollingOut || !conditionIs(&plan.Status, v1alpha1.ProgressingCondition, metav1.ConditionTrue, v1alpha1.SpecChangedReason) {
		t.Fatalf("first pass: %s %v", plan.Status.Phase, condSummary(plan.Status))
	}
	if !plan.Claim {
		t.Error("first apply to an unclaimed target must be a claim")
	}
	cmName := "openmed-service-model-manifest-5a62c38517f97235ee02"
	cm, ok := c.configMaps()[cmName]
	if !ok || cm.Data[v1alpha1.ManifestKey] != `{"apiVersion":"openmed.ai/v1alpha1","kind":"OpenMedModelManifest","models":[{"family":"PII","tier":"Small","version":"OpenMed/synthetic-pii-v1"}]}`+"\n" {
		t.Fatalf("manifest ConfigMap %s: %v", cmName, cm.Data)
	}
	dep := c.dep()
	if *dep.Spec.Replicas != 2 || dep.Annotations[v1alpha1.ModelResourceAnnotation] != c.owner() ||
		pointedConfigMap(dep, "openmed-service") != cmName ||
		dep.Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation] != ManifestHash(normalize(t, c.obj)) {
		t.Fatalf("Deployment not pointed: %+v", dep.Spec)
	}
	if c.obj.Status.TargetDeploymentGeneration != dep.Generation {
		t.Errorf("targetDeploymentGeneration %d, want %d", c.obj.Status.TargetDeploymentGeneration, dep.Generation)
	}

	c.markReady()
	plan = c.pass()
	ready := metav1.Condition{
		Type: v1alpha1.ReadyCondition, Status: metav1.ConditionTrue, Reason: v1alpha1.RolloutSucceededReason,
		Message: "Desired model version is available.", ObservedGeneration: 1, LastTransitionTime: metav1.NewTime(clock),
	}
	if got := findCondition(plan.Status, v1alpha1.ReadyCondition); plan.Status.Phase != v1alpha1.PhaseReady || got == nil || *got != ready {
		t.Fatalf("Ready pass: %s %+v", plan.Status.Phase, got)
	}
	if plan.Status.ActiveVersion != v1 {
		t.Errorf("activeVersion %q", plan.Status.ActiveVersion)
	}
	assertStrings(t, "events", eventReasons(c.events), []string{v1alpha1.RolloutStartedReason, v1alpha1.RolloutSucceededReason})

	// Repeating the pass is a no-op: nothing to write, no event.
	gen := c.dep().Generation
	before := c.obj.Status.DeepCopy()
	plan = c.pass()
	if plan.HasChanges() || len(plan.Events) > 0 || !apiequality.Semantic.DeepEqual(*before, plan.Status) || c.dep().Generation != gen {
		t.Fatalf("steady pass is not a no-op: %+v", plan)
	}

	// The ConfigMap is immutable, so it cannot be tampered
	// with; deleting it is the drift left. It is recreated under the same
	// name with no rollout, and reported as DriftCorrected.
	c.deleteConfigMap(cmName)
	plan = c.pass()
	if _, ok := c.configMaps()[cmName]; !ok || plan.Status.Phase != v1alpha1.PhaseReady || plan.ApplyDeployment != nil {
		t.Fatalf("deleted ConfigMap not restored: %+v", plan)
	}
	assertStrings(t, "events", eventReasons(plan.Events), []string{v1alpha1.DriftCorrectedReason})
}

// Test 4: a failed version change rolls back to the last successful
// manifest. This operator records the decision first and applies it in the
// next pass, so a lost status write cannot apply the failed version again.
func TestScenarioFailedVersionRollsBack(t *testing.T) {
	c := newCluster(t)
	c.readyAt(v1)
	c.setVersion(v2)
	plan := c.pass()
	if plan.Status.Phase != v1alpha1.PhaseRollingOut || plan.Status.ActiveVersion != v1 || c.pointedVersion() != v2 {
		t.Fatalf("v2 rollout: %s active %s pointed %s", plan.Status.Phase, plan.Status.ActiveVersion, c.pointedVersion())
	}
	c.markFailed()
	plan = c.pass()
	st := plan.Status
	if st.Phase != v1alpha1.PhaseRolledBack || st.DesiredVersion != v2 || st.ActiveVersion != v1 || st.RollbackCount != 1 ||
		st.FailedSpecHash != st.DesiredSpecHash || !conditionIs(&st, v1alpha1.DegradedCondition, metav1.ConditionTrue, "") ||
		!plan.Requeue || plan.HasChanges() || c.pointedVersion() != v2 {
		t.Fatalf("recorded rollback: %+v requeue %v pointed %s", st, plan.Requeue, c.pointedVersion())
	}
	assertStrings(t, "events", eventReasons(plan.Events), []string{v1alpha1.RolloutFailedReason, v1alpha1.RollbackStartedReason})
	plan = c.pass()
	if plan.ApplyDeployment == nil || c.pointedVersion() != v1 || len(plan.Events) > 0 {
		t.Fatalf("rollback not applied: pointed %s events %v", c.pointedVersion(), eventReasons(plan.Events))
	}
	c.markReady()
	plan = c.pass()
	if plan.Status.Phase != v1alpha1.PhaseRolledBack || !conditionIs(&plan.Status, v1alpha1.RolledBackCondition, metav1.ConditionTrue, v1alpha1.RollbackSucceededReason) {
		t.Fatalf("rollback monitor: %s %v", plan.Status.Phase, condSummary(plan.Status))
	}
}

// Test 5: a failed rollback is reported as a terminal condition.
func TestScenarioFailedRollbackIsTerminal(t *testing.T) {
	c := newCluster(t)
	c.readyAt(v1)
	c.failRollout(v2)
	c.markFailed()
	plan := c.pass()
	if plan.Status.Phase != v1alpha1.PhaseFailed || !conditionIs(&plan.Status, v1alpha1.RolledBackCondition, metav1.ConditionFalse, v1alpha1.RollbackFailedReason) {
		t.Fatalf("%s %v", plan.Status.Phase, condSummary(plan.Status))
	}
	assertStrings(t, "events", eventReasons(plan.Events), []string{v1alpha1.RollbackFailedReason})
	// Terminal: the next pass changes nothing and reports nothing again.
	c.refresh()
	before := c.obj.Status.DeepCopy()
	plan = c.pass()
	if plan.HasChanges() || len(plan.Events) > 0 || !apiequality.Semantic.DeepEqual(*before, plan.Status) {
		t.Fatalf("failed rollback is not stable: %+v", plan)
	}
}

// Test 6: manual rollback accepts only a retained successful version.
func TestScenarioManualRollback(t *testing.T) {
	c := newCluster(t)
	c.readyAt(v1)
	c.readyAt(v2)
	if p := c.obj.Status.PreviousSuccessfulSpec; p == nil || p.Version != v1 {
		t.Fatalf("previousSuccessfulSpec %+v", p)
	}
	c.annotate(v1alpha1.RollbackToAnnotation, v1)
	plan := c.pass()
	if plan.Status.Phase != v1alpha1.PhaseRolledBack || plan.Status.RollbackRequest != "manual:"+v1 || c.pointedVersion() != v1 {
		t.Fatalf("manual rollback: %s %s pointed %s", plan.Status.Phase, plan.Status.RollbackRequest, c.pointedVersion())
	}
	c.markReady()
	c.pass()
	c.setVersion(v1)
	c.pass()
	c.annotate(v1alpha1.RollbackToAnnotation, "")
	plan = c.pass()
	// The Kopf operator re-applied the same spec here (RollingOut for a pass).
	// The Deployment already carries and serves the desired spec, so the
	// resource is Ready at once, with no write.
	if plan.Status.Phase != v1alpha1.PhaseReady || plan.ApplyDeployment != nil || plan.Status.RollbackRequest != "" {
		t.Fatalf("after the exit sequence: %s %v", plan.Status.Phase, condSummary(plan.Status))
	}

	// A version that was never retained is rejected.
	r := newCluster(t)
	r.readyAt(v1)
	r.readyAt(v2)
	r.annotate(v1alpha1.RollbackToAnnotation, "OpenMed/not-retained")
	plan = r.pass()
	if !conditionIs(&plan.Status, v1alpha1.RolledBackCondition, metav1.ConditionFalse, v1alpha1.RollbackRejectedReason) || plan.ApplyDeployment != nil {
		t.Fatalf("rejection: %v", condSummary(plan.Status))
	}
}

// Test 7: deletion removes the pointer and restarts the target without
// preload. The env entry goes away entirely instead of
// staying with an empty value, replicas and strategy stay, and the
// operator's managedFields entry is gone.
func TestScenarioDeleteReleasesTarget(t *testing.T) {
	c := newCluster(t)
	c.readyAt(v1)
	c.deleteModel()
	plan := c.pass()
	if plan.Release == nil || plan.Release.DeploymentName != "openmed-service" || !plan.RemoveFinalizer {
		t.Fatalf("deletion plan %+v", plan)
	}
	keep := plan.Release.Keep.Object["spec"].(map[string]any)
	if keep["replicas"] != int64(2) || keep["progressDeadlineSeconds"] != int64(60) || keep["strategy"] == nil {
		t.Errorf("Keep %v must hold replicas, deadline and strategy at their live values", keep)
	}
	if cms := c.configMaps(); len(cms) != 0 {
		t.Errorf("owned ConfigMaps left: %v", cms)
	}
	dep := c.dep()
	if env := findContainer(dep, "openmed-service").Env; len(env) != 0 || dep.Annotations[v1alpha1.ModelResourceAnnotation] != "" {
		t.Errorf("pointer left: env %v annotations %v", env, dep.Annotations)
	}
	if *dep.Spec.Replicas != 2 || *dep.Spec.ProgressDeadlineSeconds != 60 {
		t.Errorf("release reset replicas %d or deadline %d", *dep.Spec.Replicas, *dep.Spec.ProgressDeadlineSeconds)
	}
	for _, e := range dep.ManagedFields {
		if e.Manager == DefaultFieldManager {
			t.Errorf("managedFields entry of the operator left: %+v", e)
		}
	}
	assertStrings(t, "events", eventReasons(plan.Events), []string{v1alpha1.ModelRemovedReason})
}

// Test 8: deletion does not touch resources owned by another controller.
func TestScenarioDeleteLeavesForeignResources(t *testing.T) {
	c := newCluster(t)
	c.readyAt(v1)
	c.editDeployment("other-operator", func(d *appsv1.Deployment) {
		d.Annotations[v1alpha1.ModelResourceAnnotation] = c.ns + "/other"
		d.Spec.Template.Annotations[v1alpha1.ModelResourceAnnotation] = c.ns + "/other"
	})
	c.deleteModel()
	plan := c.pass()
	if plan.Release != nil || !plan.RemoveFinalizer {
		t.Fatalf("foreign target touched: %+v", plan)
	}
	if pointedConfigMap(c.dep(), "openmed-service") == "" {
		t.Error("env entry of a foreign Deployment was removed")
	}
	assertStrings(t, "events", eventReasons(plan.Events), []string{v1alpha1.ModelRemovalSkippedReason})
	if plan.Events[0].Type != corev1.EventTypeWarning {
		t.Errorf("event type %s", plan.Events[0].Type)
	}
}

func findCondition(st v1alpha1.OpenMedModelStatus, typ string) *metav1.Condition {
	for i := range st.Conditions {
		if st.Conditions[i].Type == typ {
			return &st.Conditions[i]
		}
	}
	return nil
}

// Reverting the spec to the version a rollback restored is Ready in the same
// pass: the Deployment already serves it, so no rollout (and no Deployment
// event) follows.
func TestRevertToServedVersionIsReadyAtOnce(t *testing.T) {
	c := newCluster(t)
	c.readyAt(v1)
	c.failRollout(v2)
	c.markReady()
	if plan := c.pass(); plan.Status.Phase != v1alpha1.PhaseRolledBack {
		t.Fatalf("rollback not held: %s", plan.Status.Phase)
	}
	gen := c.dep().Generation
	c.setVersion(v1)
	plan := c.pass()
	if plan.Status.Phase != v1alpha1.PhaseReady || plan.Status.ActiveVersion != v1 || c.dep().Generation != gen {
		t.Fatalf("revert: phase %s active %q generation %d -> %d, %v", plan.Status.Phase, plan.Status.ActiveVersion, gen, c.dep().Generation, condSummary(plan.Status))
	}
	assertStrings(t, "events", eventReasons(plan.Events), []string{v1alpha1.RolloutSucceededReason})
}
