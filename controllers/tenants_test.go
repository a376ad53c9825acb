package controllers_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// The tests of this file play a hostile tenant: one who may create
// objects in a namespace of its own (or pods in the model's) and copies
// what the model's objects carry.

// copyTarget creates, in namespace ns, a Deployment of d's name with d's
// pod template (its labels and the operator's annotations), as another
// tenant who read the model's documented annotations would.
func copyTarget(t *testing.T, ns string, d *appsv1.Deployment) *appsv1.Deployment {
	t.Helper()
	c := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: d.Name}, Spec: *d.Spec.DeepCopy()}
	return createDeployment(t, c)
}

// forgedPod is a pod of d's template whose controller reference names d's
// ReplicaSet of hash but with another UID: no ReplicaSet made it.
func forgedPod(t *testing.T, d *appsv1.Deployment, hash, name string) *corev1.Pod {
	t.Helper()
	ref := templateReplicaSet(t, d, hash)
	ref.UID = types.UID("0e7d1c4b-" + name)
	l := map[string]string{appsv1.DefaultDeploymentUniqueLabelKey: hash}
	for k, v := range d.Spec.Template.Labels {
		l[k] = v
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: d.Namespace, Name: name, Labels: l, Annotations: d.Spec.Template.Annotations,
			OwnerReferences: []metav1.OwnerReference{ref}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: container, Image: "openmed:2.2.0"}}},
	}
	if err := env.Client.Create(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	return p
}

// oomKilled plays the kubelet reporting the pod's container OOM-killed and
// restarted.
func oomKilled(t *testing.T, ns, name string) {
	t.Helper()
	setPodStatus(t, ns, name, func(p *corev1.Pod) {
		now := metav1.Now()
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: container, Image: "openmed:2.2.0", Ready: true, Started: ptr.To(true),
			RestartCount: 1, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled", FinishedAt: now}}}}
	})
}

// TestForgedPodsFailNoBake: while a model bakes v2, another tenant's
// Deployment of the same name, in its own namespace, with the model's pod
// template copied (owner annotation, manifest hash, bake label), has its
// pod OOM-killed; a pod of the model's namespace whose controller
// reference names the version's ReplicaSet with another UID is
// OOM-killed too. Neither is the version's pod: the bake pod store keeps
// no pod of another namespace under the model, the forged reference is
// told apart by the ReplicaSet's UID, and the model is Ready at v2 when
// the bake ends, with no RolloutFailed. The version's own pod is read
// through the ReplicaSet store (no ReplicaSet read from the API server).
func TestForgedPodsFailNoBake(t *testing.T) {
	ns, op := readyAtV1(t, 1)
	const bake = 8
	patchModel(t, ns, "svc", func(m *v1alpha1.OpenMedModel) {
		m.Spec.Version = "OpenMed/pii-v2"
		m.Spec.RolloutStrategy.BakeSeconds = ptr.To[int32](bake)
	})
	var d *appsv1.Deployment
	eventually(t, "the baking template applied", func() (bool, string) {
		d = getDeployment(t, ns, "svc")
		return d.Spec.Template.Labels[v1alpha1.BakeLabel] == "true" && d.Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation] != "",
			fmt.Sprintf("template labels %v", d.Spec.Template.Labels)
	})
	hash := strings.TrimPrefix(d.Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation], "sha256:")[:10]
	createTemplatePod(t, d)

	attacker := newNamespace(t)
	copied := createTemplatePod(t, copyTarget(t, attacker, d))
	forged := forgedPod(t, d, hash, "svc-"+hash+"-forged").Name

	updateDeploymentStatus(t, ns, "svc", rolloutComplete)
	baking := waitFor(t, ns, "svc", v1alpha1.PhaseRollingOut, v1alpha1.BakingReason)
	oomKilled(t, attacker, copied)
	oomKilled(t, ns, forged)
	// The forged pod's kill reached the store (and woke the model) before
	// the bake could end: the bake judged it.
	eventually(t, "the store holds the forged pod's kill", func() (bool, string) {
		for _, p := range op.reconciler.KeptBakePods(ns + "/svc") {
			if p.Name == forged && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].LastTerminationState.Terminated != nil {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d pods kept", len(op.reconciler.KeptBakePods(ns+"/svc")))
	})
	if end := baking.Status.BakeStartedAt.Add(bake * time.Second); !time.Now().Before(end) {
		t.Fatalf("the forged pod's kill reached the store at %s, after the bake's end %s: the test proves nothing", time.Now().Format(time.RFC3339), end.Format(time.RFC3339))
	}
	for _, p := range op.reconciler.KeptBakePods(ns + "/svc") {
		if p.Namespace != ns {
			t.Errorf("the bake pod store keeps %s/%s under the model", p.Namespace, p.Name)
		}
	}

	var got *v1alpha1.OpenMedModel
	eventually(t, "Ready at v2 after the bake, or rolled back", func() (bool, string) {
		got = getModel(t, ns, "svc")
		return got.Status.Phase == v1alpha1.PhaseRolledBack || (got.Status.Phase == v1alpha1.PhaseReady && got.Status.ActiveVersion == "OpenMed/pii-v2"),
			fmt.Sprintf("%s active %s", got.Status.Phase, got.Status.ActiveVersion)
	})
	if got.Status.Phase == v1alpha1.PhaseRolledBack {
		t.Fatalf("rolled back: a pod that only claims to belong failed the bake (%v)", condition(got, v1alpha1.DegradedCondition))
	}
	if got.Status.ActiveVersion != "OpenMed/pii-v2" || got.Status.History[0].Version != "OpenMed/pii-v2" {
		t.Errorf("active %s, history %s: the bake was failed by a pod that only claims to belong", got.Status.ActiveVersion, got.Status.History[0].Version)
	}
	if msgs := eventMessages(t, ns, "svc", v1alpha1.RolloutFailedReason); len(msgs) != 0 {
		t.Errorf("RolloutFailed events %q: a forged pod failed the bake", msgs)
	}
	if n := op.metric(t, "openmed_bake_failures_total", map[string]string{"namespace": ns}); n != 0 {
		t.Errorf("openmed_bake_failures_total = %v, want 0", n)
	}
	// The forged reference's UID is not the stored ReplicaSet's: it is
	// read once, its verdict kept for the passes after.
	if n := op.writes.readsOf("/apis/apps/v1/namespaces/" + ns + "/replicasets/svc-" + hash); n > 1 {
		t.Errorf("the version's ReplicaSet was read %d times, want at most once", n)
	}
}

