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
	"k8s.io/utils/ptr"

	"github.com/openmed/openmed-operator/health"
	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// The API server's answers to a pod the ReplicaSet controller creates, as
// the controller copies them into its FailedCreate condition.
const (
	quotaAnswer   = `pods "openmed-service-7c9d8f6b5-x2xk4" is forbidden: exceeded quota: gpu, requested: requests.nvidia.com/gpu=1, used: requests.nvidia.com/gpu=2, limited: requests.nvidia.com/gpu=2`
	webhookAnswer = `admission webhook "validate.policy.example.com" denied the request: images must come from registry.example.com`
)

// markRefused is the new ReplicaSet's rollout under way with the
// ReplicaFailure the Deployment controller copies from a ReplicaSet whose
// pod create the API server refused at began with answer (both its times
// are the ReplicaSet condition's transition); with deadline, the progress
// deadline passed too.
func (c *cluster) markRefused(began time.Time, answer string, deadline bool) {
	c.setDeploymentStatus(func(d *appsv1.Deployment) {
		n := ptr.Deref(d.Spec.Replicas, 1)
		at := metav1.NewTime(began)
		progressing := appsv1.DeploymentCondition{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetCreated"}
		if deadline {
			now := metav1.NewTime(c.now)
			progressing = appsv1.DeploymentCondition{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded",
				LastUpdateTime: now, LastTransitionTime: now}
		}
		d.Status = appsv1.DeploymentStatus{
			ObservedGeneration: d.Generation,
			Replicas:           n, UpdatedReplicas: 0, ReadyReplicas: n, AvailableReplicas: n,
			Conditions: []appsv1.DeploymentCondition{
				{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable"},
				progressing,
				{Type: appsv1.DeploymentReplicaFailure, Status: corev1.ConditionTrue, Reason: "FailedCreate", Message: answer,
					LastUpdateTime: at, LastTransitionTime: at},
			},
		}
	})
}

// createGatedPod creates a pod of version's template that a scheduling
// gate holds, as an admission system's webhook (Kueue) leaves it and the
// scheduler reports it; it returns the pod's name.
func (c *cluster) createGatedPod(version string, gates ...string) string {
	c.t.Helper()
	pod := c.templatePod(c.owner(), version)
	for _, g := range gates {
		pod.Spec.SchedulingGates = append(pod.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: g})
	}
	if err := env.Client.Create(context.Background(), pod); err != nil {
		c.t.Fatal(err)
	}
	c.setPodStatus(pod.Name, func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodPending
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: corev1.PodReasonSchedulingGated, Message: "Scheduling is blocked due to non-empty scheduling gates", LastTransitionTime: metav1.NewTime(time.Now())}}
	})
	return pod.Name
}

