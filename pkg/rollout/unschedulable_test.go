package rollout

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/health"
	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// gpuVerdict is the default scheduler's message for a pod that asks for a
// GPU on a cluster whose GPUs are all taken.
const gpuVerdict = "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."

// createUnschedulablePod creates a pod of version's template that the
// scheduler could not place, as the ReplicaSet controller creates it and
// the scheduler reports it; it returns the pod's name.
func (c *cluster) createUnschedulablePod(version, verdict string) string {
	return c.createUnschedulablePodOf(c.owner(), version, verdict)
}

// createUnschedulablePodOf is createUnschedulablePod for the model owner
// ("namespace/name").
func (c *cluster) createUnschedulablePodOf(owner, version, verdict string) string {
	c.t.Helper()
	pod := c.templatePod(owner, version)
	if err := env.Client.Create(context.Background(), pod); err != nil {
		c.t.Fatal(err)
	}
	c.setPodStatus(pod.Name, func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodPending
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: corev1.PodReasonUnschedulable, Message: verdict, LastTransitionTime: metav1.NewTime(time.Now())}}
	})
	return pod.Name
}

// argoFace is the Argo CD health (the Go face of the health check) of the
// model with status st.
func argoFace(t *testing.T, obj *v1alpha1.OpenMedModel, st v1alpha1.OpenMedModelStatus) health.Result {
	t.Helper()
	return health.Assess(withStatus(t, obj, st))
}

