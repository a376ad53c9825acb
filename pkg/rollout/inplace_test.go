package rollout

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// inPlaceCluster is the fixture Ready at v1 on the real clock, with the
// spec changed to v2 and whenUnschedulable: ReplaceInPlace (replicas as
// given); the pass that applies v2 ran and the surge pod of v2 waits for a
// node. It returns the pod's name.
func inPlaceCluster(t *testing.T, replicas int32, mutate func(*v1alpha1.RolloutStrategy)) (*cluster, string) {
	t.Helper()
	c := newCluster(t)
	c.now = time.Now()
	c.editModel(func(m *v1alpha1.OpenMedModel) { m.Spec.Replicas = ptr.To(replicas) })
	c.readyAt(v1)
	c.editModel(func(m *v1alpha1.OpenMedModel) {
		m.Spec.Version = v2
		m.Spec.RolloutStrategy.WhenUnschedulable = v1alpha1.UnschedulableReplaceInPlace
		if mutate != nil {
			mutate(&m.Spec.RolloutStrategy)
		}
	})
	c.pass()
	c.setDeploymentStatus(func(d *appsv1.Deployment) { c.statusOf(d, replicas+1, 1, replicas, replicas) })
	pod := c.createUnschedulablePod(v2, gpuVerdict)
	// The pass runs after the scheduler's verdict (its time is the API
	// server's, to the second).
	c.now = time.Now().Truncate(time.Second).Add(time.Second)
	return c, pod
}

func strategyOf(d *appsv1.Deployment) string {
	ru := d.Spec.Strategy.RollingUpdate
	if ru == nil {
		return string(d.Spec.Strategy.Type)
	}
	return string(d.Spec.Strategy.Type) + " maxSurge=" + ru.MaxSurge.String() + " maxUnavailable=" + ru.MaxUnavailable.String()
}

