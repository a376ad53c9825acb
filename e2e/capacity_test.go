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
	"k8s.io/apimachinery/pkg/api/equality"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kstatus "github.com/fluxcd/cli-utils/pkg/kstatus/status"

	"github.com/openmed/openmed-operator/controllers"
	"github.com/openmed/openmed-operator/health"
	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// gpu is the extended resource the model server requests, as NVIDIA's
// device plugin advertises it.
const gpu corev1.ResourceName = "nvidia.com/gpu"

// TestScarceGPU: with the defaults (maxSurge 1, maxUnavailable 0) a rollout
// needs one GPU more than the model holds. On a node of 3 GPUs, 2 held by
// the model and the third by another team's workload, the real scheduler reports the surge pod Unschedulable; the model
// says so, naming the resource, as progress in every face until the
// deadline, and the failure at the deadline names it too. A GPU freed by
// another workload lets the rollout finish by itself (issue 27).
func TestScarceGPU(t *testing.T) {
	requireCluster(t)
	t.Parallel()

	t.Run("deadline-names-the-capacity", func(t *testing.T) {
		t.Parallel()
		// An operator of this model alone: its openmed_wakes_total counts
		// this model's pending pod and no other test's.
		op, err := launchOperator(context.Background(), "scarce", operatorLabel+"=scarce")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = op.Kill() })
		ns := newNamespace(t)
		fullGPUPool(t, ns, "scarce", nil)
		v2Hash := hashOf(t, v2)
		faces := startFaceWatch(t, ns)
		upgrade(t, ns, v2, 20)

		s := waitState(t, ns, "the model saying a pod of "+v2+" cannot be scheduled", func(s state) bool {
			return s.snap.Condition(v1alpha1.ReadyCondition) == "False/"+v1alpha1.UnschedulableReason
		})
		msg := reconcilingMessage(s.m)
		pod := unschedulablePod(t, ns, v2Hash)
		verdict := podScheduled(pod)
		for _, want := range []string{pod.Name, "Insufficient " + string(gpu)} {
			if !strings.Contains(msg, want) {
				t.Errorf("Reconciling message %q does not name %q", msg, want)
			}
		}
		// When the model first said it: the write of the first stored
		// version whose Ready reason is Unschedulable (Ready's own
		// lastTransitionTime is older: Ready went False when the upgrade
		// began, before the pod existed). Known from the pod watch, not
		// from the 15 s backstop timer of a rollout in flight: both times
		// are the cluster's, to the second.
		said, ok := faces.firstWritten("False/" + v1alpha1.UnschedulableReason)
		if !ok {
			t.Fatal("no watched version of the model read Unschedulable")
		}
		lag := said.Sub(verdict.LastTransitionTime.Time)
		t.Logf("the scheduler's verdict at %s (%q); the model's first Unschedulable status written at %s, %s later",
			verdict.LastTransitionTime.UTC().Format(time.RFC3339), verdict.Message, said.UTC().Format(time.RFC3339), lag)
		if lag > 5*time.Second {
			t.Errorf("the model said Unschedulable %s after the scheduler: not woken by the pod", lag)
		}
		// Woken by the pod watch itself, not only by a Deployment event
		// that came at the same moment.
		if n := counter(t, op, controllers.MetricWakes, "source", "pending-pod"); n < 1 {
			t.Errorf("openmed_wakes_total{source=\"pending-pod\"} = %v: not woken by the pod", n)
		}

		failed := waitStateWithin(t, ns, "rolled back with the failure naming the GPU", time.Minute, func(s state) bool {
			return s.m.Status.Phase == v1alpha1.PhaseRolledBack &&
				s.snap.Condition(v1alpha1.DegradedCondition) == "True/"+v1alpha1.UnschedulableReason
		})
		degraded := apimeta.FindStatusCondition(failed.m.Status.Conditions, v1alpha1.DegradedCondition)
		if !strings.Contains(degraded.Message, "Insufficient "+string(gpu)) || !strings.Contains(degraded.Message, "progress deadline") {
			t.Errorf("Degraded after the deadline: %q", degraded.Message)
		}
		if m := recordedEvents(t, ns, v1alpha1.RolloutFailedReason, 1); len(m) != 1 || !strings.Contains(m[0], "Insufficient "+string(gpu)) {
			t.Errorf("RolloutFailed events: %q", m)
		}
		// One event for the upgrade's pod (the first rollout may have
		// had one too, while the scheduler had not yet seen the node's GPUs).
		var ofV2 []string
		for _, m := range eventMessages(t, ns, v1alpha1.UnschedulableReason) {
			if strings.Contains(m, " of "+v2+" ") {
				ofV2 = append(ofV2, m)
			}
		}
		if len(ofV2) != 1 {
			t.Errorf("%d Unschedulable events for %s, want 1: %q", len(ofV2), v2, ofV2)
		}
		held := waitState(t, ns, "held at "+v1, func(s state) bool {
			return apimeta.IsStatusConditionTrue(s.m.Status.Conditions, v1alpha1.RolledBackCondition) && settled(s.d)
		})
		stalled := apimeta.FindStatusCondition(held.m.Status.Conditions, v1alpha1.StalledCondition)
		if stalled == nil || !strings.Contains(stalled.Message, "Insufficient "+string(gpu)) {
			t.Errorf("the held model's Stalled does not name the GPU: %+v", stalled)
		}
		// Every stored version from the upgrade on: while a pod waited
		// and before the deadline, Progressing with the message in Argo
		// CD's faces and InProgress in kstatus and CEL; never Degraded.
		_, waiting := waitingFaces(t, faces.stop(t, held.m.ResourceVersion), v1alpha1.UnschedulableReason, "Insufficient "+string(gpu))
		if waiting == 0 {
			t.Error("no stored version read Unschedulable")
		}
	})

	t.Run("a-freed-gpu-lets-it-finish", func(t *testing.T) {
		t.Parallel()
		ns := newNamespace(t)
		other := fullGPUPool(t, ns, "", nil)
		upgrade(t, ns, v2, 300)
		waitState(t, ns, "the model waiting for a GPU", func(s state) bool {
			return s.snap.Condition(v1alpha1.ReadyCondition) == "False/"+v1alpha1.UnschedulableReason
		})
		if err := k8s.Delete(context.Background(), other); err != nil {
			t.Fatal(err)
		}
		freed := time.Now()
		s := waitServing(t, ns, v2)
		t.Logf("Ready at %s %s after the other workload's GPU was freed", v2, time.Since(freed).Round(100*time.Millisecond))
		if s.m.Status.RollbackCount != 0 || countEvents(t, ns, v1alpha1.RolloutFailedReason) != 0 {
			t.Errorf("the rollout failed on its way: %s", s)
		}
	})
}

