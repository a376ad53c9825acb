package e2e_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kstatus "github.com/fluxcd/cli-utils/pkg/kstatus/status"

	"github.com/openmed/openmed-operator/health"
	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// quotaName is the namespace GPU quota of the refusal tests.
const quotaName = "gpu"

// gpuQuota creates a ResourceQuota of gpus requested GPUs in ns and waits
// until kube-controller-manager's resourcequota-controller computed its
// usage: the API server's quota admission refuses every pod of the
// namespace until it has.
func gpuQuota(t *testing.T, ns string, gpus int64) {
	t.Helper()
	q := &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: quotaName},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"requests." + gpu: *resource.NewQuantity(gpus, resource.DecimalSI)}},
	}
	if err := k8s.Create(context.Background(), q); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the quota's usage computed", func() (bool, string) {
		got := &corev1.ResourceQuota{}
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(q), got); err != nil {
			return false, err.Error()
		}
		_, ok := got.Status.Used["requests."+gpu]
		return ok, fmt.Sprintf("%+v", got.Status)
	})
}

// quotaScene is the scene of issue 50: a node with GPUs free (4), the
// model Ready at v1 holding two of them, and then a namespace quota of
// gpus requested GPUs (the platform team's, set after the model came up).
func quotaScene(t *testing.T, ns string, gpus int64) {
	t.Helper()
	joinGPUNode(t, ns, 4)
	readyModel(t, ns, v1, "", func(d *appsv1.Deployment) {
		pinToPool(d, ns)
		requestGPU(d)
	})
	gpuQuota(t, ns, gpus)
}

// refusedSince is when the ReplicaSet of the version whose manifest hash is
// hash first failed to create a pod: its ReplicaFailure condition's
// transition (kube-controller-manager's clock, to the second).
func refusedSince(t *testing.T, ns, hash string) (time.Time, string) {
	t.Helper()
	var at time.Time
	var msg string
	eventually(t, "the ReplicaSet of "+hash+" reporting FailedCreate", func() (bool, string) {
		var list appsv1.ReplicaSetList
		if err := k8s.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		for _, rs := range list.Items {
			if rs.Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation] != hash {
				continue
			}
			for _, c := range rs.Status.Conditions {
				if c.Type == appsv1.ReplicaSetReplicaFailure && c.Status == corev1.ConditionTrue {
					at, msg = c.LastTransitionTime.Time, c.Message
					return true, ""
				}
			}
		}
		return false, "no ReplicaFailure yet"
	})
	return at, msg
}