// TestReplaceInPlace: a rollout whose new pod finds no node goes on in
// place after unschedulableSeconds (maxSurge 0, maxUnavailable replicas −
// minAvailable), each step recorded before its write, and the declared
// strategy is back once it completed; with one replica it says why it
// cannot.
func TestReplaceInPlace(t *testing.T) {
	t.Run("waits unschedulableSeconds, replaces in place, restores the strategy", func(t *testing.T) {
		c, _ := inPlaceCluster(t, 2, nil)
		declared := strategyOf(c.dep())
		template := c.dep().Spec.Template.DeepCopy()

		p := c.pass()
		if !conditionIs(&p.Status, v1alpha1.ReadyCondition, metav1.ConditionFalse, v1alpha1.UnschedulableReason) || p.Status.ReplaceInPlace != nil ||
			!strings.Contains(kstatusMessage(p.Status), "replaced in place 30s after") || p.RequeueAfter <= 0 || p.RequeueAfter > 31*time.Second {
			t.Fatalf("before unschedulableSeconds: %v %q requeue %s record %+v", condSummary(p.Status), kstatusMessage(p.Status), p.RequeueAfter, p.Status.ReplaceInPlace)
		}
		c.now = c.now.Add(31 * time.Second)
		p = c.pass()
		r := p.Status.ReplaceInPlace
		if r == nil || r.MaxUnavailable != 1 || r.Restoring || r.SpecHash != p.Status.DesiredSpecHash || p.ApplyDeployment != nil || !p.Requeue {
			t.Fatalf("the pass that decides: record %+v apply %v requeue %v", r, p.ApplyDeployment != nil, p.Requeue)
		}
		assertStrings(t, "events", eventReasons(p.Events), []string{v1alpha1.ReplacingInPlaceReason})
		if !conditionIs(&p.Status, v1alpha1.ReconcilingCondition, metav1.ConditionTrue, v1alpha1.ReplacingInPlaceReason) {
			t.Errorf("%v", condSummary(p.Status))
		}
		if got := strategyOf(c.dep()); got != declared {
			t.Fatalf("the strategy changed before the record was durable: %s", got)
		}

		p = c.pass()
		if got := strategyOf(c.dep()); got != "RollingUpdate maxSurge=0 maxUnavailable=1" {
			t.Fatalf("in place: strategy %s", got)
		}
		if !apiequality.Semantic.DeepEqual(template, &c.dep().Spec.Template) {
			t.Errorf("the switch changed the pod template")
		}
		if len(p.Drift) != 0 || p.Status.Phase != v1alpha1.PhaseRollingOut ||
			!strings.Contains(kstatusMessage(p.Status), "in place for "+v2+" (maxSurge 0, maxUnavailable 1)") {
			t.Errorf("while replacing: drift %v %s %q", p.Drift, p.Status.Phase, kstatusMessage(p.Status))
		}

		// Every pod replaced: the declared strategy is recorded, then put back.
		c.markReady()
		p = c.pass()
		if r := p.Status.ReplaceInPlace; r == nil || !r.Restoring || p.ApplyDeployment != nil || p.Status.Phase == v1alpha1.PhaseReady {
			t.Fatalf("the pass that sees it complete: record %+v apply %v phase %s", r, p.ApplyDeployment != nil, p.Status.Phase)
		}
		c.passLosingStatus() // the restore, its status write lost
		if got := strategyOf(c.dep()); got != declared {
			t.Fatalf("after the restore: %s, want %s", got, declared)
		}
		c.markReady()
		for range 3 {
			p = c.pass()
		}
		if p.Status.Phase != v1alpha1.PhaseReady || p.Status.ReplaceInPlace != nil || p.Status.ActiveVersion != v2 || strategyOf(c.dep()) != declared {
			t.Fatalf("after the rollout: %s %v record %+v strategy %s", p.Status.Phase, condSummary(p.Status), p.Status.ReplaceInPlace, strategyOf(c.dep()))
		}
		if !apiequality.Semantic.DeepEqual(template, &c.dep().Spec.Template) {
			t.Errorf("the restore changed the pod template")
		}
	})

	t.Run("minAvailable bounds maxUnavailable", func(t *testing.T) {
		c, _ := inPlaceCluster(t, 4, func(rs *v1alpha1.RolloutStrategy) {
			rs.UnschedulableSeconds = ptr.To[int32](0)
			rs.MinAvailable = ptr.To[int32](2)
		})
		p := c.pass()
		if r := p.Status.ReplaceInPlace; r == nil || r.MaxUnavailable != 2 {
			t.Fatalf("record %+v", r)
		}
		c.pass()
		if got := c.dep().Spec.Strategy.RollingUpdate; got == nil || *got.MaxUnavailable != intstr.FromInt32(2) || *got.MaxSurge != intstr.FromInt32(0) {
			t.Errorf("strategy %s", strategyOf(c.dep()))
		}
	})

	t.Run("one replica: it says why it cannot and waits", func(t *testing.T) {
		c, _ := inPlaceCluster(t, 1, nil)
		declared := strategyOf(c.dep())
		c.now = c.now.Add(time.Minute)
		p := c.pass()
		if p.Status.ReplaceInPlace != nil || strategyOf(c.dep()) != declared ||
			!conditionIs(&p.Status, v1alpha1.ReadyCondition, metav1.ConditionFalse, v1alpha1.UnschedulableReason) ||
			!strings.Contains(kstatusMessage(p.Status), "cannot be replaced in place: minAvailable 1 of 1 replicas") {
			t.Fatalf("%v %q record %+v", condSummary(p.Status), kstatusMessage(p.Status), p.Status.ReplaceInPlace)
		}
	})

	t.Run("deleted while replacing in place: the owner gets the declared strategy back", func(t *testing.T) {
		c, _ := inPlaceCluster(t, 2, func(rs *v1alpha1.RolloutStrategy) { rs.UnschedulableSeconds = ptr.To[int32](0) })
		declared := strategyOf(c.dep())
		c.pass()
		c.pass()
		if got := strategyOf(c.dep()); got != "RollingUpdate maxSurge=0 maxUnavailable=1" {
			t.Fatalf("in place: %s", got)
		}
		c.deleteModel()
		plan := c.pass()
		if plan.Release == nil || !plan.RemoveFinalizer {
			t.Fatalf("deletion plan %+v", plan)
		}
		if got := strategyOf(c.dep()); got != declared {
			t.Errorf("after the release: %s, want the declared %s", got, declared)
		}
	})

	t.Run("a rollback that finds no node goes on in place too", func(t *testing.T) {
		c := newCluster(t)
		c.now = time.Now()
		c.editModel(func(m *v1alpha1.OpenMedModel) {
			m.Spec.RolloutStrategy.WhenUnschedulable = v1alpha1.UnschedulableReplaceInPlace
			m.Spec.RolloutStrategy.UnschedulableSeconds = ptr.To[int32](0)
		})
		c.readyAt(v1)
		declared := strategyOf(c.dep())
		c.failRollout(v2) // records the rollback and applies it
		if c.pointedVersion() != v1 {
			t.Fatalf("the rollback is not applied: %s", c.pointedVersion())
		}
		c.setDeploymentStatus(func(d *appsv1.Deployment) { c.statusOf(d, 3, 1, 2, 2) })
		pod := c.createUnschedulablePod(v1, gpuVerdict)
		c.now = time.Now().Truncate(time.Second).Add(time.Second)
		p := c.pass()
		if r := p.Status.ReplaceInPlace; r == nil || p.Status.RollbackSpec == nil || r.SpecHash != SpecHash(*p.Status.RollbackSpec) || p.ApplyDeployment != nil {
			t.Fatalf("the rollback's switch: record %+v apply %v", r, p.ApplyDeployment != nil)
		}
		if m := kstatusMessage(p.Status); !strings.Contains(m, pod) || !strings.Contains(m, "replacing pods in place") {
			t.Errorf("the rollback's message: %q", m)
		}
		c.pass()
		if got := strategyOf(c.dep()); got != "RollingUpdate maxSurge=0 maxUnavailable=1" {
			t.Fatalf("the rollback in place: %s", got)
		}
		c.markReady()
		c.pass() // records the restore
		c.pass() // restores
		c.markReady()
		p = c.pass()
		if got := strategyOf(c.dep()); got != declared || p.Status.ReplaceInPlace != nil ||
			!conditionIs(&p.Status, v1alpha1.RolledBackCondition, metav1.ConditionTrue, v1alpha1.RollbackSucceededReason) {
			t.Errorf("after the rollback: strategy %s record %+v %v", got, p.Status.ReplaceInPlace, condSummary(p.Status))
		}
	})
}