// TestUnschedulable: a rollout whose new pod the scheduler cannot place
// says so with the scheduler's message, as progress (Argo CD Progressing,
// kstatus InProgress, never Degraded) until the deadline, and the failure
// at the deadline names what the scheduler could not find.
func TestUnschedulable(t *testing.T) {
	rollingV2 := func(t *testing.T) *cluster {
		c := newCluster(t)
		c.readyAt(v1)
		c.setVersion(v2)
		c.pass()
		c.setDeploymentStatus(func(d *appsv1.Deployment) { c.statusOf(d, 3, 1, 2, 2) })
		return c
	}

	t.Run("a new pod that cannot be scheduled is progress that says why", func(t *testing.T) {
		c := rollingV2(t)
		c.pass()
		pod := c.createUnschedulablePod(v2, gpuVerdict)
		p := c.pass()
		st := p.Status
		if st.Phase != v1alpha1.PhaseRollingOut || !conditionIs(&st, v1alpha1.ReadyCondition, metav1.ConditionFalse, v1alpha1.UnschedulableReason) ||
			!conditionIs(&st, v1alpha1.ReconcilingCondition, metav1.ConditionTrue, v1alpha1.UnschedulableReason) ||
			!conditionIs(&st, v1alpha1.DegradedCondition, metav1.ConditionFalse, "") {
			t.Fatalf("%s %v", st.Phase, condSummary(st))
		}
		msg := kstatusMessage(st)
		for _, want := range []string{"Rolling out " + v2, pod, "Insufficient nvidia.com/gpu"} {
			if !strings.Contains(msg, want) {
				t.Errorf("Reconciling says %q, want %q in it", msg, want)
			}
		}
		if got := kstatusOf(t, c.obj, st); got != "InProgress" {
			t.Errorf("kstatus %s, want InProgress", got)
		}
		if f := argoFace(t, c.obj, st); f.Code != health.Progressing || !strings.Contains(f.Message, "Insufficient nvidia.com/gpu") {
			t.Errorf("Argo CD: %s %q", f.Code, f.Message)
		}
		assertStrings(t, "events", eventReasons(p.Events), []string{v1alpha1.UnschedulableReason})
		if e := p.Events[0]; e.Type != corev1.EventTypeWarning || !strings.Contains(e.Message, pod) || !strings.Contains(e.Message, "Insufficient nvidia.com/gpu") {
			t.Errorf("event %+v", e)
		}
		// The next pass, with nothing new, says it again without an event
		// and without a write.
		p = c.decide()
		if len(p.Events) != 0 || !apiequality.Semantic.DeepEqual(c.obj.Status, p.Status) {
			t.Errorf("a second pass: events %v, status changed %v", eventReasons(p.Events), condSummary(p.Status))
		}
	})

	t.Run("the scheduler's message is bounded", func(t *testing.T) {
		c := rollingV2(t)
		c.createUnschedulablePod(v2, strings.Repeat("0/4000 nodes are available: 4000 Insufficient nvidia.com/gpu. ", 40))
		st := c.pass().Status
		if n := len(kstatusMessage(st)); n > 600 {
			t.Errorf("Reconciling message of %d bytes", n)
		}
	})

	t.Run("a pod of another version or another model does not count", func(t *testing.T) {
		c := rollingV2(t)
		c.createUnschedulablePod(v1, gpuVerdict)
		c.createUnschedulablePodOf(c.ns+"/another-model", v2, gpuVerdict)
		st := c.pass().Status
		if conditionIs(&st, v1alpha1.ReadyCondition, metav1.ConditionFalse, v1alpha1.UnschedulableReason) {
			t.Errorf("%v", condSummary(st))
		}
	})

	// A copy of the pod template in another tenant's namespace, filed
	// under the model by its owner annotation, and a pod of the model's
	// namespace whose controller reference names the target's ReplicaSet
	// with another UID: neither is the version's pod.
	t.Run("a pod that only claims to belong does not count", func(t *testing.T) {
		c := rollingV2(t)
		other := newCluster(t)
		copied := other.createUnschedulablePodOf(c.owner(), v2, gpuVerdict)
		forged := c.templatePod(c.owner(), v2)
		forged.OwnerReferences[0].UID = "0e7d1c4b-forged"
		if err := env.Client.Create(context.Background(), forged); err != nil {
			t.Fatal(err)
		}
		c.setPodStatus(forged.Name, func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodPending
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
				Reason: corev1.PodReasonUnschedulable, Message: gpuVerdict, LastTransitionTime: metav1.NewTime(time.Now())}}
		})
		obs := c.observed()
		pod := corev1.Pod{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: other.ns, Name: copied}, &pod); err != nil {
			t.Fatal(err)
		}
		obs.PendingPods = append(obs.PendingPods, pod)
		if len(obs.PendingPods) != 2 {
			t.Fatalf("%d pending pods observed, want the forged reference and the copy", len(obs.PendingPods))
		}
		st := decideWith(t, c.obj, obs, c.opts).Status
		if conditionIs(&st, v1alpha1.ReadyCondition, metav1.ConditionFalse, v1alpha1.UnschedulableReason) || strings.Contains(kstatusMessage(st), copied) {
			t.Errorf("a pod that only claims to belong is the version's: %v", condSummary(st))
		}
		// The version's own pod does count.
		own := c.createUnschedulablePod(v2, gpuVerdict)
		obs = c.observed()
		obs.PendingPods = append(obs.PendingPods, pod)
		st = decideWith(t, c.obj, obs, c.opts).Status
		if !conditionIs(&st, v1alpha1.ReadyCondition, metav1.ConditionFalse, v1alpha1.UnschedulableReason) || !strings.Contains(kstatusMessage(st), own) {
			t.Errorf("the version's own pod does not count: %v", condSummary(st))
		}
	})

	t.Run("once the pod is placed the rollout reads as before", func(t *testing.T) {
		c := rollingV2(t)
		pod := c.createUnschedulablePod(v2, gpuVerdict)
		c.pass()
		c.setPodStatus(pod, func(p *corev1.Pod) {
			p.Status.Conditions[0] = corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(time.Now())}
		})
		st := c.pass().Status
		if !conditionIs(&st, v1alpha1.ReconcilingCondition, metav1.ConditionTrue, v1alpha1.RolloutInProgressReason) || strings.Contains(kstatusMessage(st), "scheduled") {
			t.Errorf("%v %q", condSummary(st), kstatusMessage(st))
		}
	})

	t.Run("the deadline's failure names the capacity for as long as it holds the version", func(t *testing.T) {
		c := rollingV2(t)
		pod := c.createUnschedulablePod(v2, gpuVerdict)
		c.pass()
		c.markFailed()
		p := c.pass()
		st := p.Status
		if st.Phase != v1alpha1.PhaseRolledBack || !conditionIs(&st, v1alpha1.DegradedCondition, metav1.ConditionTrue, v1alpha1.UnschedulableReason) {
			t.Fatalf("%s %v", st.Phase, condSummary(st))
		}
		assertStrings(t, "events", eventReasons(p.Events), []string{v1alpha1.RolloutFailedReason, v1alpha1.RollbackStartedReason})
		if m := p.Events[0].Message; !strings.Contains(m, "exceeded its deadline") || !strings.Contains(m, pod) || !strings.Contains(m, "Insufficient nvidia.com/gpu") {
			t.Errorf("RolloutFailed event: %q", m)
		}
		c.pass() // applies the rollback
		c.markReady()
		st = c.pass().Status
		if !conditionIs(&st, v1alpha1.RolledBackCondition, metav1.ConditionTrue, v1alpha1.RollbackSucceededReason) ||
			!conditionIs(&st, v1alpha1.DegradedCondition, metav1.ConditionTrue, v1alpha1.UnschedulableReason) {
			t.Fatalf("after the rollback: %v", condSummary(st))
		}
		stalled := apimeta.FindStatusCondition(st.Conditions, v1alpha1.StalledCondition)
		if stalled == nil || !strings.Contains(stalled.Message, "could not be scheduled") || !strings.Contains(stalled.Message, "Insufficient nvidia.com/gpu") ||
			!strings.Contains(stalled.Message, "serving the retained "+v1) {
			t.Errorf("Stalled: %+v", stalled)
		}
		if f := argoFace(t, c.obj, st); f.Code != health.Degraded || !strings.Contains(f.Message, "Insufficient nvidia.com/gpu") {
			t.Errorf("Argo CD: %s %q", f.Code, f.Message)
		}
		// A new spec clears the cause.
		c.setVersion(v3)
		st = c.pass().Status
		if conditionIs(&st, v1alpha1.DegradedCondition, metav1.ConditionTrue, v1alpha1.UnschedulableReason) {
			t.Errorf("the next version inherits the cause: %v", condSummary(st))
		}
	})

	t.Run("a first version that cannot be scheduled fails naming it, and keeps saying it", func(t *testing.T) {
		c := newCluster(t)
		c.pass()
		c.setDeploymentStatus(func(d *appsv1.Deployment) { c.statusOf(d, 3, 1, 2, 2) })
		c.createUnschedulablePod(v1, gpuVerdict)
		c.pass()
		c.markFailed()
		for i := range 2 {
			st := c.pass().Status
			if st.Phase != v1alpha1.PhaseFailed || !conditionIs(&st, v1alpha1.DegradedCondition, metav1.ConditionTrue, v1alpha1.UnschedulableReason) ||
				!strings.Contains(kstatusMessage(st), "Insufficient nvidia.com/gpu") {
				t.Fatalf("pass %d after the deadline: %s %v %q", i+1, st.Phase, condSummary(st), kstatusMessage(st))
			}
		}
	})
}