// TestQuotaRefusal: a namespace quota that holds exactly what the model's
// pods hold refuses the surge pod of an upgrade (the ReplicaSet's
// FailedCreate), on a node with GPUs free. With ReplaceInPlace the rollout
// finishes within the quota, never below minAvailable; with Wait the model
// names the quota within 2 s, as progress in every face, fails only at the
// deadline naming the quota, and a freed quota lets it finish (issue 50;
// before, it rolled the healthy version back a minute in).
func TestQuotaRefusal(t *testing.T) {
	requireCluster(t)
	t.Parallel()

	t.Run("replace-in-place-fits-the-quota", func(t *testing.T) {
		t.Parallel()
		ns := newNamespace(t)
		quotaScene(t, ns, 2)
		declared := read(t, ns).d.Spec.Strategy
		w := watchDeployment(t, ns)
		faces := startFaceWatch(t, ns)
		committed := time.Now()
		replaceInPlace(t, ns, v2, 2, 150)
		s := waitServing(t, ns, v2)
		t.Logf("Ready at %s %s after the commit; strategies %v; fewest available pods %d", v2,
			time.Since(committed).Round(100*time.Millisecond), w.strategies, w.minAvailable)
		w.stop(t, s.d.ResourceVersion)
		samples := faces.stop(t, s.m.ResourceVersion)
		w.replacedInPlace(t, s, declared)
		if s.m.Status.RollbackCount != 0 || countEvents(t, ns, v1alpha1.RolloutFailedReason) != 0 || s.m.Status.ReplaceInPlace != nil {
			t.Errorf("the rollout failed on its way or left its record: %s %+v", s, s.m.Status.ReplaceInPlace)
		}
		if m := eventMessages(t, ns, v1alpha1.ReplacingInPlaceReason); len(m) != 1 || !strings.Contains(m[0], "quota") {
			t.Errorf("ReplacingInPlace events: %q", m)
		}
		for _, smp := range samples {
			if smp.argo[health.Degraded] || smp.ks[kstatus.FailedStatus] || smp.err != "" {
				t.Errorf("on its way: %s %v %s", smp.summary, smp.faces, smp.err)
			}
		}
	})

	t.Run("wait-names-the-quota-and-fails-at-the-deadline", func(t *testing.T) {
		t.Parallel()
		ns := newNamespace(t)
		quotaScene(t, ns, 2)
		faces := startFaceWatch(t, ns)
		dw := watchDeployment(t, ns)
		const deadline = 30
		upgrade(t, ns, v2, deadline)
		refused, answer := refusedSince(t, ns, hashOf(t, v2))
		said, ok := faces.firstWritten("False/" + v1alpha1.PodCreationRefusedReason)
		if !ok {
			t.Fatal("no watched version of the model read PodCreationRefused")
		}
		lag := said.Sub(refused)
		t.Logf("the ReplicaSet's FailedCreate at %s (%q); the model's first PodCreationRefused status written at %s, %s later",
			refused.UTC().Format(time.RFC3339), answer, said.UTC().Format(time.RFC3339), lag)
		if lag > 2*time.Second {
			t.Errorf("the model named the refusal %s after the ReplicaSet's FailedCreate, want within 2 s", lag)
		}
		named := read(t, ns)
		if msg := reconcilingMessage(named.m); !strings.Contains(msg, "exceeded quota: "+quotaName) {
			t.Errorf("Reconciling message %q does not name the quota", msg)
		}
		failed := waitStateWithin(t, ns, "rolled back with the failure naming the quota", 2*time.Minute, func(s state) bool {
			return s.m.Status.Phase == v1alpha1.PhaseRolledBack &&
				s.snap.Condition(v1alpha1.DegradedCondition) == "True/"+v1alpha1.PodCreationRefusedReason
		})
		degraded := apimeta.FindStatusCondition(failed.m.Status.Conditions, v1alpha1.DegradedCondition)
		if !strings.Contains(degraded.Message, "exceeded quota: "+quotaName) || !strings.Contains(degraded.Message, "progress deadline") {
			t.Errorf("Degraded after the deadline: %q", degraded.Message)
		}
		if m := recordedEvents(t, ns, v1alpha1.RolloutFailedReason, 1); len(m) != 1 || !strings.Contains(m[0], "exceeded quota") {
			t.Errorf("RolloutFailed events: %q", m)
		}
		if m := eventMessages(t, ns, v1alpha1.PodCreationRefusedReason); len(m) != 1 {
			t.Errorf("%d PodCreationRefused events, want 1: %q", len(m), m)
		}
		// Not before the deadline: the rollback's first status is written
		// no earlier than the Deployment controller's own
		// ProgressDeadlineExceeded (both to the second, one machine's
		// clock).
		held := waitState(t, ns, "held at "+v1, func(s state) bool {
			return apimeta.IsStatusConditionTrue(s.m.Status.Conditions, v1alpha1.RolledBackCondition) && settled(s.d)
		})
		dw.stop(t, held.d.ResourceVersion)
		exceeded := dw.deadlineExceeded()
		if exceeded.IsZero() {
			t.Fatal("no stored version of the Deployment reported ProgressDeadlineExceeded")
		}
		rolledBack, waiting := waitingFaces(t, faces.stop(t, held.m.ResourceVersion), v1alpha1.PodCreationRefusedReason, "exceeded quota")
		if !rolledBack.written.IsZero() && rolledBack.written.Before(exceeded) {
			t.Errorf("rolled back at %s, before the Deployment's ProgressDeadlineExceeded at %s", rolledBack.written, exceeded)
		} else if !rolledBack.written.IsZero() {
			t.Logf("rolled back %s after the Deployment's ProgressDeadlineExceeded, %s after the first refusal",
				rolledBack.written.Sub(exceeded), rolledBack.written.Sub(refused))
		}
		if waiting == 0 {
			t.Error("no stored version read PodCreationRefused")
		}
	})

	t.Run("a-freed-quota-lets-it-finish", func(t *testing.T) {
		t.Parallel()
		ns := newNamespace(t)
		quotaScene(t, ns, 3)
		// Another workload of the namespace takes the third GPU of the
		// quota (the node has one more free).
		other := fillPool(t, ns)
		upgrade(t, ns, v2, 300)
		waitState(t, ns, "the model naming the quota", func(s state) bool {
			return s.snap.Condition(v1alpha1.ReadyCondition) == "False/"+v1alpha1.PodCreationRefusedReason
		})
		if err := k8s.Delete(context.Background(), other, client.PropagationPolicy(metav1.DeletePropagationForeground)); err != nil {
			t.Fatal(err)
		}
		freed := time.Now()
		s := waitServing(t, ns, v2)
		t.Logf("Ready at %s %s after the other workload was deleted", v2, time.Since(freed).Round(100*time.Millisecond))
		if s.m.Status.RollbackCount != 0 || countEvents(t, ns, v1alpha1.RolloutFailedReason) != 0 {
			t.Errorf("the rollout failed on its way: %s", s)
		}
	})
}

