package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/rollout"
)

// TestBakeReadsPodsThroughItsStore runs a bake on the real API server with
// pods written as the kubelet writes them: the operator's pod store holds
// the pods with the bake label and wakes their model. A crashed pod
// without the label and a crashed pod of the previous template sort first
// and would fail the bake as ContainerRestarted if they were read; the
// baking version's pod is then OOM-killed and the bake fails as OOMKilled,
// rolled back to the retained version, which history keeps alone.
func TestBakeReadsPodsThroughItsStore(t *testing.T) {
	ctx := context.Background()
	ns, op := readyAtV1(t, 2)
	v1Hash := getDeployment(t, ns, "svc").Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation]

	patchModel(t, ns, "svc", func(m *v1alpha1.OpenMedModel) {
		m.Spec.Version = "OpenMed/pii-v2"
		m.Spec.RolloutStrategy.BakeSeconds = ptr.To[int32](600)
	})
	waitFor(t, ns, "svc", v1alpha1.PhaseRollingOut)
	// The Deployment itself says when the apply landed (the status may be
	// written before the act).
	var v2Hash string
	eventually(t, "the baking template applied", func() (bool, string) {
		d := getDeployment(t, ns, "svc")
		v2Hash = d.Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation]
		return d.Spec.Template.Labels[v1alpha1.BakeLabel] == "true" && v2Hash != v1Hash,
			fmt.Sprintf("labels %v, hash %q (v1 %q)", d.Spec.Template.Labels, v2Hash, v1Hash)
	})
	updateDeploymentStatus(t, ns, "svc", rolloutComplete)
	waitFor(t, ns, "svc", v1alpha1.PhaseRollingOut, v1alpha1.BakingReason)

	owner := ns + "/svc"
	pod := func(name, hash string, labelled bool) {
		t.Helper()
		short := strings.TrimPrefix(hash, "sha256:")[:10] // a pod-template-hash stand-in, one per template
		labels := map[string]string{"app": "svc", appsv1.DefaultDeploymentUniqueLabelKey: short}
		if labelled {
			labels[v1alpha1.BakeLabel] = "true"
		}
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels,
				Annotations: map[string]string{v1alpha1.ManifestHashAnnotation: hash, v1alpha1.ModelResourceAnnotation: owner},
				// The ReplicaSet controller's owner reference: the bake
				// reads only pods of the target's ReplicaSets.
				OwnerReferences: []metav1.OwnerReference{templateReplicaSet(t, getDeployment(t, ns, "svc"), short)}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "openmed-service", Image: "openmed:2.2.0"}}},
		}
		if err := env.Client.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	status := func(name string, terminated *corev1.ContainerStateTerminated) {
		t.Helper()
		p := &corev1.Pod{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, p); err != nil {
			t.Fatal(err)
		}
		now := metav1.Now()
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}}
		cs := corev1.ContainerStatus{Name: "openmed-service", Image: "openmed:2.2.0", Ready: true, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}
		if terminated != nil {
			cs.RestartCount = 1
			cs.LastTerminationState.Terminated = terminated
		}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{cs}
		if err := env.Client.Status().Update(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	crashed := &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", FinishedAt: metav1.Now()}
	pod("a-unlabelled", v2Hash, false)
	status("a-unlabelled", crashed)
	pod("b-previous-template", v1Hash, true)
	status("b-previous-template", crashed)
	pod("c-baking", v2Hash, true)
	status("c-baking", nil)
	status("c-baking", &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled", FinishedAt: metav1.Now()})

	got := waitFor(t, ns, "svc", v1alpha1.PhaseRolledBack)
	if c := condition(got, v1alpha1.DegradedCondition); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Degraded = %+v", c)
	}
	msgs := recordedEvents(t, ns, "svc", v1alpha1.RolloutFailedReason, 1)
	if len(msgs) != 1 || !strings.Contains(msgs[0], rollout.BakeOOMKilled) {
		t.Errorf("RolloutFailed events %q, want one naming %s (a pod the store must not hold was read if it says %s)", msgs, rollout.BakeOOMKilled, rollout.BakeContainerRestarted)
	}
	if n := op.metric(t, "openmed_bake_failures_total", map[string]string{"namespace": ns, "reason": rollout.BakeOOMKilled}); n != 1 {
		t.Errorf("openmed_bake_failures_total{reason=OOMKilled} = %v, want 1", n)
	}
	// The rollback's status is written ahead of its apply: wait for the
	// Deployment to show it.
	eventually(t, "the rollback's template applied", func() (bool, string) {
		h := getDeployment(t, ns, "svc").Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation]
		return h == v1Hash, fmt.Sprintf("hash %q, want v1's %q", h, v1Hash)
	})
	if len(got.Status.History) != 1 || got.Status.ActiveVersion != "OpenMed/pii-v1" {
		t.Errorf("history %d, active %q: only v1 baked", len(got.Status.History), got.Status.ActiveVersion)
	}
}