// fullGPUPool is the scene of a rollout without a spare GPU: a node of 3
// GPUs in the test's pool, the model Ready at v1 on two of them (its
// Deployment changed by mutate too; operator as in readyModel), and
// another team's pod on the third, whose Deployment it returns.
func fullGPUPool(t *testing.T, ns, operator string, mutate func(*appsv1.Deployment)) *appsv1.Deployment {
	t.Helper()
	joinGPUNode(t, ns, 3)
	readyModel(t, ns, v1, operator, func(d *appsv1.Deployment) {
		pinToPool(d, ns)
		requestGPU(d)
		if mutate != nil {
			mutate(d)
		}
	})
	return fillPool(t, ns)
}

// fillPool takes the last free GPU of the test's pool with another team's
// workload (one pod, one GPU) and waits until it runs: the model's 2 pods
// hold the other two, and its next rollout has none to surge into.
func fillPool(t *testing.T, ns string) *appsv1.Deployment {
	t.Helper()
	other := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "another-team"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "another-team"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "another-team"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "trainer", Image: "trainer:1"}}}}},
	}
	pinToPool(other, ns)
	requestGPU(other)
	if err := k8s.Create(context.Background(), other); err != nil {
		t.Fatal(err)
	}
	eventually(t, "another team's pod running on the last GPU", func() (bool, string) {
		d := &appsv1.Deployment{}
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(other), d); err != nil {
			return false, err.Error()
		}
		return d.Status.AvailableReplicas == 1, fmt.Sprintf("%d available", d.Status.AvailableReplicas)
	})
	return other
}