// admitter removes the scheduling gate of the pods of ns whose manifest
// hash it admits, as Kueue removes its admission gate once a workload is
// admitted: the test's own stand-in for an admission system, acting on
// real pods through the API server.
type admitter struct {
	mu       sync.Mutex
	admitted map[string]bool
}

// admitPods starts an admitter over ns that admits the given manifest
// hashes; it stops with the test.
func admitPods(t *testing.T, ns string, hashes ...string) *admitter {
	t.Helper()
	a := &admitter{admitted: map[string]bool{}}
	a.admit(hashes...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			var pods corev1.PodList
			if err := k8s.List(ctx, &pods, client.InNamespace(ns)); err == nil {
				for i := range pods.Items {
					p := &pods.Items[i]
					a.mu.Lock()
					ok := a.admitted[p.Annotations[v1alpha1.ManifestHashAnnotation]]
					a.mu.Unlock()
					if ok && len(p.Spec.SchedulingGates) > 0 && p.DeletionTimestamp == nil {
						patch := []byte(`[{"op":"remove","path":"/spec/schedulingGates"}]`)
						_ = k8s.Patch(ctx, p, client.RawPatch(types.JSONPatchType, patch))
					}
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return a
}

func (a *admitter) admit(hashes ...string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, h := range hashes {
		a.admitted[h] = true
	}
}

// admissionGate is the scheduling gate Kueue puts on a pod until it admits
// the workload.
const admissionGate = "kueue.x-k8s.io/admission"

// TestSchedulingGate: every pod of the target is created with Kueue's
// admission gate (as Kueue's webhook adds it); an admission system lets
// v1's pods go. v2's new pod is held: the model names the gate, as
// progress, and goes on once the pod is admitted; never admitted, the
// failure at the deadline names the gate (issue 50).
func TestSchedulingGate(t *testing.T) {
	requireCluster(t)
	t.Parallel()
	gatedScene := func(t *testing.T) (string, *admitter) {
		ns := newNamespace(t)
		joinNode(t, ns)
		a := admitPods(t, ns, hashOf(t, v1))
		readyModel(t, ns, v1, "", func(d *appsv1.Deployment) {
			pinToPool(d, ns)
			d.Spec.Template.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: admissionGate}}
		})
		return ns, a
	}

	t.Run("named-then-admitted", func(t *testing.T) {
		t.Parallel()
		ns, a := gatedScene(t)
		faces := startFaceWatch(t, ns)
		upgrade(t, ns, v2, 300)
		s := waitState(t, ns, "the model naming the gate", func(s state) bool {
			return s.snap.Condition(v1alpha1.ReadyCondition) == "False/"+v1alpha1.SchedulingGatedReason
		})
		if msg := reconcilingMessage(s.m); !strings.Contains(msg, "waits for admission: scheduling gate "+admissionGate) {
			t.Errorf("Reconciling message %q does not name the gate", msg)
		}
		a.admit(hashOf(t, v2))
		s = waitServing(t, ns, v2)
		if s.m.Status.RollbackCount != 0 || countEvents(t, ns, v1alpha1.RolloutFailedReason) != 0 {
			t.Errorf("the rollout failed on its way: %s", s)
		}
		// At most one event per gated pod of v2: each new pod waits for
		// admission in turn (the first rollout's pods were gated for a
		// moment too, until the admitter let them go).
		var ofV2 []string
		for _, m := range eventMessages(t, ns, v1alpha1.SchedulingGatedReason) {
			if strings.Contains(m, " of "+v2+" ") {
				ofV2 = append(ofV2, m)
			}
		}
		slices.Sort(ofV2)
		if len(ofV2) == 0 || len(ofV2) > 2 || len(slices.Compact(slices.Clone(ofV2))) != len(ofV2) || !strings.Contains(ofV2[0], admissionGate) {
			t.Errorf("SchedulingGated events of %s: %q", v2, ofV2)
		}
		for _, smp := range faces.stop(t, s.m.ResourceVersion) {
			if smp.argo[health.Degraded] || smp.ks[kstatus.FailedStatus] || smp.err != "" {
				t.Errorf("on its way: %s %v %s", smp.summary, smp.faces, smp.err)
			}
		}
	})

	t.Run("never-admitted-fails-at-the-deadline-naming-the-gate", func(t *testing.T) {
		t.Parallel()
		ns, _ := gatedScene(t)
		upgrade(t, ns, v2, 20)
		failed := waitStateWithin(t, ns, "rolled back with the failure naming the gate", 2*time.Minute, func(s state) bool {
			return s.m.Status.Phase == v1alpha1.PhaseRolledBack &&
				s.snap.Condition(v1alpha1.DegradedCondition) == "True/"+v1alpha1.SchedulingGatedReason
		})
		if d := apimeta.FindStatusCondition(failed.m.Status.Conditions, v1alpha1.DegradedCondition); !strings.Contains(d.Message, admissionGate) {
			t.Errorf("Degraded after the deadline: %q", d.Message)
		}
	})
}

// TestPreemptionDuringBake: the real scheduler preempts a pod of the
// baking version for a higher-priority pod (DisruptionTarget,
// PreemptionByScheduler); that is the cluster's choice, not the version's
// failure: the bake goes on, and once the replacement runs the version is
// Ready, never rolled back (issue 50).
func TestPreemptionDuringBake(t *testing.T) {
	requireCluster(t)
	t.Parallel()
	ctx := context.Background()
	ns := newNamespace(t)
	// 3 GPUs: v1's two pods and the surge pod of the upgrade.
	joinGPUNode(t, ns, 3)
	readyModel(t, ns, v1, "", func(d *appsv1.Deployment) {
		pinToPool(d, ns)
		requestGPU(d)
	})
	pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "training-" + ns}, Value: 1000000,
		Description: "the e2e test's higher-priority workload"}
	if err := k8s.Create(ctx, pc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), pc) })

	preempted := watchPreempted(t, ns)
	// A bake long enough that the preemption lands in it on a loaded
	// machine (the test checks it did).
	patch := fmt.Sprintf(`{"spec":{"version":%q,"rolloutStrategy":{"bakeSeconds":60}}}`, v2)
	if err := k8s.Patch(ctx, &v1alpha1.OpenMedModel{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: modelName}},
		client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
	waitState(t, ns, v2+" baking", func(s state) bool {
		return s.snap.Condition(v1alpha1.ReconcilingCondition) == "True/"+v1alpha1.BakingReason
	})
	// Two GPUs for a pod of higher priority: one is free, the other is a
	// model pod's, which the scheduler preempts.
	hi := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "training"},
		Spec: corev1.PodSpec{PriorityClassName: pc.Name, Containers: []corev1.Container{{Name: "trainer", Image: "trainer:1",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{gpu: resource.MustParse("2")}}}}},
	}
	pinPod(hi, ns)
	if err := k8s.Create(ctx, hi); err != nil {
		t.Fatal(err)
	}
	v2Hash := hashOf(t, v2)
	eventually(t, "the scheduler preempting a pod of "+v2, func() (bool, string) {
		return len(preempted.of(v2Hash)) > 0, "no pod of it with DisruptionTarget/PreemptionByScheduler"
	})
	if s := read(t, ns); s.snap.Condition(v1alpha1.ReconcilingCondition) != "True/"+v1alpha1.BakingReason {
		t.Fatalf("the preemption came after the bake: %s", s)
	}
	waitBound(t, hi, "the training pod running")
	// The training finishes: its GPUs go back, the replacement runs.
	if err := k8s.Delete(ctx, hi); err != nil {
		t.Fatal(err)
	}
	s := waitServing(t, ns, v2)
	if s.m.Status.RollbackCount != 0 || countEvents(t, ns, v1alpha1.RolloutFailedReason) != 0 {
		t.Errorf("the preemption failed the bake: %s", s)
	}
	t.Logf("preempted pods of %s: %v", v2, preempted.of(v2Hash))
}