// TestPodCreationRefused: a rollout whose pods the API server refuses (a
// namespace quota, a policy webhook) says so in the first pass that sees
// the Deployment controller's ReplicaFailure, with the API server's answer
// and a reason of its own, as progress in every face for as long as it
// lasts (no grace of its own ends it), and the failure at the progress
// deadline names it (issue 50; before, a ReplicaFailure that lasted a
// minute rolled a healthy version back).
func TestPodCreationRefused(t *testing.T) {
	rollingV2 := func(t *testing.T) *cluster {
		c := newCluster(t)
		c.now = time.Now()
		c.readyAt(v1)
		c.setVersion(v2)
		c.pass()
		return c
	}
	for _, tc := range []struct{ name, answer string }{
		{"a namespace quota", quotaAnswer},
		{"a policy webhook", webhookAnswer},
	} {
		t.Run(tc.name+": progress that names it, until the deadline", func(t *testing.T) {
			c := rollingV2(t)
			began := c.now
			c.markRefused(began, tc.answer, false)
			p := c.pass()
			st := p.Status
			if st.Phase != v1alpha1.PhaseRollingOut || !conditionIs(&st, v1alpha1.ReadyCondition, metav1.ConditionFalse, v1alpha1.PodCreationRefusedReason) ||
				!conditionIs(&st, v1alpha1.ReconcilingCondition, metav1.ConditionTrue, v1alpha1.PodCreationRefusedReason) ||
				!conditionIs(&st, v1alpha1.DegradedCondition, metav1.ConditionFalse, "") {
				t.Fatalf("while refused: %s %v", st.Phase, condSummary(st))
			}
			answer := tc.answer[strings.Index(tc.answer, ": ")+2:]
			if m := kstatusMessage(st); !strings.Contains(m, answer) || !strings.Contains(m, "Rolling out "+v2) {
				t.Errorf("Reconciling says %q, want the API server's answer in it", m)
			}
			if got := kstatusOf(t, c.obj, st); got != "InProgress" {
				t.Errorf("kstatus %s, want InProgress", got)
			}
			if f := argoFace(t, c.obj, st); f.Code != health.Progressing || !strings.Contains(f.Message, answer) {
				t.Errorf("Argo CD: %s %q", f.Code, f.Message)
			}
			assertStrings(t, "events", eventReasons(p.Events), []string{v1alpha1.PodCreationRefusedReason})
			if e := p.Events[0]; e.Type != corev1.EventTypeWarning || !strings.Contains(e.Message, answer) {
				t.Errorf("event %+v", e)
			}
			// However long it lasts: no failure, no event, no write and no
			// timer of its own (the Deployment's status update wakes it).
			c.now = began.Add(time.Hour)
			p = c.decide()
			if len(p.Events) != 0 || !apiequality.Semantic.DeepEqual(c.obj.Status, p.Status) {
				t.Errorf("an hour later: events %v, status %v", eventReasons(p.Events), condSummary(p.Status))
			}
			// The deadline: rolled back, the failure naming the answer.
			c.markRefused(began, tc.answer, true)
			p = c.pass()
			st = p.Status
			if st.Phase != v1alpha1.PhaseRolledBack || !conditionIs(&st, v1alpha1.DegradedCondition, metav1.ConditionTrue, v1alpha1.PodCreationRefusedReason) {
				t.Fatalf("at the deadline: %s %v", st.Phase, condSummary(st))
			}
			if d := apimeta.FindStatusCondition(st.Conditions, v1alpha1.DegradedCondition); !strings.Contains(d.Message, answer) || !strings.Contains(d.Message, "progress deadline") {
				t.Errorf("Degraded: %q", d.Message)
			}
			for _, e := range p.Events {
				if e.Reason == v1alpha1.RolloutFailedReason && !strings.Contains(e.Message, answer) {
					t.Errorf("RolloutFailed event %q does not name it", e.Message)
				}
			}
		})
	}

	t.Run("a freed quota: the rollout goes on and is Ready", func(t *testing.T) {
		c := rollingV2(t)
		c.markRefused(c.now, quotaAnswer, false)
		c.pass()
		c.markReady()
		if p := c.pass(); p.Status.Phase != v1alpha1.PhaseReady || p.Status.ActiveVersion != v2 {
			t.Fatalf("after it cleared: %s %v", p.Status.Phase, condSummary(p.Status))
		}
	})

	t.Run("an old ReplicaSet's, from before the rollout: named, never a failure before the deadline", func(t *testing.T) {
		c := rollingV2(t)
		c.markRefused(c.now.Add(-time.Hour), quotaAnswer, false)
		c.now = c.now.Add(time.Hour)
		if p := c.pass(); p.Status.Phase != v1alpha1.PhaseRollingOut ||
			!conditionIs(&p.Status, v1alpha1.ReadyCondition, metav1.ConditionFalse, v1alpha1.PodCreationRefusedReason) {
			t.Fatalf("%s %v", p.Status.Phase, condSummary(p.Status))
		}
	})
}

// TestQuotaReplacesInPlace: with whenUnschedulable: ReplaceInPlace, a
// quota that refuses the surge pod is a case for replacing pods in place
// (an old pod that goes frees its share), after unschedulableSeconds like
// a pod that finds no node; a webhook's refusal is not (the new pod would
// be refused all the same), nor is a refusal from before the rollout's
// apply (an HPA's scale-up that hit the quota: the Deployment controller
// keeps its first answer, which says nothing of the rollout's pod).
func TestQuotaReplacesInPlace(t *testing.T) {
	for _, tc := range []struct {
		name, answer string
		before       bool
		switches     bool
	}{
		{"a namespace quota", quotaAnswer, false, true},
		{"a policy webhook", webhookAnswer, false, false},
		{"a quota refusal from before the apply", quotaAnswer, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			c.now = time.Now()
			c.readyAt(v1)
			c.editModel(func(m *v1alpha1.OpenMedModel) {
				m.Spec.Version = v2
				m.Spec.RolloutStrategy.WhenUnschedulable = v1alpha1.UnschedulableReplaceInPlace
			})
			c.pass()
			// The refusal's time is kube-controller-manager's, the
			// apply's the API server's, both to the second.
			began := time.Now().Truncate(time.Second).Add(time.Second)
			if tc.before {
				began = began.Add(-time.Hour)
			}
			c.markRefused(began, tc.answer, false)
			c.now = time.Now().Truncate(time.Second).Add(2 * time.Second)
			p := c.pass()
			if p.Status.ReplaceInPlace != nil {
				t.Fatalf("switched before unschedulableSeconds: %+v", p.Status.ReplaceInPlace)
			}
			if tc.switches && (p.RequeueAfter <= 0 || p.RequeueAfter > 31*time.Second || !strings.Contains(kstatusMessage(p.Status), "replaced in place 30s after")) {
				t.Errorf("a timer for the switch: requeue %s, %q", p.RequeueAfter, kstatusMessage(p.Status))
			}
			c.now = c.now.Add(31 * time.Second)
			p = c.pass()
			if got := p.Status.ReplaceInPlace != nil; got != tc.switches {
				t.Fatalf("switched %v, want %v: %v", got, tc.switches, condSummary(p.Status))
			}
			if !tc.switches {
				if !conditionIs(&p.Status, v1alpha1.ReadyCondition, metav1.ConditionFalse, v1alpha1.PodCreationRefusedReason) {
					t.Errorf("waiting: %v", condSummary(p.Status))
				}
				return
			}
			assertStrings(t, "events", eventReasons(p.Events), []string{v1alpha1.ReplacingInPlaceReason})
			if !strings.Contains(p.Events[0].Message, "quota refuses a new pod of "+v2) {
				t.Errorf("event %q", p.Events[0].Message)
			}
		})
	}
}

