package controllers

import (
	"os"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/openmed/openmed-operator/pkg/rollout"
)

// TestCompactPodBakesTheSame: the pod store keeps a pod compacted
// (compactPod); for every pod in testdata/pods — kubelet-shaped statuses
// of a serving pod, a restart, an OOM kill, an unready pod, a scale-up
// warming, a draining pod, the previous version's crash — alone and all
// together, at every moment of a bake, the bake's verdict on the copy the
// store gives back is the verdict on the full pod.
func TestCompactPodBakesTheSame(t *testing.T) {
	pods := readPods(t)
	compact := func(p corev1.Pod) corev1.Pod {
		out, err := compactPod(p.DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		return out.(*bakePod).pod()
	}
	const hash = "sha256-v2"
	start := time.Date(2026, 12, 1, 10, 0, 30, 0, time.UTC)
	seen := map[string]bool{}
	for _, now := range []time.Duration{time.Second, 15 * time.Second, 25 * time.Second, 35 * time.Second, 2 * time.Minute} {
		at := start.Add(now)
		var all []corev1.Pod
		for _, p := range pods {
			c := compact(p)
			all = append(all, c)
			wantReason, wantRecheck := rollout.BakeFailure([]corev1.Pod{p}, hash, start, at)
			gotReason, gotRecheck := rollout.BakeFailure([]corev1.Pod{c}, hash, start, at)
			if wantReason != gotReason || wantRecheck != gotRecheck {
				t.Errorf("%s at +%s: the full pod gives %q (recheck %s), the compact copy %q (%s)", p.Name, now, wantReason, wantRecheck, gotReason, gotRecheck)
			}
			seen[wantReason] = true
			if c.Name != p.Name || c.Namespace != p.Namespace || !reflect.DeepEqual(c.DeletionTimestamp, p.DeletionTimestamp) {
				t.Errorf("%s: the compact copy is %s/%s, deleting %v", p.Name, c.Namespace, c.Name, c.DeletionTimestamp)
			}
		}
		wantReason, wantRecheck := rollout.BakeFailure(pods, hash, start, at)
		if gotReason, gotRecheck := rollout.BakeFailure(all, hash, start, at); wantReason != gotReason || wantRecheck != gotRecheck {
			t.Errorf("all pods at +%s: full %q (%s), compact %q (%s)", now, wantReason, wantRecheck, gotReason, gotRecheck)
		}
	}
	// The table covers every verdict, or it proves less than it says.
	for _, r := range append([]string{""}, rollout.BakeFailures...) {
		if !seen[r] {
			t.Errorf("no pod in testdata/pods gives the verdict %q", r)
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
			if got := keep(serving.DeepCopy()).same(keep(edited)); got != tc.same {
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