// preemptions records, from a watch of the pods of a namespace, every pod
// the scheduler marked for preemption (DisruptionTarget=True, reason
// PreemptionByScheduler) by the manifest hash of its template: the victim
// is deleted right after, so only a watch sees the condition.
type preemptions struct {
	mu     sync.Mutex
	byHash map[string][]string
}

func watchPreempted(t *testing.T, ns string) *preemptions {
	t.Helper()
	var list corev1.PodList
	if err := k8s.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	w, err := k8s.Watch(context.Background(), &corev1.PodList{}, client.InNamespace(ns),
		&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
	if err != nil {
		t.Fatal(err)
	}
	p := &preemptions{byHash: map[string][]string{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			for _, c := range pod.Status.Conditions {
				if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue && c.Reason == corev1.PodReasonPreemptionByScheduler {
					h := pod.Annotations[v1alpha1.ManifestHashAnnotation]
					p.mu.Lock()
					if !slices.Contains(p.byHash[h], pod.Name) {
						p.byHash[h] = append(p.byHash[h], pod.Name)
					}
					p.mu.Unlock()
				}
			}
		}
	}()
	t.Cleanup(func() { w.Stop(); <-done })
	return p
}

// of is the pods of the template whose manifest hash is hash that the
// scheduler preempted.
func (p *preemptions) of(hash string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.byHash[hash])
}