// TestForgedPendingPodsSwitchNothing: a model whose rollout replaces pods
// in place when a new pod stays unschedulable (unschedulableSeconds 1)
// rolls v2 out. Another tenant's copy of its pod template in its own
// namespace, and a pod of the model's namespace naming the version's
// ReplicaSet with another UID, wait for a node the scheduler cannot find:
// the model neither names them nor switches to replacing in place. The
// version's own pod that cannot be scheduled then makes it replace pods in
// place. Their ReplicaSet (of a version without a bake, not in the
// ReplicaSet store) is read once per UID a pod names.
func TestForgedPendingPodsSwitchNothing(t *testing.T) {
	ns, op := readyAtV1(t, 2)
	v1Hash := getDeployment(t, ns, "svc").Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation]
	patchModel(t, ns, "svc", func(m *v1alpha1.OpenMedModel) {
		m.Spec.Version = "OpenMed/pii-v2"
		m.Spec.RolloutStrategy.WhenUnschedulable = v1alpha1.UnschedulableReplaceInPlace
		m.Spec.RolloutStrategy.UnschedulableSeconds = ptr.To[int32](1)
	})
	var d *appsv1.Deployment
	eventually(t, "v2's template applied", func() (bool, string) {
		d = getDeployment(t, ns, "svc")
		h := d.Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation]
		return h != v1Hash, fmt.Sprintf("hash %s", h)
	})
	waitFor(t, ns, "svc", v1alpha1.PhaseRollingOut)
	hash := strings.TrimPrefix(d.Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation], "sha256:")[:10]
	unschedulable := func(ns, name string) {
		t.Helper()
		setPodStatus(t, ns, name, func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodPending
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
				Message: "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.", LastTransitionTime: metav1.Now()}}
		})
	}
	attacker := newNamespace(t)
	copied := pendingTemplatePod(t, copyTarget(t, attacker, d))
	unschedulable(attacker, copied)
	forged := forgedPod(t, d, hash, "svc-"+hash+"-forged").Name
	unschedulable(ns, forged)

	// Longer than unschedulableSeconds and the backstop (2 s here): every
	// pass in between saw both pods.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		m := getModel(t, ns, "svc")
		if m.Status.ReplaceInPlace != nil {
			t.Fatalf("switched to replacing pods in place for pods that only claim to belong: %+v", m.Status.ReplaceInPlace)
		}
		if c := condition(m, v1alpha1.ReadyCondition); c != nil && (c.Reason == v1alpha1.UnschedulableReason || strings.Contains(c.Message, copied) || strings.Contains(c.Message, forged)) {
			t.Fatalf("a pod that only claims to belong is named: %s %q", c.Reason, c.Message)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if d := getDeployment(t, ns, "svc"); d.Spec.Strategy.RollingUpdate == nil || d.Spec.Strategy.RollingUpdate.MaxSurge.IntValue() != 1 {
		t.Errorf("strategy %+v, want the declared one", d.Spec.Strategy)
	}

	// The version's own pod: the model names it, then (a second later)
	// replaces pods in place.
	own := pendingTemplatePod(t, d)
	unschedulable(ns, own)
	eventually(t, "the version's own pod replaced in place", func() (bool, string) {
		m := getModel(t, ns, "svc")
		return m.Status.ReplaceInPlace != nil, fmt.Sprint(condition(m, v1alpha1.ReadyCondition))
	})
	// One read for each UID a pod named (the forged one and the real one),
	// however many passes saw them: the verdicts are kept.
	if n := op.writes.readsOf("/apis/apps/v1/namespaces/" + ns + "/replicasets/svc-" + hash); n != 2 {
		t.Errorf("the version's ReplicaSet was read %d times, want twice (once per UID a pod named; the verdicts kept)", n)
	}
}

