package rollout

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/openmed/openmed-operator/health"
	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// goldenRequest is the fixture's spec.verification: /pii/extract must find
// the synthetic patient's name.
func goldenRequest() *v1alpha1.Verification {
	return &v1alpha1.Verification{
		Request: v1alpha1.VerificationRequest{
			Port: intstr.FromString("http"),
			Path: "/pii/extract",
			Body: `{"text":"Patient John Smith was seen on 2024-01-02.","model_name":"pii","confidence_threshold":0.5}`,
		},
		SuccessCondition: `response.code == 200 && response.json.entities.exists(e, e.label == "NAME" && e.text == "John Smith")`,
	}
}

// gates are the condition types of the readiness gates of d's pod
// template.
func gates(d *appsv1.Deployment) []string {
	var out []string
	for _, g := range d.Spec.Template.Spec.ReadinessGates {
		out = append(out, string(g.ConditionType))
	}
	return out
}

// createVerifiablePod creates a running pod of version whose template
// carries the gate: its containers are ready, only the gate holds it (the
// kubelet reports Ready False for it). verdict, when set, is its
// openmed.ai/verified condition.
func (c *cluster) createVerifiablePod(version string, verdict *corev1.PodCondition) string {
	c.t.Helper()
	pod := c.templatePod(c.owner(), version)
	pod.Labels[v1alpha1.BakeLabel] = "true"
	pod.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: v1alpha1.VerifiedCondition}}
	pod.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}
	if err := env.Client.Create(context.Background(), pod); err != nil {
		c.t.Fatal(err)
	}
	c.setPodStatus(pod.Name, func(p *corev1.Pod) {
		at := metav1.NewTime(time.Now())
		ready := corev1.ConditionFalse
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: at}}
		if verdict != nil {
			p.Status.Conditions = append(p.Status.Conditions, *verdict)
			if verdict.Status == corev1.ConditionTrue {
				ready = corev1.ConditionTrue
			}
		}
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: ready, LastTransitionTime: at})
		p.Status.Phase = corev1.PodRunning
		p.Status.PodIP, p.Status.PodIPs = "10.244.0.7", []corev1.PodIP{{IP: "10.244.0.7"}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "openmed-service", Ready: true, Started: ptr.To(true), Image: "openmed:2.2.0", ImageID: "x",
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: at}}}}
	})
	return pod.Name
}

// verdict is a pod's openmed.ai/verified condition as the operator writes
// it, probed at probed.
func verdict(status corev1.ConditionStatus, message string, probed time.Time) *corev1.PodCondition {
	reason := v1alpha1.PodVerifiedReason
	if status != corev1.ConditionTrue {
		reason = v1alpha1.PodVerificationFailedReason
	}
	at := metav1.NewTime(probed.Truncate(time.Second))
	return &corev1.PodCondition{Type: v1alpha1.VerifiedCondition, Status: status, Reason: reason, Message: message,
		LastProbeTime: at, LastTransitionTime: at}
}