// TestSchedulingGated: a new pod held by a scheduling gate (Kueue's
// admission) is named with its gate, as progress, never a switch to
// replacing in place (the gate, not capacity, holds it), and the failure
// at the deadline names the gate.
func TestSchedulingGated(t *testing.T) {
	c := newCluster(t)
	c.readyAt(v1)
	c.editModel(func(m *v1alpha1.OpenMedModel) {
		m.Spec.Version = v2
		m.Spec.RolloutStrategy.WhenUnschedulable = v1alpha1.UnschedulableReplaceInPlace
	})
	c.pass()
	c.setDeploymentStatus(func(d *appsv1.Deployment) { c.statusOf(d, 3, 1, 2, 2) })
	pod := c.createGatedPod(v2, "kueue.x-k8s.io/admission")
	c.now = time.Now().Add(time.Hour)
	p := c.pass()
	st := p.Status
	if st.Phase != v1alpha1.PhaseRollingOut || !conditionIs(&st, v1alpha1.ReadyCondition, metav1.ConditionFalse, v1alpha1.SchedulingGatedReason) ||
		st.ReplaceInPlace != nil {
		t.Fatalf("while gated: %s %v record %+v", st.Phase, condSummary(st), st.ReplaceInPlace)
	}
	want := "pod " + pod + " waits for admission: scheduling gate kueue.x-k8s.io/admission"
	if m := kstatusMessage(st); !strings.Contains(m, want) {
		t.Errorf("Reconciling says %q, want %q in it", m, want)
	}
	if got := kstatusOf(t, c.obj, st); got != "InProgress" {
		t.Errorf("kstatus %s", got)
	}
	assertStrings(t, "events", eventReasons(p.Events), []string{v1alpha1.SchedulingGatedReason})
	c.markFailed()
	st = c.pass().Status
	d := apimeta.FindStatusCondition(st.Conditions, v1alpha1.DegradedCondition)
	if st.Phase != v1alpha1.PhaseRolledBack || d.Reason != v1alpha1.SchedulingGatedReason || !strings.Contains(d.Message, "kueue.x-k8s.io/admission") {
		t.Fatalf("at the deadline: %s %v %q", st.Phase, condSummary(st), d.Message)
	}
}

// TestUnschedulableNamesClaims: a pod the scheduler cannot place because
// no device is free for its DRA claims ("cannot allocate all claims") is
// named with its claims and the templates they are made from.
func TestUnschedulableNamesClaims(t *testing.T) {
	c := newCluster(t)
	c.readyAt(v1)
	c.setVersion(v2)
	c.pass()
	c.setDeploymentStatus(func(d *appsv1.Deployment) { c.statusOf(d, 3, 1, 2, 2) })
	pod := c.templatePod(c.owner(), v2)
	pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("gpu-claim")}}
	if err := env.Client.Create(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	c.setPodStatus(pod.Name, func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodPending
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
			Message: "0/1 nodes are available: 1 cannot allocate all claims.", LastTransitionTime: metav1.NewTime(time.Now())}}
	})
	st := c.pass().Status
	want := "cannot allocate all claims. (DRA claims: gpu from template gpu-claim)"
	if m := kstatusMessage(st); !conditionIs(&st, v1alpha1.ReadyCondition, metav1.ConditionFalse, v1alpha1.UnschedulableReason) || !strings.Contains(m, want) {
		t.Errorf("%v %q, want %q in it", condSummary(st), m, want)
	}
}