// TestBakePodsWakeOnlyABake: the bake pod store wakes a model only while
// its passes judge a bake. While the version's Deployment rolls, its pod
// comes, turns Ready and changes five times without waking the model (the
// store keeps every change: openmed_wakes_total{source="bake-pod"} stays
// at most 1, an event that met a pass of the model in flight); once the
// Deployment completed the model bakes, and an OOM kill of that pod wakes
// it and fails the bake.
func TestBakePodsWakeOnlyABake(t *testing.T) {
	// An operator of this namespace only: the counter is the process's.
	ns, op := rollingOutV1(t, 1)
	updateDeploymentStatus(t, ns, "svc", rolloutComplete)
	waitFor(t, ns, "svc", v1alpha1.PhaseReady, v1alpha1.RolloutSucceededReason)
	patchModel(t, ns, "svc", func(m *v1alpha1.OpenMedModel) {
		m.Spec.Version = "OpenMed/pii-v2"
		m.Spec.RolloutStrategy.BakeSeconds = ptr.To[int32](600)
	})
	var d *appsv1.Deployment
	eventually(t, "the baking template applied", func() (bool, string) {
		d = getDeployment(t, ns, "svc")
		return d.Spec.Template.Labels[v1alpha1.BakeLabel] == "true" && d.Spec.Template.Annotations[v1alpha1.ModelResourceAnnotation] != "",
			fmt.Sprintf("template labels %v", d.Spec.Template.Labels)
	})
	waitFor(t, ns, "svc", v1alpha1.PhaseRollingOut)
	owner := ns + "/svc"
	name := createTemplatePod(t, d)
	const changes = 5
	base := time.Now().Truncate(time.Second)
	for i := 1; i <= changes; i++ {
		setPodStatus(t, ns, name, func(p *corev1.Pod) {
			p.Status.ContainerStatuses[0].State.Running.StartedAt = metav1.NewTime(base.Add(time.Duration(i) * time.Second))
		})
	}
	// The store's handler put the last change: it decided its wake.
	last := base.Add(changes * time.Second)
	eventually(t, "the store holds the pod's last change", func() (bool, string) {
		for _, p := range op.reconciler.KeptBakePods(owner) {
			if cs := p.Status.ContainerStatuses; p.Name == name && len(cs) == 1 && cs[0].State.Running != nil && cs[0].State.Running.StartedAt.Time.Equal(last) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("kept %d pods", len(op.reconciler.KeptBakePods(owner)))
	})
	rolling := op.metric(t, "openmed_wakes_total", map[string]string{"source": "bake-pod"})
	if rolling > 1 {
		t.Errorf("the pod's %d events while the Deployment rolled woke the model %v times, want at most 1", changes+2, rolling)
	}

	updateDeploymentStatus(t, ns, "svc", rolloutComplete)
	waitFor(t, ns, "svc", v1alpha1.PhaseRollingOut, v1alpha1.BakingReason)
	setPodStatus(t, ns, name, func(p *corev1.Pod) {
		p.Status.ContainerStatuses[0].RestartCount = 1
		p.Status.ContainerStatuses[0].LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled", FinishedAt: metav1.Now()}
	})
	waitFor(t, ns, "svc", v1alpha1.PhaseRolledBack)
	if n := op.metric(t, "openmed_bake_failures_total", map[string]string{"namespace": ns, "reason": rollout.BakeOOMKilled}); n != 1 {
		t.Errorf("openmed_bake_failures_total{reason=OOMKilled} = %v, want 1", n)
	}
	if n := op.metric(t, "openmed_wakes_total", map[string]string{"source": "bake-pod"}); n <= rolling {
		t.Errorf("the OOM kill during the bake woke nothing (bake-pod wakes %v, %v before)", n, rolling)
	}
}

// TestBakeEndsOnPodsReadFromTheAPIServer: found by the fault suite. The
// pod store's watch was broken when the baking version's pod was OOM-killed,
// and the pass at the end of the bake judged the pods the store still had:
// the crashing version became Ready and retained. Here the store stops
// receiving pod events (as one whose watch broke) once the bake began; the
// kill comes after. The pass that ends the bake reads the version's pods
// from the API server (one list) and fails the bake.
func TestBakeEndsOnPodsReadFromTheAPIServer(t *testing.T) {
	ctx := context.Background()
	ns, op := readyAtV1(t, 1)

	const bake = 4
	patchModel(t, ns, "svc", func(m *v1alpha1.OpenMedModel) {
		m.Spec.Version = "OpenMed/pii-v2"
		m.Spec.RolloutStrategy.BakeSeconds = ptr.To[int32](bake)
	})
	var hash string
	eventually(t, "the baking template applied", func() (bool, string) {
		d := getDeployment(t, ns, "svc")
		hash = d.Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation]
		return d.Spec.Template.Labels[v1alpha1.BakeLabel] == "true", fmt.Sprintf("labels %v", d.Spec.Template.Labels)
	})
	short := strings.TrimPrefix(hash, "sha256:")[:10]
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "svc-" + short + "-a",
			Labels:          map[string]string{"app.kubernetes.io/name": "svc", appsv1.DefaultDeploymentUniqueLabelKey: short, v1alpha1.BakeLabel: "true"},
			Annotations:     map[string]string{v1alpha1.ManifestHashAnnotation: hash, v1alpha1.ModelResourceAnnotation: ns + "/svc"},
			OwnerReferences: []metav1.OwnerReference{templateReplicaSet(t, getDeployment(t, ns, "svc"), short)}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "openmed-service", Image: "openmed:2.2.0"}}},
	}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	setStatus := func(mutate func(*corev1.Pod)) {
		t.Helper()
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
			t.Fatal(err)
		}
		mutate(p)
		if err := env.Client.Status().Update(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	setStatus(func(p *corev1.Pod) {
		now := metav1.Now()
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "openmed-service", Image: "openmed:2.2.0", Ready: true, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}}
	})
	updateDeploymentStatus(t, ns, "svc", rolloutComplete)
	eventually(t, "the bake begun on the Ready pod", func() (bool, string) {
		m := getModel(t, ns, "svc")
		return m.Status.BakeStartedAt != nil, fmt.Sprintf("%s %v", m.Status.Phase, m.Status.Conditions)
	})
	if err := op.reconciler.StopPodEvents(); err != nil {
		t.Fatal(err)
	}
	setStatus(func(p *corev1.Pod) {
		c := &p.Status.ContainerStatuses[0]
		c.RestartCount = 1
		c.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled",
			StartedAt: c.State.Running.StartedAt, FinishedAt: metav1.Now()}
	})

	got := waitFor(t, ns, "svc", v1alpha1.PhaseRolledBack)
	if c := condition(got, v1alpha1.DegradedCondition); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Degraded = %+v", c)
	}
	if msgs := recordedEvents(t, ns, "svc", v1alpha1.RolloutFailedReason, 1); len(msgs) != 1 || !strings.Contains(msgs[0], rollout.BakeOOMKilled) {
		t.Errorf("RolloutFailed events %q, want one naming %s", msgs, rollout.BakeOOMKilled)
	}
	if len(got.Status.History) != 1 || got.Status.History[0].Version != "OpenMed/pii-v1" {
		t.Errorf("history %v: the crashed version was retained", got.Status.History)
	}
	// One list, of the target's own pods of the version: by its selector
	// (another Deployment of the same template shares the hash), the bake
	// label and the pod template hash.
	queries := op.writes.queriesOf("/api/v1/namespaces/" + ns + "/pods")
	if len(queries) != 1 {
		t.Fatalf("%d lists of the namespace's pods, want the one of the pass that ended the bake", len(queries))
	}
	want := fmt.Sprintf("%s=true,app.kubernetes.io/name=svc,%s in (%s)", v1alpha1.BakeLabel, appsv1.DefaultDeploymentUniqueLabelKey, short)
	if sel, err := labels.Parse(queries[0].Get("labelSelector")); err != nil || sel.String() != mustParse(t, want).String() {
		t.Errorf("the pods listed by %q, want %q", queries[0].Get("labelSelector"), want)
	}
}