// TestVerificationGate: the readiness gate goes on the pod template with
// the apply that rolls a version, never with one of its own; the
// template's other gates stay (readinessGates is an atomic list the
// operator sends whole); a release gives them back.
func TestVerificationGate(t *testing.T) {
	t.Run("on with the version's apply, in the same generation", func(t *testing.T) {
		c := newCluster(t)
		c.editModel(func(m *v1alpha1.OpenMedModel) { m.Spec.Verification = goldenRequest() })
		c.readyAt(v1)
		before := c.dep().Generation
		c.setVersion(v2)
		c.pass()
		d := c.dep()
		assertStrings(t, "gates", gates(d), []string{v1alpha1.VerifiedCondition})
		if d.Spec.Template.Labels[v1alpha1.BakeLabel] != "true" {
			t.Errorf("template labels %v: the pod store selects gated pods by the bake label", d.Spec.Template.Labels)
		}
		if d.Generation != before+1 {
			t.Errorf("generation %d → %d: the version's apply rolls once", before, d.Generation)
		}
	})

	t.Run("declared for a version that serves: no roll of its own", func(t *testing.T) {
		c := newCluster(t)
		c.readyAt(v1)
		before := c.dep().Generation
		c.editModel(func(m *v1alpha1.OpenMedModel) { m.Spec.Verification = goldenRequest() })
		p := c.pass()
		if d := c.dep(); d.Generation != before || len(gates(d)) != 0 || p.Status.Phase != v1alpha1.PhaseReady {
			t.Fatalf("generation %d → %d, gates %v, %s", before, d.Generation, gates(d), p.Status.Phase)
		}
		c.setVersion(v2)
		c.pass()
		assertStrings(t, "gates of the next version", gates(c.dep()), []string{v1alpha1.VerifiedCondition})
	})

	t.Run("a chart's own gate stays, through the apply, the removal and the release", func(t *testing.T) {
		c := newClusterWith(t, func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: "target-health.example.com/lb"}}
		})
		c.editModel(func(m *v1alpha1.OpenMedModel) { m.Spec.Verification = goldenRequest() })
		c.readyAt(v1)
		assertStrings(t, "gates", gates(c.dep()), []string{"target-health.example.com/lb", v1alpha1.VerifiedCondition})
		c.editModel(func(m *v1alpha1.OpenMedModel) { m.Spec.Verification = nil })
		c.pass()
		assertStrings(t, "gates after verification went, same version", gates(c.dep()), []string{"target-health.example.com/lb", v1alpha1.VerifiedCondition})
		c.setVersion(v2)
		c.pass()
		assertStrings(t, "gates of the next version", gates(c.dep()), []string{"target-health.example.com/lb"})
		c.editModel(func(m *v1alpha1.OpenMedModel) { m.Spec.Verification = goldenRequest() })
		c.markReady()
		c.pass()
		c.setVersion(v3)
		c.pass()
		assertStrings(t, "gates of v3", gates(c.dep()), []string{"target-health.example.com/lb", v1alpha1.VerifiedCondition})
		c.deleteModel()
		if p := c.pass(); !p.RemoveFinalizer {
			t.Fatalf("the deletion pass keeps the finalizer")
		}
		assertStrings(t, "gates after the release", gates(c.dep()), []string{"target-health.example.com/lb"})
	})

	t.Run("the gate removed by kubectl edit during a rollout is drift, put back; from a serving version, back with the next", func(t *testing.T) {
		c := newCluster(t)
		c.editModel(func(m *v1alpha1.OpenMedModel) { m.Spec.Verification = goldenRequest() })
		c.readyAt(v1)
		c.setVersion(v2)
		c.pass()
		c.editDeployment("kubectl-edit", func(d *appsv1.Deployment) { d.Spec.Template.Spec.ReadinessGates = nil })
		p := c.pass()
		assertStrings(t, "gates", gates(c.dep()), []string{v1alpha1.VerifiedCondition})
		if !slices.ContainsFunc(p.Drift, func(d Drift) bool { return strings.Contains(d.Field, "readinessGates") }) {
			t.Errorf("drift %+v does not name the gate", p.Drift)
		}
		c.markReady()
		if p := c.pass(); p.Status.Phase != v1alpha1.PhaseReady {
			t.Fatalf("%s %v", p.Status.Phase, condSummary(p.Status))
		}
		c.editDeployment("kubectl-edit", func(d *appsv1.Deployment) { d.Spec.Template.Spec.ReadinessGates = nil })
		before := c.dep().Generation
		c.pass()
		if d := c.dep(); d.Generation != before || len(gates(d)) != 0 {
			t.Errorf("a serving version rolled for its gate: generation %d → %d, gates %v", before, d.Generation, gates(d))
		}
		c.setVersion(v3)
		c.pass()
		assertStrings(t, "gates of v3", gates(c.dep()), []string{v1alpha1.VerifiedCondition})
	})
}