// pendingTemplatePod creates a pod of the Deployment d as its ReplicaSet
// would, not yet placed on a node; it returns its name.
func pendingTemplatePod(t *testing.T, d *appsv1.Deployment) string {
	t.Helper()
	hash := strings.TrimPrefix(d.Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation], "sha256:")[:10]
	l := map[string]string{appsv1.DefaultDeploymentUniqueLabelKey: hash}
	for k, v := range d.Spec.Template.Labels {
		l[k] = v
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: d.Namespace, GenerateName: d.Name + "-" + hash + "-", Labels: l,
			Annotations: d.Spec.Template.Annotations, OwnerReferences: []metav1.OwnerReference{templateReplicaSet(t, d, hash)}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: container, Image: "openmed:2.2.0"}}},
	}
	if err := env.Client.Create(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	return p.Name
}

// TestLongNamedModelKeepsItsEvents: a model named with 253 characters (the
// longest name the API server takes) gets its events: their names are cut
// to a DNS subdomain of at most 253 characters, not refused.
func TestLongNamedModelKeepsItsEvents(t *testing.T) {
	ns := newNamespace(t)
	startOperatorIn(t, ns)
	name := strings.Repeat("m", 63) + "." + strings.Repeat("o", 63) + "." + strings.Repeat("d", 63) + "." + strings.Repeat("e", 61)
	if len(name) != 253 {
		t.Fatalf("name of %d characters", len(name))
	}
	createDeployment(t, chartDeployment(ns, "svc", 1))
	m := newModel(ns, name, "OpenMed/pii-v1")
	m.Spec.TargetRef.Name = "svc"
	createModel(t, m)
	recordedEvents(t, ns, name, v1alpha1.RolloutStartedReason, 1)
}

