package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/minicluster"
)

// poolLabel pins a test's pods to a node of its own (label and taint).
const poolLabel = "e2e.openmed.ai/pool"

// TestBakeOnRealPodLifecycles runs the bake guard through the failures
// real clusters have, with the real kube-controller-manager (node
// lifecycle, taint eviction, ReplicaSet) and kwok playing the kubelet: a
// node that stops heartbeating, a kubelet eviction and a sidecar restart
// never roll back a healthy version; the model's own container restarting
// does; a reset after a failed first-version bake bakes its full time again
// (issue 26).
func TestBakeOnRealPodLifecycles(t *testing.T) {
	requireCluster(t)
	t.Parallel()

	// The node of the baking version stops heartbeating mid-bake: the node
	// lifecycle controller marks it and its pods not Ready (~50 s), the
	// taint eviction controller evicts them once their toleration (20 s)
	// runs out, and their ReplicaSet replaces them on a healthy node.
	t.Run("node-lost-mid-bake", func(t *testing.T) {
		t.Parallel()
		const bake = 90
		ns := newNamespace(t)
		node := joinNode(t, ns)
		readyModel(t, ns, v1, "", func(d *appsv1.Deployment) { pinToPool(d, ns) })
		v1Hash, v2Hash := hashOf(t, v1), hashOf(t, v2)
		rec := watchBake(t, ns, v2Hash)
		bakeFor(t, ns, v2, bake)
		waitState(t, ns, "baking "+v2, func(s state) bool {
			return s.snap.Observed() && s.m.Status.BakeStartedAt != nil && s.snap.Condition(v1alpha1.ReconcilingCondition) == "True/"+v1alpha1.BakingReason
		})
		if on := podsOn(t, ns, v2Hash); len(on) == 0 || slices.ContainsFunc(on, func(n string) bool { return n != node }) {
			t.Fatalf("the baking pods run on %v, want %s only", on, node)
		}
		// Replacements may run on the shared node from now on.
		labelNode(t, minicluster.NodeName, poolLabel, ns)
		patchNode(t, node, `{"metadata":{"labels":{"`+minicluster.NodeLabel+`":null}}}`)
		lost := time.Now()

		waiting := waitStateWithin(t, ns, "the model saying it waits for the lost node", 150*time.Second, func(s state) bool {
			return strings.Contains(s.snap.Condition(v1alpha1.ReconcilingCondition), v1alpha1.BakingReason) &&
				strings.Contains(reconcilingMessage(s.m), "node that is not Ready")
		})
		t.Logf("the model said it waits for the lost node %s after kwok let go of it: %q", time.Since(lost).Round(time.Second), reconcilingMessage(waiting.m))
		if waiting.m.Status.Phase != v1alpha1.PhaseRollingOut || apimeta.IsStatusConditionTrue(waiting.m.Status.Conditions, v1alpha1.ReadyCondition) {
			t.Errorf("while the node is lost: %s", waiting)
		}
		s := waitStateWithin(t, ns, "Ready at "+v2+" after the bake", 200*time.Second, bakedV2)
		rec.stop()
		noRollback(t, ns, rec, []string{v1Hash, v2Hash})
		if on := podsOn(t, ns, v2Hash); slices.Contains(on, node) {
			t.Errorf("v2 pods still counted on the lost node: %v", on)
		}
		t.Logf("Ready at %s %s after the node was lost", v2, s.m.Status.History[0].ReadyAt.Sub(lost).Round(time.Second))
	})

	// The kubelet evicts a pod of the baking version under node pressure.
	t.Run("kubelet-eviction", func(t *testing.T) {
		t.Parallel()
		ns := newNamespace(t)
		readyModel(t, ns, v1, "", nil)
		v1Hash, v2Hash := hashOf(t, v1), hashOf(t, v2)
		rec := watchBake(t, ns, v2Hash)
		bakeFor(t, ns, v2, bakeSeconds)
		waitBaking(t, ns)
		pod := versionPods(t, ns, v2Hash)[0]
		annotatePod(t, ns, pod.Name, minicluster.EvictAnnotation, "true")
		eventually(t, "the pod evicted", func() (bool, string) {
			p := getPod(t, ns, pod.Name)
			return p.Status.Phase == corev1.PodFailed && p.Status.Reason == "Evicted", string(p.Status.Phase)
		})
		evicted := time.Now()
		s := waitState(t, ns, "Ready at "+v2+" after the bake", bakedV2)
		landedDuringBake(t, s, "eviction", evicted)
		rec.stop()
		noRollback(t, ns, rec, []string{v1Hash, v2Hash})
	})

	// A log shipper and a native sidecar (a mesh proxy) restart.
	t.Run("sidecar-restart", func(t *testing.T) {
		t.Parallel()
		ns := newNamespace(t)
		readyModel(t, ns, v1, "", withSidecars)
		v1Hash, v2Hash := hashOf(t, v1), hashOf(t, v2)
		rec := watchBake(t, ns, v2Hash)
		bakeFor(t, ns, v2, bakeSeconds)
		waitBaking(t, ns)
		pods := versionPods(t, ns, v2Hash)
		for i, c := range []string{"log-shipper", "mesh-proxy"} {
			name := pods[i%len(pods)].Name
			annotatePod(t, ns, name, minicluster.RestartContainerAnnotation, c)
			eventually(t, c+" restarted", func() (bool, string) {
				s := containerStatus(getPod(t, ns, name), c)
				return s != nil && s.RestartCount == 1, fmt.Sprintf("%+v", s)
			})
		}
		restarted := time.Now()
		s := waitState(t, ns, "Ready at "+v2+" after the bake", bakedV2)
		landedDuringBake(t, s, "sidecar restarts", restarted)
		rec.stop()
		noRollback(t, ns, rec, []string{v1Hash, v2Hash})
	})

	// The model's own container restarts, next to the same sidecars: the
	// bake fails and the version is rolled back, as before.
	t.Run("model-container-restart", func(t *testing.T) {
		t.Parallel()
		ns := newNamespace(t)
		readyModel(t, ns, v1, "", withSidecars)
		v1Hash, v2Hash := hashOf(t, v1), hashOf(t, v2)
		rec := watchBake(t, ns, v2Hash)
		bakeFor(t, ns, v2, bakeSeconds)
		waitBaking(t, ns)
		annotatePod(t, ns, versionPods(t, ns, v2Hash)[0].Name, minicluster.RestartContainerAnnotation, v1alpha1.DefaultContainerName)
		waitState(t, ns, "rolled back to "+v1, func(s state) bool {
			return s.snap.Observed() && s.m.Status.Phase == v1alpha1.PhaseRolledBack && s.m.Status.ActiveVersion == v1 && settled(s.d)
		})
		rec.stop()
		if got, want := rec.templates(), []string{v1Hash, v2Hash, v1Hash}; !slices.Equal(got, want) {
			t.Errorf("pod templates %v, want %v", got, want)
		}
		if msgs := recordedEvents(t, ns, v1alpha1.RolloutFailedReason, 1); len(msgs) != 1 || !strings.Contains(msgs[0], "ContainerRestarted") {
			t.Errorf("RolloutFailed events %q, want one naming ContainerRestarted", msgs)
		}
	})

	// The first version fails its bake (its pods crash 5 s after Ready) and
	// nothing is retained to roll back to. A reset bakes it again: the
	// restarts from before it are the failed bake's, so the retried bake
	// runs its full time and passes on the pods, which crash no more.
	t.Run("reset-after-failed-first-version-bake", func(t *testing.T) {
		t.Parallel()
		ns := newNamespace(t)
		createTarget(t, ns, nil)
		m := newModel(t, ns, crashingVersion, "")
		m.Spec.RolloutStrategy.BakeSeconds = ptr.To[int32](bakeSeconds)
		if err := k8s.Create(context.Background(), m); err != nil {
			t.Fatal(err)
		}
		waitState(t, ns, "the first version's bake failed", func(s state) bool {
			return s.snap.Observed() && s.m.Status.Phase == v1alpha1.PhaseFailed &&
				s.snap.Condition(v1alpha1.DegradedCondition) == "True/"+v1alpha1.BakeFailedReason
		})
		// kwok restarts every pod of the version once, 5 s after it became
		// Ready: the reset comes once all did (a restart after it would
		// rightly fail the retried bake) and are Ready again.
		crashHash := hashOf(t, crashingVersion)
		eventually(t, "every pod of the version restarted once and Ready again", func() (bool, string) {
			var seen []string
			done := true
			for _, p := range versionPods(t, ns, crashHash) {
				s := containerStatus(&p, v1alpha1.DefaultContainerName)
				if s == nil || s.RestartCount == 0 || !s.Ready {
					done = false
				}
				seen = append(seen, fmt.Sprintf("%s: %+v", p.Name, s))
			}
			return done, strings.Join(seen, "; ")
		})
		resetAt := time.Now()
		annotate(t, ns, v1alpha1.ResetRequestAnnotation, resetAt.UTC().Format(time.RFC3339Nano))
		s := waitStateWithin(t, ns, "Ready at "+crashingVersion+" after the retried bake", 2*bakeSeconds*time.Second+waitTimeout, func(s state) bool {
			return s.snap.Observed() && s.m.Status.Phase == v1alpha1.PhaseReady && s.m.Status.ActiveVersion == crashingVersion &&
				len(s.m.Status.History) > 0
		})
		// Both times have a resolution of a second.
		if baked := s.m.Status.History[0].ReadyAt.Sub(resetAt); baked < (bakeSeconds-1)*time.Second {
			t.Errorf("Ready %s after the reset, want the full bake of %ds", baked, bakeSeconds)
		}
		// The restarts from before the reset are still on the pods.
		for _, p := range versionPods(t, ns, crashHash) {
			if s := containerStatus(&p, v1alpha1.DefaultContainerName); s == nil || s.RestartCount != 1 {
				t.Errorf("pod %s after the retried bake: %+v, want the one restart from before the reset", p.Name, s)
			}
		}
	})
}

