package store

import (
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/rollout"
)

// fixtureVersion is the baking version of testdata/pods.
var fixtureVersion = rollout.BakeVersion{Namespace: "ns", ReplicaSets: []types.UID{"9d1f7c2e-0b4a-4c8e-8f6d-2a3b4c5d6e7f"},
	Container: "openmed-service", ManifestHash: fixtureHashV2, NotReadyNodes: []string{"kwok-node-lost"}}

// fixtureHashV2 is the manifest hash of the baking version of
// testdata/pods.
const fixtureHashV2 = "sha256:fb04dcb6970e4c3d1873de51fd5a50d7bb46b3383113602665c350ec40b5f990"

// fixtureBakeStart is when the bake of testdata/pods began.
var fixtureBakeStart = time.Date(2026, 12, 1, 10, 0, 30, 0, time.UTC)

// TestCompactPodBakesTheSame: the pod store keeps a pod compacted
// (compactPod); for every pod in testdata/pods — kubelet-shaped statuses
// of a serving pod, a restart, an OOM kill, an unready pod, a scale-up
// warming, a draining pod, the previous version's crash, a lost node, a
// kubelet eviction, a node shutdown, sidecars, the previous target's pods
// — alone and all together, at every moment of a bake, the bake's verdict
// on the copy the store gives back is the verdict on the full pod.
func TestCompactPodBakesTheSame(t *testing.T) {
	pods := readPods(t)
	compact := func(p corev1.Pod) corev1.Pod {
		out, err := compactPod(p.DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		return out.(*bakePod).pod()
	}
	seen := map[string]bool{}
	nodeNotReady := false
	for _, now := range []time.Duration{time.Second, 15 * time.Second, 25 * time.Second, 35 * time.Second, 2 * time.Minute} {
		at := fixtureBakeStart.Add(now)
		var all []corev1.Pod
		for _, p := range pods {
			c := compact(p)
			all = append(all, c)
			want := fixtureVersion.Judge([]corev1.Pod{p}, fixtureBakeStart, at)
			if got := fixtureVersion.Judge([]corev1.Pod{c}, fixtureBakeStart, at); got != want {
				t.Errorf("%s at +%s: the full pod gives %+v, the compact copy %+v", p.Name, now, want, got)
			}
			seen[want.Failure] = true
			nodeNotReady = nodeNotReady || want.NodeNotReady
			if c.Name != p.Name || c.Namespace != p.Namespace || !reflect.DeepEqual(c.DeletionTimestamp, p.DeletionTimestamp) {
				t.Errorf("%s: the compact copy is %s/%s, deleting %v", p.Name, c.Namespace, c.Name, c.DeletionTimestamp)
			}
		}
		want := fixtureVersion.Judge(pods, fixtureBakeStart, at)
		if got := fixtureVersion.Judge(all, fixtureBakeStart, at); got != want {
			t.Errorf("all pods at +%s: full %+v, compact %+v", now, want, got)
		}
	}
	// The table covers every verdict, or it proves less than it says.
	for _, r := range append([]string{""}, rollout.BakeFailures...) {
		if !seen[r] {
			t.Errorf("no pod in testdata/pods gives the verdict %q", r)
		}
	}
	if !nodeNotReady {
		t.Error("no pod in testdata/pods is on a node that is not Ready")
	}
}

// TestBakeJudgesRealPodLifecycles: what each pod of testdata/pods alone
// says of the bake, 35 s after it began (past every grace): the cluster's
// failures (a lost node, a kubelet eviction, a node shutdown) and other
// containers never fail the version; the model container's own restart
// at any time does, before the pass that begins the bake too (a crash a
// second after Ready); a restart from before a reset that retries the
// version on the same pods does not;
// pods of another ReplicaSet (the previous version, the previous target)
// are never read.
func TestBakeJudgesRealPodLifecycles(t *testing.T) {
	want := map[string]rollout.BakeVerdict{
		"a-serving":                      {Serving: true},
		"b-restarted":                    {Failure: rollout.BakeContainerRestarted},
		"c-oom-killed-now":               {Failure: rollout.BakeOOMKilled},
		"d-unready":                      {Failure: rollout.BakePodUnready},
		"e-scaled-up-warming":            {},
		"f-draining":                     {},
		"g-previous-version-crashed":     {},
		"h-no-ready-condition-yet":       {},
		"i-node-lost":                    {NodeNotReady: true},
		"j-evicted-by-the-kubelet":       {},
		"k-node-shutdown":                {},
		"l-sidecar-restarted":            {Serving: true},
		"m-previous-target-crashed":      {},
		"n-restarted-before-the-bake":    {Failure: rollout.BakeContainerRestarted},
		"o-scaled-up-ready-then-unready": {Failure: rollout.BakePodUnready},
		"p-copy-in-another-namespace":    {},
		"q-forged-controller-reference":  {},
	}
	at := fixtureBakeStart.Add(35 * time.Second)
	pods := readPods(t)
	if len(pods) != len(want) {
		t.Fatalf("%d pods in testdata/pods, %d verdicts here", len(pods), len(want))
	}
	for _, p := range pods {
		w, ok := want[p.Name]
		if !ok {
			t.Errorf("no verdict for %s", p.Name)
			continue
		}
		if got := fixtureVersion.Judge([]corev1.Pod{p}, fixtureBakeStart, at); got != w {
			t.Errorf("%s: %+v, want %+v", p.Name, got, w)
		}
	}
	// After a reset that retries the version on the same pods, a restart
	// from before the reset is the failure it retries, not a new one.
	// Both times have a resolution of a second: a termination in the
	// reset's own second is the failure it retries; one a second later is
	// new.
	for _, tc := range []struct {
		retry time.Time
		want  rollout.BakeVerdict
	}{
		{fixtureBakeStart, rollout.BakeVerdict{Serving: true}},
		{time.Date(2026, 12, 1, 10, 0, 20, 700e6, time.UTC), rollout.BakeVerdict{Serving: true}},
		{time.Date(2026, 12, 1, 10, 0, 19, 0, time.UTC), rollout.BakeVerdict{Failure: rollout.BakeContainerRestarted}},
	} {
		reset := fixtureVersion
		reset.RetryStartedAt = tc.retry
		for _, p := range pods {
			if p.Name == "n-restarted-before-the-bake" {
				if got := reset.Judge([]corev1.Pod{p}, fixtureBakeStart, at); got != tc.want {
					t.Errorf("n-restarted-before-the-bake (finished 10:00:20) after a reset at %s: %+v, want %+v", tc.retry.Format(time.RFC3339Nano), got, tc.want)
				}
			}
		}
	}
	// The lost node's pod is judged like any other once the node is back.
	healed := fixtureVersion
	healed.NotReadyNodes = nil
	for _, p := range pods {
		if p.Name == "i-node-lost" {
			if got := healed.Judge([]corev1.Pod{p}, fixtureBakeStart, at); got.Failure != rollout.BakePodUnready {
				t.Errorf("i-node-lost on a Ready node: %+v, want %s", got, rollout.BakePodUnready)
			}
		}
	}
}

// TestCompactPodUpdatesThatWakeNoModel: an update of a pod wakes its model
// only when it changes what the bake reads.
func TestCompactPodUpdatesThatWakeNoModel(t *testing.T) {
	pods := readPods(t)
	keep := func(p *corev1.Pod) *bakePod {
		out, _ := compactPod(p)
		return out.(*bakePod)
	}
	serving := &pods[0]
	for name, tc := range map[string]struct {
		edit func(p *corev1.Pod)
		same bool
	}{
		"a new resourceVersion, IP and phase": {func(p *corev1.Pod) {
			p.ResourceVersion, p.Status.PodIP, p.Status.Phase = "1300", "10.244.0.99", corev1.PodRunning
		}, true},
		"a label and another annotation": {func(p *corev1.Pod) { p.Labels["x"], p.Annotations["y"] = "1", "2" }, true},
		"the restart count alone":        {func(p *corev1.Pod) { p.Status.ContainerStatuses[0].RestartCount = 4 }, true},
		"Ready turns False": {func(p *corev1.Pod) {
			for i := range p.Status.Conditions {
				if p.Status.Conditions[i].Type == corev1.PodReady {
					p.Status.Conditions[i].Status = corev1.ConditionFalse
				}
			}
		}, false},
		"a container terminated": {func(p *corev1.Pod) {
			p.Status.ContainerStatuses[0].LastTerminationState.Terminated = &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 1}
		}, false},
		"being deleted": {func(p *corev1.Pod) { p.DeletionTimestamp = &pods[5].ObjectMeta.CreationTimestamp }, false},
	} {
		t.Run(name, func(t *testing.T) {
			edited := serving.DeepCopy()
			tc.edit(edited)
			if got := keep(serving.DeepCopy()).sameAs(keep(edited)); got != tc.same {
				t.Errorf("same = %t, want %t", got, tc.same)
			}
		})
	}
}