// joinGPUNode is joinNode with gpus GPUs allocatable on the node.
func joinGPUNode(t *testing.T, pool string, gpus int64) string {
	t.Helper()
	name := joinNode(t, pool)
	list := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("32"), corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods: resource.MustParse("110"), gpu: *resource.NewQuantity(gpus, resource.DecimalSI),
	}
	n := &corev1.Node{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Name: name}, n); err != nil {
		t.Fatal(err)
	}
	n.Status.Capacity, n.Status.Allocatable = list, list
	if err := k8s.Status().Update(context.Background(), n); err != nil {
		t.Fatal(err)
	}
	eventually(t, fmt.Sprintf("%d GPUs allocatable on %s", gpus, name), func() (bool, string) {
		n := &corev1.Node{}
		if err := k8s.Get(context.Background(), client.ObjectKey{Name: name}, n); err != nil {
			return false, err.Error()
		}
		q := n.Status.Allocatable[gpu]
		return q.Value() == gpus, q.String()
	})
	return name
}

// requestGPU makes every container of d request (and be limited to) one
// GPU, as a model server's chart does.
func requestGPU(d *appsv1.Deployment) {
	for i := range d.Spec.Template.Spec.Containers {
		c := &d.Spec.Template.Spec.Containers[i]
		one := resource.MustParse("1")
		if c.Resources.Limits == nil {
			c.Resources.Limits = corev1.ResourceList{}
		}
		if c.Resources.Requests == nil {
			c.Resources.Requests = corev1.ResourceList{}
		}
		c.Resources.Limits[gpu], c.Resources.Requests[gpu] = one, one
	}
}