// TestVerificationDecides: which pods the core asks, what the model says
// meanwhile, and what a verdict decides.
func TestVerificationDecides(t *testing.T) {
	rollingV2 := func(t *testing.T, mutate func(*v1alpha1.OpenMedModel)) *cluster {
		c := newCluster(t)
		c.now = time.Now()
		c.editModel(func(m *v1alpha1.OpenMedModel) { m.Spec.Verification = goldenRequest() })
		c.readyAt(v1)
		c.editModel(func(m *v1alpha1.OpenMedModel) {
			m.Spec.Version = v2
			if mutate != nil {
				mutate(m)
			}
		})
		c.pass()
		c.markRolling()
		return c
	}

	t.Run("a new pod ready but for the gate: asked, and the rollout says so", func(t *testing.T) {
		c := rollingV2(t, nil)
		pod := c.createVerifiablePod(v2, nil)
		p := c.pass()
		if len(p.Verify) != 1 || p.Verify[0].Pod != pod || p.Verify[0].Port != 8080 || p.Verify[0].IP != "10.244.0.7" || p.Verify[0].Pass {
			t.Fatalf("Verify = %+v, want pod %s on 10.244.0.7:8080", p.Verify, pod)
		}
		if !p.WatchesPods {
			t.Error("the verdict must wake the model: WatchesPods is false")
		}
		if p.Timer <= 0 {
			t.Error("no timer: a verdict that never comes (its write failed, the operator stopped) would never be asked for again")
		}
		st := p.Status
		if st.Phase != v1alpha1.PhaseRollingOut || !conditionIs(&st, v1alpha1.ReadyCondition, metav1.ConditionFalse, v1alpha1.VerifyingReason) {
			t.Fatalf("%s %v", st.Phase, condSummary(st))
		}
		if m := kstatusMessage(st); !strings.Contains(m, "verifying pod "+pod) {
			t.Errorf("Reconciling says %q", m)
		}
		if f := argoFace(t, c.obj, st); f.Code != health.Progressing || !strings.Contains(f.Message, "verifying pod "+pod) {
			t.Errorf("Argo CD: %s %q", f.Code, f.Message)
		}
		if got := kstatusOf(t, c.obj, st); got != "InProgress" {
			t.Errorf("kstatus %s", got)
		}
	})

	t.Run("a pod that failed every attempt: rolled back at once, naming the pod and what it lacked", func(t *testing.T) {
		c := rollingV2(t, nil)
		lacked := `answered 200 but response.json.entities.exists(e, e.label == "NAME" && e.text == "John Smith") is false`
		pod := c.createVerifiablePod(v2, verdict(corev1.ConditionFalse, "POST /pii/extract failed 3 of 3 attempts: "+lacked, c.now))
		p := c.pass()
		st := p.Status
		if st.Phase != v1alpha1.PhaseRolledBack || !conditionIs(&st, v1alpha1.DegradedCondition, metav1.ConditionTrue, v1alpha1.VerificationFailedReason) {
			t.Fatalf("%s %v", st.Phase, condSummary(st))
		}
		d := apimeta.FindStatusCondition(st.Conditions, v1alpha1.DegradedCondition)
		if !strings.Contains(d.Message, "pod "+pod) || !strings.Contains(d.Message, lacked) {
			t.Errorf("Degraded: %q", d.Message)
		}
		failed := slices.IndexFunc(p.Events, func(e Event) bool { return e.Reason == v1alpha1.RolloutFailedReason })
		if failed < 0 || p.Events[failed].Type != corev1.EventTypeWarning || !strings.Contains(p.Events[failed].Message, lacked) {
			t.Errorf("events %+v", p.Events)
		}
		if len(p.Verify) != 0 {
			t.Errorf("a failed pod is not asked again during its rollout: %+v", p.Verify)
		}
		// Every pass that holds the failed version still names it.
		c.pass()
		p = c.pass()
		if d := apimeta.FindStatusCondition(p.Status.Conditions, v1alpha1.DegradedCondition); d == nil || d.Reason != v1alpha1.VerificationFailedReason || !strings.Contains(d.Message, lacked) {
			t.Errorf("held: Degraded %+v", d)
		}
	})

	t.Run("the first version fails: Failed, and Progressing names the request, not a deadline", func(t *testing.T) {
		c := newCluster(t)
		c.now = time.Now()
		c.editModel(func(m *v1alpha1.OpenMedModel) { m.Spec.Verification = goldenRequest() })
		c.pass()
		c.markRolling()
		c.createVerifiablePod(v1, verdict(corev1.ConditionFalse, "POST /pii/extract failed 3 of 3 attempts: answered 500", c.now))
		for range 2 {
			p := c.pass()
			st := p.Status
			pr := apimeta.FindStatusCondition(st.Conditions, v1alpha1.ProgressingCondition)
			if st.Phase != v1alpha1.PhaseFailed || pr == nil || pr.Status != metav1.ConditionFalse || pr.Reason != v1alpha1.VerificationFailedReason ||
				!conditionIs(&st, v1alpha1.DegradedCondition, metav1.ConditionTrue, v1alpha1.VerificationFailedReason) {
				t.Fatalf("%s %v", st.Phase, condSummary(st))
			}
		}
	})

	t.Run("through the bake: every pod asked again each interval", func(t *testing.T) {
		c := rollingV2(t, func(m *v1alpha1.OpenMedModel) {
			m.Spec.RolloutStrategy.BakeSeconds = ptr.To(int32(600))
			m.Spec.Verification.IntervalSeconds = ptr.To(int32(30))
		})
		pod := c.createVerifiablePod(v2, verdict(corev1.ConditionTrue, "POST /pii/extract answered 200", c.now))
		c.markReady()
		p := c.pass()
		if !conditionIs(&p.Status, v1alpha1.ReadyCondition, metav1.ConditionFalse, v1alpha1.BakingReason) {
			t.Fatalf("not baking: %v", condSummary(p.Status))
		}
		if len(p.Verify) != 0 || p.Timer <= 0 || p.Timer > 31*time.Second {
			t.Fatalf("just verified: Verify %+v, timer %s; want none now and a timer within the interval", p.Verify, p.Timer)
		}
		c.now = c.now.Add(31 * time.Second)
		p = c.pass()
		if len(p.Verify) != 1 || p.Verify[0].Pod != pod || p.Verify[0].Was != corev1.ConditionTrue {
			t.Fatalf("after the interval: Verify %+v", p.Verify)
		}
		// A wrong answer during the bake fails it like a crash does.
		c.setPodStatus(pod, func(p *corev1.Pod) {
			for i := range p.Status.Conditions {
				if p.Status.Conditions[i].Type == v1alpha1.VerifiedCondition {
					p.Status.Conditions[i] = *verdict(corev1.ConditionFalse, "POST /pii/extract failed 3 of 3 attempts: answered 500", c.now)
				}
			}
		})
		p = c.pass()
		if p.Status.Phase != v1alpha1.PhaseRolledBack || !conditionIs(&p.Status, v1alpha1.DegradedCondition, metav1.ConditionTrue, v1alpha1.VerificationFailedReason) {
			t.Fatalf("after a wrong answer in the bake: %s %v", p.Status.Phase, condSummary(p.Status))
		}
	})

	t.Run("a Ready version whose pods are verified asks nothing", func(t *testing.T) {
		c := rollingV2(t, nil)
		c.createVerifiablePod(v2, verdict(corev1.ConditionTrue, "POST /pii/extract answered 200", c.now))
		c.markReady()
		p := c.pass()
		if p.Status.Phase != v1alpha1.PhaseReady {
			t.Fatalf("%s %v", p.Status.Phase, condSummary(p.Status))
		}
		c.now = c.now.Add(time.Hour)
		if p := c.pass(); len(p.Verify) != 0 || p.WatchesPods || p.Timer != 0 {
			t.Errorf("steady state: Verify %+v, watches pods %v, timer %s", p.Verify, p.WatchesPods, p.Timer)
		}
	})

	t.Run("a scale-up's pod of a Ready version is asked; one that failed is asked again after the interval", func(t *testing.T) {
		c := rollingV2(t, nil)
		c.createVerifiablePod(v2, verdict(corev1.ConditionTrue, "answered 200", c.now))
		c.markReady()
		c.pass()
		added := c.createVerifiablePod(v2, nil)
		if p := c.pass(); len(p.Verify) != 1 || p.Verify[0].Pod != added || p.Status.Phase != v1alpha1.PhaseReady {
			t.Fatalf("scale-up: Verify %+v, %s", p.Verify, p.Status.Phase)
		}
		failed := c.createVerifiablePod(v2, verdict(corev1.ConditionFalse, "answered 503", c.now))
		p := c.pass()
		if p.Status.Phase != v1alpha1.PhaseReady || slices.ContainsFunc(p.Verify, func(v PodVerification) bool { return v.Pod == failed }) {
			t.Fatalf("a serving version's failed pod: %s, Verify %+v", p.Status.Phase, p.Verify)
		}
		c.now = c.now.Add(time.Minute)
		if p := c.pass(); !slices.ContainsFunc(p.Verify, func(v PodVerification) bool { return v.Pod == failed && v.Was == corev1.ConditionFalse }) {
			t.Errorf("after the interval: Verify %+v", p.Verify)
		}
	})

	t.Run("verification removed, the template still gated: pods pass without a request", func(t *testing.T) {
		c := rollingV2(t, nil)
		c.editModel(func(m *v1alpha1.OpenMedModel) { m.Spec.Verification = nil })
		pod := c.createVerifiablePod(v2, nil)
		p := c.pass()
		if len(p.Verify) != 1 || p.Verify[0].Pod != pod || !p.Verify[0].Pass {
			t.Fatalf("Verify %+v, want %s passed without a request", p.Verify, pod)
		}
	})

	t.Run("a port name no container has: port 0, which fails the pod", func(t *testing.T) {
		c := rollingV2(t, func(m *v1alpha1.OpenMedModel) { m.Spec.Verification.Request.Port = intstr.FromString("grpc") })
		c.createVerifiablePod(v2, nil)
		if p := c.pass(); len(p.Verify) != 1 || p.Verify[0].Port != 0 {
			t.Fatalf("Verify %+v", p.Verify)
		}
	})

	t.Run("a pod copied into the namespace, not the target's: never asked, never judged", func(t *testing.T) {
		c := rollingV2(t, nil)
		pod := c.templatePod(c.owner(), v2)
		pod.OwnerReferences = nil
		pod.Labels[v1alpha1.BakeLabel] = "true"
		pod.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: v1alpha1.VerifiedCondition}}
		if err := env.Client.Create(context.Background(), pod); err != nil {
			t.Fatal(err)
		}
		c.setPodStatus(pod.Name, func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodRunning
			p.Status.PodIP = "10.244.0.9"
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.ContainersReady, Status: corev1.ConditionTrue},
				*verdict(corev1.ConditionFalse, "answered 500", c.now)}
		})
		if p := c.pass(); len(p.Verify) != 0 || p.Status.Phase != v1alpha1.PhaseRollingOut {
			t.Fatalf("a copy: Verify %+v, %s %v", p.Verify, p.Status.Phase, condSummary(p.Status))
		}
	})
}