// readPods reads testdata/pods/pods.yaml.
func readPods(t *testing.T) []corev1.Pod {
	t.Helper()
	raw, err := os.ReadFile("testdata/pods/pods.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var pods []corev1.Pod
	if err := yaml.UnmarshalStrict(raw, &pods); err != nil {
		t.Fatal(err)
	}
	return pods
}

// TestCompactPodKeepsTheGate: a pod gated by the operator's readiness gate
// keeps, compacted, what the golden request needs (IP, named ports,
// whether its containers are ready, the gate's condition), and waits for
// a verdict (waking its model whoever watches) exactly while it has none;
// a pod without the gate keeps none of it.
func TestCompactPodKeepsTheGate(t *testing.T) {
	base := corev1.Pod{}
	base.Namespace, base.Name = "ns", "openmed-service-1"
	base.Annotations = map[string]string{v1alpha1.ModelResourceAnnotation: "ns/openmed-service", v1alpha1.ManifestHashAnnotation: fixtureHashV2}
	base.Spec.Containers = []corev1.Container{{Name: "openmed-service", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}, {ContainerPort: 9090}}}}
	base.Status.PodIP = "127.9.0.4"
	base.Status.Conditions = []corev1.PodCondition{{Type: corev1.ContainersReady, Status: corev1.ConditionTrue}, {Type: corev1.PodReady, Status: corev1.ConditionFalse}}
	kept := func(p *corev1.Pod) *bakePod {
		out, err := compactPod(p.DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		return out.(*bakePod)
	}

	if b := kept(&base); b.gate != nil || b.awaitsVerification() || b.pod().Status.PodIP != "" {
		t.Fatalf("a pod without the gate keeps %+v", b.gate)
	}
	gated := base.DeepCopy()
	gated.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: "example.com/lb"}, {ConditionType: v1alpha1.VerifiedCondition}}
	b := kept(gated)
	if !b.awaitsVerification() {
		t.Fatalf("a gated pod, its containers ready, no verdict: %+v does not wait for one", b.gate)
	}
	p := b.pod()
	if !rollout.Gated(&p) || p.Status.PodIP != "127.9.0.4" || rollout.VerifiedCondition(&p) != nil ||
		len(p.Spec.Containers) != 1 || !reflect.DeepEqual(p.Spec.Containers[0].Ports, []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}) {
		t.Fatalf("kept pod %+v", p)
	}

	judged := gated.DeepCopy()
	probed := metav1.NewTime(time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC))
	judged.Status.Conditions = append(judged.Status.Conditions, corev1.PodCondition{Type: v1alpha1.VerifiedCondition, Status: corev1.ConditionFalse,
		Reason: v1alpha1.PodVerificationFailedReason, Message: strings.Repeat("x", 2000), LastProbeTime: probed, LastTransitionTime: probed})
	j := kept(judged)
	if j.awaitsVerification() || b.sameAs(j) {
		t.Fatalf("a verdict: awaits %v, same as before %v", j.awaitsVerification(), b.sameAs(j))
	}
	c := j.pod()
	if v := rollout.VerifiedCondition(&c); v == nil || v.Status != corev1.ConditionFalse || len(v.Message) != maxVerifiedMessage || !v.LastProbeTime.Equal(&probed) {
		t.Fatalf("kept verdict %+v", v)
	}
	again := judged.DeepCopy()
	again.ResourceVersion = "2"
	if !j.sameAs(kept(again)) {
		t.Error("an update that changes nothing kept wakes the model")
	}
	going := gated.DeepCopy()
	going.DeletionTimestamp = &probed
	if kept(going).awaitsVerification() {
		t.Error("a pod being deleted waits for a verdict")
	}
}