// upgrade sets the version and the progress deadline, as a commit would.
func upgrade(t *testing.T, ns, version string, deadline int) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"version":%q,"rolloutStrategy":{"progressDeadlineSeconds":%d}}}`, version, deadline)
	m := &v1alpha1.OpenMedModel{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: modelName}}
	if err := k8s.Patch(context.Background(), m, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
}

// unschedulablePod is the pod of the version whose manifest hash is hash
// that the scheduler reports unschedulable.
func unschedulablePod(t *testing.T, ns, hash string) corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := k8s.List(context.Background(), &pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if c := podScheduled(p); p.Annotations[v1alpha1.ManifestHashAnnotation] == hash && c != nil &&
			c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return p
		}
	}
	t.Fatalf("no unschedulable pod of %s in %s", hash, ns)
	return corev1.Pod{}
}

func podScheduled(p corev1.Pod) *corev1.PodCondition {
	for i, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// TestReplaceInPlace: with whenUnschedulable: ReplaceInPlace, a rollout
// whose surge pod finds no GPU finishes without one: the Deployment
// replaces pods in place, never below minAvailable available pods (every
// stored version of the Deployment, a watch), the declared strategy is back
// afterwards, and no pod rolls twice. With one replica it says why it
// cannot and waits; an operator killed while the strategy is switched is
// replaced by one that finishes (issue 27).
func TestReplaceInPlace(t *testing.T) {
	requireCluster(t)
	t.Parallel()

	t.Run("finishes-without-a-spare-gpu", func(t *testing.T) {
		t.Parallel()
		ns := newNamespace(t)
		fullGPUPool(t, ns, "", nil)
		declared := read(t, ns).d.Spec.Strategy
		w := watchDeployment(t, ns)
		replaceInPlace(t, ns, v2, 2, 300)
		s := waitServing(t, ns, v2)
		w.stop(t, s.d.ResourceVersion)
		w.replacedInPlace(t, s, declared)
		if got := slices.Compact(w.templates); len(got) != 2 {
			t.Errorf("pod templates %v, want the old and v2's once", got)
		}
		if s.m.Status.ReplaceInPlace != nil || countEvents(t, ns, v1alpha1.ReplacingInPlaceReason) != 1 || countEvents(t, ns, v1alpha1.RolloutFailedReason) != 0 {
			t.Errorf("after the rollout: record %+v, %d ReplacingInPlace events", s.m.Status.ReplaceInPlace, countEvents(t, ns, v1alpha1.ReplacingInPlaceReason))
		}
		t.Logf("strategies seen %v; fewest available pods %d", w.strategies, w.minAvailable)
	})

	t.Run("one-replica-says-why-it-cannot", func(t *testing.T) {
		t.Parallel()
		ns := newNamespace(t)
		joinGPUNode(t, ns, 2)
		createTarget(t, ns, func(d *appsv1.Deployment) { pinToPool(d, ns); requestGPU(d) })
		m := newModel(t, ns, v1, "")
		m.Spec.Replicas = ptr.To[int32](1)
		if err := k8s.Create(context.Background(), m); err != nil {
			t.Fatal(err)
		}
		waitServing(t, ns, v1)
		fillPool(t, ns)
		declared := read(t, ns).d.Spec.Strategy
		replaceInPlace(t, ns, v2, 1, 300)
		s := waitState(t, ns, "the model saying it cannot replace in place", func(s state) bool {
			return strings.Contains(reconcilingMessage(s.m), "cannot be replaced in place: minAvailable 1 of 1 replicas")
		})
		time.Sleep(3 * time.Second)
		s = read(t, ns)
		if s.m.Status.ReplaceInPlace != nil || !equality.Semantic.DeepEqual(s.d.Spec.Strategy, declared) ||
			s.snap.Condition(v1alpha1.ReadyCondition) != "False/"+v1alpha1.UnschedulableReason {
			t.Errorf("with one replica: %s record %+v strategy %+v", s, s.m.Status.ReplaceInPlace, s.d.Spec.Strategy)
		}
	})

	t.Run("operator-killed-while-switched", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		op, err := launchOperator(ctx, "inplace-1", operatorLabel+"=inplace")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = op.Kill() })
		ns := newNamespace(t)
		fullGPUPool(t, ns, "inplace", func(d *appsv1.Deployment) { d.Spec.MinReadySeconds = minReadySeconds })
		declared := read(t, ns).d.Spec.Strategy
		w := watchDeployment(t, ns)
		replaceInPlace(t, ns, v2, 1, 300)
		// Killed while switched: the record written and the Deployment
		// replacing in place, the declared strategy not restored yet.
		waitState(t, ns, "the switch recorded and written", func(s state) bool {
			return s.m.Status.ReplaceInPlace != nil && switchedInPlace(s.d)
		})
		if err := op.Kill(); err != nil {
			t.Fatal(err)
		}
		if s := read(t, ns); s.m.Status.ReplaceInPlace == nil || !switchedInPlace(s.d) {
			t.Fatalf("the operator was killed after the restore (record %+v, strategy %+v): the restart finishes nothing", s.m.Status.ReplaceInPlace, s.d.Spec.Strategy)
		}
		replicaSets := countReplicaSets(t, ns)
		op2, err := launchOperator(ctx, "inplace-2", operatorLabel+"=inplace")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = op2.Kill() })
		s := waitServing(t, ns, v2)
		w.stop(t, s.d.ResourceVersion)
		if !equality.Semantic.DeepEqual(s.d.Spec.Strategy, declared) || s.m.Status.ReplaceInPlace != nil {
			t.Errorf("after the restart: strategy %+v (declared %+v), record %+v", s.d.Spec.Strategy, declared, s.m.Status.ReplaceInPlace)
		}
		if got := countReplicaSets(t, ns); got != replicaSets {
			t.Errorf("%d ReplicaSets after the restart, %d before: the pods rolled again", got, replicaSets)
		}
		if w.minAvailable < 1 || len(slices.Compact(w.templates)) != 2 {
			t.Errorf("fewest available %d; templates %v", w.minAvailable, slices.Compact(w.templates))
		}
	})
}

// switchedInPlace is whether d replaces pods in place (no surge), as the
// operator switches it.
func switchedInPlace(d *appsv1.Deployment) bool {
	ru := d.Spec.Strategy.RollingUpdate
	if ru == nil || ru.MaxSurge == nil {
		return false
	}
	surge := *ru.MaxSurge
	return (surge.Type == intstr.Int && surge.IntVal == 0) || surge.StrVal == "0" || surge.StrVal == "0%"
}

// replaceInPlace sets the version with whenUnschedulable: ReplaceInPlace,
// as a commit would.
func replaceInPlace(t *testing.T, ns, version string, after, deadline int) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"version":%q,"rolloutStrategy":{"progressDeadlineSeconds":%d,"whenUnschedulable":"ReplaceInPlace","unschedulableSeconds":%d}}}`,
		version, deadline, after)
	m := &v1alpha1.OpenMedModel{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: modelName}}
	if err := k8s.Patch(context.Background(), m, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
}

// deploymentWatch keeps, over every version of the model's Deployment the
// API server stores from now on, the fewest available pods its controller
// reported for an observed generation, the strategies and the pod
// templates (manifest hashes) in order.
type deploymentWatch struct {
	mu           sync.Mutex
	minAvailable int32
	minAt        string
	strategies   []string
	templates    []string
	seen         map[string]bool
	end          func()
	// exceeded is the first ProgressDeadlineExceeded's update time.
	exceeded time.Time
}