// TestReplacedManifestRestored: whoever may delete and create ConfigMaps
// in the model's namespace deletes the manifest ConfigMap the Deployment
// points at and creates it again under the same name, owned by the model
// and immutable, with another model's pointer — while the operator runs
// (its own create of the deleted ConfigMap meets the replacement:
// AlreadyExists), and while it is down (a new process finds a ConfigMap
// of a UID the status does not record). Either way the operator reads it,
// deletes it with its UID as precondition and writes the manifest again,
// with a ManifestMismatch event that names it; the Deployment's pointer
// never changes name (no roll), and the model is Ready again.
func TestReplacedManifestRestored(t *testing.T) {
	ctx := context.Background()
	forge := func(t *testing.T, served *corev1.ConfigMap) *corev1.ConfigMap {
		t.Helper()
		forged := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: served.Namespace, Name: served.Name, Labels: served.Labels,
			Annotations: served.Annotations, OwnerReferences: served.OwnerReferences}, Immutable: ptr.To(true),
			Data: map[string]string{v1alpha1.PreloadEnvVar: "Someone/else", v1alpha1.ManifestKey: "{}\n"}}
		if err := env.Client.Create(ctx, forged); err != nil {
			t.Fatal(err)
		}
		return forged
	}
	restored := func(t *testing.T, op *operator, ns string, forged *corev1.ConfigMap, generation int64) {
		t.Helper()
		msgs := recordedEvents(t, ns, "svc", v1alpha1.ManifestMismatchReason, 1)
		if !strings.Contains(msgs[0], forged.Name) || strings.Contains(msgs[0], "Someone") {
			t.Errorf("event %q: want the ConfigMap named, none of its content", msgs[0])
		}
		eventually(t, "the manifest written again, the model Ready", func() (bool, string) {
			cm := &corev1.ConfigMap{}
			err := env.Client.Get(ctx, client.ObjectKeyFromObject(forged), cm)
			c := condition(getModel(t, ns, "svc"), v1alpha1.ReadyCondition)
			return err == nil && cm.UID != forged.UID && cm.Data[v1alpha1.PreloadEnvVar] == "OpenMed/pii-v1" && c != nil && c.Status == metav1.ConditionTrue,
				fmt.Sprintf("err %v, preload %q, Ready %v", err, cm.Data[v1alpha1.PreloadEnvVar], c)
		})
		d := getDeployment(t, ns, "svc")
		if p := preload(d); p == nil || p.ValueFrom == nil || p.ValueFrom.ConfigMapKeyRef.Name != forged.Name || d.Generation != generation {
			t.Errorf("pointer %v, generation %d (was %d): the restore must not roll the pods", p, d.Generation, generation)
		}
		deletes := op.writes.requests("DELETE", "/configmaps/"+forged.Name)
		if len(deletes) != 1 || !strings.Contains(deletes[0], string(forged.UID)) {
			t.Errorf("deletes %q, want one carrying the replaced ConfigMap's UID as precondition", deletes)
		}
	}
	served := func(t *testing.T, ns string) (*corev1.ConfigMap, int64) {
		t.Helper()
		m := getModel(t, ns, "svc")
		name := m.Status.ManifestConfigMapName
		if len(m.Status.VerifiedConfigMaps) != 1 || m.Status.VerifiedConfigMaps[0].Name != name {
			t.Fatalf("verifiedConfigMaps %v, want %s recorded", m.Status.VerifiedConfigMaps, name)
		}
		cm := &corev1.ConfigMap{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, cm); err != nil {
			t.Fatal(err)
		}
		return cm, getDeployment(t, ns, "svc").Generation
	}

	t.Run("while the operator runs", func(t *testing.T) {
		ns, op := readyAtV1(t, 1)
		cm, generation := served(t, ns)
		// The replacement lands between the deletion the operator saw and
		// its own create of the ConfigMap.
		var forged *corev1.ConfigMap
		op.writes.inject(&fault{times: 1, match: func(method, path, body string) bool {
			return method == http.MethodPost && strings.HasSuffix(path, "/namespaces/"+ns+"/configmaps") && strings.Contains(body, cm.Name)
		}, before: func() { forged = forge(t, cm) }})
		if err := env.Client.Delete(ctx, cm); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the replacement created", func() (bool, string) { return forged != nil, "" })
		restored(t, op, ns, forged, generation)
	})

	t.Run("while the operator is down", func(t *testing.T) {
		ns, op := readyAtV1(t, 1)
		cm, generation := served(t, ns)
		op.stop()
		if err := env.Client.Delete(ctx, cm); err != nil {
			t.Fatal(err)
		}
		forged := forge(t, cm)
		next := startOperator(t)
		restored(t, next, ns, forged, generation)
		if n := next.writes.readsOf("/api/v1/namespaces/" + ns + "/configmaps/" + cm.Name); n != 1 {
			t.Errorf("the replaced ConfigMap was read %d times, want once", n)
		}
	})
}