// bakeFor commits version with a bake of seconds.
func bakeFor(t *testing.T, ns, version string, seconds int) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"version":%q,"rolloutStrategy":{"bakeSeconds":%d}}}`, version, seconds)
	m := &v1alpha1.OpenMedModel{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: modelName}}
	if err := k8s.Patch(context.Background(), m, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
}

// waitBaking waits until the model reports its bake begun.
func waitBaking(t *testing.T, ns string) {
	t.Helper()
	waitState(t, ns, "baking", func(s state) bool {
		return s.snap.Observed() && s.m.Status.BakeStartedAt != nil && s.snap.Condition(v1alpha1.ReconcilingCondition) == "True/"+v1alpha1.BakingReason
	})
}

// bakedV2 is v2 Ready and retained after its bake, every pod on its template.
func bakedV2(s state) bool {
	return s.snap.Observed() && s.m.Status.Phase == v1alpha1.PhaseReady && s.m.Status.ActiveVersion == v2 && settled(s.d) &&
		len(s.m.Status.History) > 0 && s.m.Status.History[0].Version == v2
}

// landedDuringBake fails the test unless the fault, seen done at seen,
// landed before the bake of s ended: a fault after the bake tests nothing.
// The bake's end is the history's readyAt, written to the second: a fault
// seen within that second counts as during the bake.
func landedDuringBake(t *testing.T, s state, fault string, seen time.Time) {
	t.Helper()
	end := s.m.Status.History[0].ReadyAt.Time
	if !seen.Before(end.Add(time.Second)) {
		t.Errorf("the %s was seen done at %s, after the bake ended at %s: the bake was not tested against it",
			fault, seen.UTC().Format(time.RFC3339Nano), end.UTC().Format(time.RFC3339))
	}
}

// noRollback checks that a bake ended Ready without a failure: no
// RolledBack or Failed phase, no RolloutFailed event, and the templates
// applied once each.
func noRollback(t *testing.T, ns string, rec *bakeRecorder, templates []string) {
	t.Helper()
	if phases := rec.phases(); slices.Contains(phases, v1alpha1.PhaseRolledBack) || slices.Contains(phases, v1alpha1.PhaseFailed) {
		t.Errorf("phases during the bake: %v", phases)
	}
	if msgs := eventMessages(t, ns, v1alpha1.RolloutFailedReason); len(msgs) != 0 {
		t.Errorf("RolloutFailed events: %q", msgs)
	}
	if got := rec.templates(); !slices.Equal(got, templates) {
		t.Errorf("pod templates %v, want %v", got, templates)
	}
}

// reconcilingMessage is the message of the model's Reconciling condition.
func reconcilingMessage(m *v1alpha1.OpenMedModel) string {
	if c := apimeta.FindStatusCondition(m.Status.Conditions, v1alpha1.ReconcilingCondition); c != nil {
		return c.Message
	}
	return ""
}

// withSidecars adds a log shipper next to the model container and a native
// sidecar (an init container with restartPolicy Always, as a mesh proxy).
func withSidecars(d *appsv1.Deployment) {
	spec := &d.Spec.Template.Spec
	spec.Containers = append(spec.Containers, corev1.Container{Name: "log-shipper", Image: "fluent-bit:3.2"})
	spec.InitContainers = append(spec.InitContainers, corev1.Container{Name: "mesh-proxy", Image: "envoy:1.32",
		RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)})
}

// pinToPool keeps the target's pods on the nodes labelled for pool, which
// a taint reserves for them, and lets them outlive an unreachable node for
// 20 s instead of the 300 s admission gives by default.
func pinToPool(d *appsv1.Deployment, pool string) {
	spec := &d.Spec.Template.Spec
	spec.NodeSelector = map[string]string{poolLabel: pool}
	spec.Tolerations = []corev1.Toleration{
		{Key: poolLabel, Operator: corev1.TolerationOpEqual, Value: pool, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](20)},
		{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](20)},
	}
}

// joinNode adds a kwok node of the test's own pool, labelled and tainted
// for it, and waits until it is Ready. Cleanup deletes it (the pod garbage
// collector then removes its pods) and takes the pool label off the shared
// node.
func joinNode(t *testing.T, pool string) string {
	t.Helper()
	ctx := context.Background()
	name := "kwok-" + pool
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels: map[string]string{minicluster.NodeLabel: "fake", poolLabel: pool, corev1.LabelHostname: name, "type": "kwok"}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: poolLabel, Value: pool, Effect: corev1.TaintEffectNoSchedule}}},
	}
	if err := k8s.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = k8s.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, poolLabel)
		_ = k8s.Patch(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: minicluster.NodeName}}, client.RawPatch(types.MergePatchType, []byte(patch)))
	})
	eventually(t, "node "+name+" Ready and schedulable", func() (bool, string) {
		n := &corev1.Node{}
		if err := k8s.Get(ctx, client.ObjectKey{Name: name}, n); err != nil {
			return false, err.Error()
		}
		for _, taint := range n.Spec.Taints {
			if taint.Key == corev1.TaintNodeNotReady {
				return false, "tainted not-ready"
			}
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue, string(c.Status)
			}
		}
		return false, "no Ready condition"
	})
	return name
}

// labelNode sets a label on a node.
func labelNode(t *testing.T, node, key, value string) {
	t.Helper()
	patchNode(t, node, fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, key, value))
}

func patchNode(t *testing.T, node, patch string) {
	t.Helper()
	if err := k8s.Patch(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
}

// versionPods lists the live pods (not being deleted, not failed) of the
// version whose manifest hash is hash.
func versionPods(t *testing.T, ns, hash string) []corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := k8s.List(context.Background(), &pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodFailed && p.Annotations[v1alpha1.ManifestHashAnnotation] == hash {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		t.Fatalf("no pod of %s in %s", hash, ns)
	}
	return out
}

// podsOn lists the nodes of the live pods of the version.
func podsOn(t *testing.T, ns, hash string) []string {
	t.Helper()
	var out []string
	for _, p := range versionPods(t, ns, hash) {
		out = append(out, p.Spec.NodeName)
	}
	return out
}

func getPod(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// annotatePod sets an annotation on a pod, as a person with kubectl would.
func annotatePod(t *testing.T, ns, name, key, value string) {
	t.Helper()
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{key: value}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := k8s.Patch(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
}

// containerStatus is the status of container or init container c.
func containerStatus(p *corev1.Pod, c string) *corev1.ContainerStatus {
	for _, list := range [][]corev1.ContainerStatus{p.Status.ContainerStatuses, p.Status.InitContainerStatuses} {
		for i := range list {
			if list[i].Name == c {
				return &list[i]
			}
		}
	}
	return nil
}