// deadlineExceeded is when the Deployment controller first reported the
// progress deadline passed (its condition's lastUpdateTime), zero if it
// did not.
func (dw *deploymentWatch) deadlineExceeded() time.Time {
	dw.mu.Lock()
	defer dw.mu.Unlock()
	return dw.exceeded
}

func watchDeployment(t *testing.T, ns string) *deploymentWatch {
	t.Helper()
	dw := &deploymentWatch{minAvailable: 1 << 30, seen: map[string]bool{}}
	dw.end = watchDeployments(t, ns, func(d *appsv1.Deployment) {
		dw.mu.Lock()
		defer dw.mu.Unlock()
		dw.seen[d.ResourceVersion] = true
		if d.Status.ObservedGeneration == d.Generation && d.Status.AvailableReplicas < dw.minAvailable {
			dw.minAvailable, dw.minAt = d.Status.AvailableReplicas, d.ResourceVersion
		}
		if ru := d.Spec.Strategy.RollingUpdate; ru != nil {
			st := "maxSurge=" + ru.MaxSurge.String() + " maxUnavailable=" + ru.MaxUnavailable.String()
			if len(dw.strategies) == 0 || dw.strategies[len(dw.strategies)-1] != st {
				dw.strategies = append(dw.strategies, st)
			}
		}
		dw.templates = append(dw.templates, d.Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation])
		for _, c := range d.Status.Conditions {
			if c.Type == appsv1.DeploymentProgressing && c.Reason == "ProgressDeadlineExceeded" && dw.exceeded.IsZero() {
				dw.exceeded = c.LastUpdateTime.Time
			}
		}
	})
	return dw
}

// stop waits until the watch delivered the Deployment's version rv and
// ends it.
func (dw *deploymentWatch) stop(t *testing.T, rv string) {
	t.Helper()
	eventually(t, "the Deployment watch delivered resourceVersion "+rv, func() (bool, string) {
		dw.mu.Lock()
		defer dw.mu.Unlock()
		return dw.seen[rv], fmt.Sprintf("%d versions", len(dw.seen))
	})
	dw.end()
}

// replacedInPlace checks, once the watch stopped at the settled state s,
// that the rollout replaced pods in place (maxSurge 0, maxUnavailable 1)
// with never fewer than one available pod (minAvailable 1) and that the
// Deployment has its declared strategy back.
func (dw *deploymentWatch) replacedInPlace(t *testing.T, s state, declared appsv1.DeploymentStrategy) {
	t.Helper()
	if dw.minAvailable < 1 {
		t.Errorf("the Deployment had %d available pods at resourceVersion %s; minAvailable is 1", dw.minAvailable, dw.minAt)
	}
	if !equality.Semantic.DeepEqual(s.d.Spec.Strategy, declared) {
		t.Errorf("strategy %+v after the rollout, %+v declared", s.d.Spec.Strategy, declared)
	}
	if !slices.Contains(dw.strategies, "maxSurge=0 maxUnavailable=1") {
		t.Errorf("the Deployment never replaced in place: strategies %v", dw.strategies)
	}
}

// waitingFaces checks every stored version of the model (samples, oldest
// first) until the first rolled back one: none Degraded or Failed in any
// face, and each that reads Ready=False/reason Progressing in the Argo CD
// faces and InProgress in kstatus and CEL, with a message naming want. It
// returns the rolled-back sample (zero if none) and how many read reason.
func waitingFaces(t *testing.T, samples []faceSample, reason, want string) (rolledBack faceSample, waiting int) {
	t.Helper()
	for _, smp := range samples {
		if smp.err != "" {
			t.Errorf("%s: %s", smp.summary, smp.err)
		}
		if strings.HasPrefix(smp.ready, "False/RolledBack") {
			return smp, waiting
		}
		if smp.argo[health.Degraded] || smp.ks[kstatus.FailedStatus] {
			t.Errorf("before the deadline: %s %v", smp.summary, smp.faces)
		}
		if smp.ready != "False/"+reason {
			continue
		}
		waiting++
		if len(smp.argo) != 1 || !smp.argo[health.Progressing] || len(smp.ks) != 1 || !smp.ks[kstatus.InProgressStatus] {
			t.Errorf("while %s: %s %v", reason, smp.summary, smp.faces)
		}
		for _, m := range smp.messages {
			if !strings.Contains(m, want) {
				t.Errorf("an Argo CD face's message does not name %q: %q", want, m)
			}
		}
	}
	return faceSample{}, waiting
}