// waitBound waits until the scheduler bound p to a node.
func waitBound(t *testing.T, p *corev1.Pod, what string) {
	t.Helper()
	eventually(t, what, func() (bool, string) {
		got := &corev1.Pod{}
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(p), got); err != nil {
			return false, err.Error()
		}
		return got.Spec.NodeName != "", "not bound"
	})
}

// pinPod puts p in the test's pool, as pinToPool does a Deployment's pods.
func pinPod(p *corev1.Pod, pool string) {
	d := &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: p.Spec}}}
	pinToPool(d, pool)
	p.Spec = d.Spec.Template.Spec
	p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](0)
}

// TestDRAClaim: GPUs handed out by Dynamic Resource Allocation
// (resource.k8s.io/v1): a DeviceClass, a ResourceSlice of two devices
// published for the test's kwok node, and a ResourceClaimTemplate the
// model's pod template claims from (kube-controller-manager's
// resourceclaim-controller makes each pod's claim, the scheduler allocates
// it). Of three devices v1's two pods hold two and another team's pod the
// third; the upgrade's surge pod finds none free: the model names the pod
// and its claim, and with ReplaceInPlace the
// rollout finishes in place (an old pod that goes frees its device), never
// below minAvailable, the declared strategy back (issue 50).
func TestDRAClaim(t *testing.T) {
	requireCluster(t)
	t.Parallel()
	ctx := context.Background()
	ns := newNamespace(t)
	node := joinNode(t, ns)
	driver := "gpu." + ns + ".example.com"
	class := &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: driver},
		Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
			Expression: fmt.Sprintf("device.driver == %q", driver)}}}}}
	slice := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-gpus"},
		Spec: resourcev1.ResourceSliceSpec{Driver: driver, NodeName: ptr.To(node),
			Pool:    resourcev1.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1},
			Devices: []resourcev1.Device{{Name: "gpu-0"}, {Name: "gpu-1"}, {Name: "gpu-2"}}}}
	for _, obj := range []client.Object{class, slice} {
		if err := k8s.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), obj) })
	}
	tmpl := &resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gpu-claim"},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: class.Name}}}}}}}
	if err := k8s.Create(ctx, tmpl); err != nil {
		t.Fatal(err)
	}
	readyModel(t, ns, v1, "", func(d *appsv1.Deployment) {
		pinToPool(d, ns)
		spec := &d.Spec.Template.Spec
		spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To(tmpl.Name)}}
		for i := range spec.Containers {
			spec.Containers[i].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
		}
	})
	other := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "another-team"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "trainer", Image: "trainer:1",
			Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To(tmpl.Name)}}},
	}
	pinPod(other, ns)
	if err := k8s.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	waitBound(t, other, "another team's pod running on the last device")
	declared := read(t, ns).d.Spec.Strategy
	w := watchDeployment(t, ns)
	replaceInPlace(t, ns, v2, 5, 300)
	s := waitState(t, ns, "the model naming the pod and its claim", func(s state) bool {
		return s.snap.Condition(v1alpha1.ReadyCondition) == "False/"+v1alpha1.UnschedulableReason
	})
	if msg := reconcilingMessage(s.m); !strings.Contains(msg, "DRA claims: gpu from template gpu-claim") {
		t.Errorf("Reconciling message %q does not name the claim", msg)
	}
	s = waitServing(t, ns, v2)
	w.stop(t, s.d.ResourceVersion)
	t.Logf("strategies %v; fewest available pods %d", w.strategies, w.minAvailable)
	w.replacedInPlace(t, s, declared)
	if s.m.Status.RollbackCount != 0 {
		t.Errorf("after the rollout: %s", s)
	}
	// Every pod of v2 runs with a device allocated to its own claim.
	var claims resourcev1.ResourceClaimList
	if err := k8s.List(ctx, &claims, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var allocated int
	for _, c := range claims.Items {
		if c.Status.Allocation != nil && len(c.Status.ReservedFor) > 0 {
			allocated++
		}
	}
	if allocated != 3 {
		t.Errorf("%d claims allocated and reserved, want v2's 2 and the other team's", allocated)
	}
}