func mustParse(t *testing.T, selector string) labels.Selector {
	t.Helper()
	sel, err := labels.Parse(selector)
	if err != nil {
		t.Fatal(err)
	}
	return sel
}

// readyAtV1 starts an operator and rolls a model out to v1 on a chart's
// Deployment "svc" of replicas in a new namespace: Ready.
// rollingOutV1 starts an operator of a new namespace and a model svc of
// OpenMed/pii-v1 on a Deployment svc of replicas, and waits until it rolls
// out: the operator's metrics count this namespace alone.
func rollingOutV1(t *testing.T, replicas int32) (string, *operator) {
	t.Helper()
	ns := newNamespace(t)
	op := startOperatorIn(t, ns)
	createDeployment(t, chartDeployment(ns, "svc", replicas))
	createModel(t, newModel(ns, "svc", "OpenMed/pii-v1"))
	waitFor(t, ns, "svc", v1alpha1.PhaseRollingOut)
	return ns, op
}

func readyAtV1(t *testing.T, replicas int32) (string, *operator) {
	t.Helper()
	ns := newNamespace(t)
	op := startOperator(t)
	createDeployment(t, chartDeployment(ns, "svc", replicas))
	createModel(t, newModel(ns, "svc", "OpenMed/pii-v1"))
	waitFor(t, ns, "svc", v1alpha1.PhaseRollingOut)
	updateDeploymentStatus(t, ns, "svc", rolloutComplete)
	waitFor(t, ns, "svc", v1alpha1.PhaseReady, v1alpha1.RolloutSucceededReason)
	return ns, op
}
