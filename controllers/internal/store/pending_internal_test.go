package store

import (
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/rollout"
)

// pendingPodOf is a pod of the model's template as the ReplicaSet
// controller creates it, with the status the scheduler gave it.
func pendingPodOf(name, owner string, scheduled *corev1.PodCondition) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "models", Name: name, ResourceVersion: "42", UID: "0b4a4c8e-8f6d-2a3b-4c5d-6e7f9d1f7c2e",
			CreationTimestamp: metav1.NewTime(time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)),
			Labels:            map[string]string{"app.kubernetes.io/name": "openmed-service", "pod-template-hash": "7c9d8f6b5"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "openmed-service-7c9d8f6b5",
				UID: "9d1f7c2e-0b4a-4c8e-8f6d-2a3b4c5d6e7f", Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "openmed-service", Image: "openmed:2.2.0",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}},
			Env:       []corev1.EnvVar{{Name: v1alpha1.PreloadEnvVar, ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{Key: v1alpha1.PreloadEnvVar}}}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending, QOSClass: corev1.PodQOSBestEffort},
	}
	if owner != "" {
		p.Annotations = map[string]string{v1alpha1.ModelResourceAnnotation: owner, v1alpha1.ManifestHashAnnotation: fixtureHashV2}
	}
	if scheduled != nil {
		p.Status.Conditions = []corev1.PodCondition{*scheduled}
	}
	return p
}

const schedulerVerdict = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu. preemption: 0/4 nodes are available: 4 No preemption victims found for incoming pod."

func unschedulableCondition(message string) *corev1.PodCondition {
	return &corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		Message: message, LastTransitionTime: metav1.NewTime(time.Date(2026, 12, 3, 10, 0, 1, 0, time.UTC))}
}

// TestCompactPendingPodSaysTheSame: the pending-pod store keeps a pod
// compacted (compactPendingPod); the copy it gives back says what the
// scheduler said (bounded), keeps the annotations the decision selects
// by, and wakes the model exactly when the scheduler could not place it.
func TestCompactPendingPodSaysTheSame(t *testing.T) {
	long := strings.Repeat("0/4000 nodes are available: 4000 Insufficient nvidia.com/gpu. ", 20)
	deleting := pendingPodOf("openmed-service-7c9d8f6b5-gone", "models/clinical-ner", unschedulableCondition(schedulerVerdict))
	deleting.DeletionTimestamp = ptr.To(metav1.NewTime(time.Date(2026, 12, 3, 10, 0, 5, 0, time.UTC)))
	gated := pendingPodOf("openmed-service-7c9d8f6b5-gated", "models/clinical-ner", &corev1.PodCondition{Type: corev1.PodScheduled,
		Status: corev1.ConditionFalse, Reason: corev1.PodReasonSchedulingGated, Message: "Scheduling is blocked due to non-empty scheduling gates",
		LastTransitionTime: metav1.NewTime(time.Date(2026, 12, 3, 10, 0, 1, 0, time.UTC))})
	gated.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "kueue.x-k8s.io/admission"}, {Name: "example.com/budget"}}
	claiming := pendingPodOf("openmed-service-7c9d8f6b5-dra", "models/clinical-ner",
		unschedulableCondition("0/1 nodes are available: 1 cannot allocate all claims. still not schedulable, preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."))
	claiming.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("gpu-claim")}, {Name: "cache", ResourceClaimName: ptr.To("model-cache")}}
	tests := []struct {
		name  string
		pod   *corev1.Pod
		wakes bool
	}{
		{"unschedulable: no GPU free", pendingPodOf("openmed-service-7c9d8f6b5-x2kqp", "models/clinical-ner", unschedulableCondition(schedulerVerdict)), true},
		{"unschedulable, a long verdict", pendingPodOf("openmed-service-7c9d8f6b5-x2kqp", "models/clinical-ner", unschedulableCondition(long)), true},
		{"not yet seen by the scheduler", pendingPodOf("openmed-service-7c9d8f6b5-new", "models/clinical-ner", nil), false},
		{"bound, its status not yet written", pendingPodOf("openmed-service-7c9d8f6b5-bound", "models/clinical-ner",
			&corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}), false},
		{"another workload's pod", pendingPodOf("trainer-5d8f7c9b6-abcde", "", unschedulableCondition(schedulerVerdict)), false},
		{"being deleted", deleting, true},
		{"held by a scheduling gate (Kueue)", gated, true},
		{"no free device for its DRA claims", claiming, true},
	}
	// A pod of another namespace that carries a model's owner annotation
	// (a copy of its pod template), an owner annotation that names no
	// model, and one of 200 KiB: kept as another workload's pod, nothing
	// of their values kept.
	hostile := map[string]*corev1.Pod{
		"another namespace's copy":     pendingPodOf("openmed-service-7c9d8f6b5-copy", "victims/clinical-ner", unschedulableCondition(schedulerVerdict)),
		"an owner that names no model": pendingPodOf("openmed-service-7c9d8f6b5-x", "models/clinical ner", unschedulableCondition(schedulerVerdict)),
		"an owner of 200 KiB":          pendingPodOf("openmed-service-7c9d8f6b5-y", "models/"+strings.Repeat("x", 200*1024), unschedulableCondition(schedulerVerdict)),
	}
	for name, pod := range hostile {
		t.Run(name, func(t *testing.T) {
			obj, _ := compactPendingPod(pod)
			if kept := obj.(*pendingPod); kept.owner != "" || kept.manifestHash != "" || kept.scheduled != nil || kept.wakes() {
				t.Errorf("kept as a model's pod: owner %.40q, hash %q, wakes %v", kept.owner, kept.manifestHash, kept.wakes())
			}
		})
	}
	t.Run("a manifest hash that is no digest is not kept", func(t *testing.T) {
		pod := pendingPodOf("openmed-service-7c9d8f6b5-z", "models/clinical-ner", unschedulableCondition(schedulerVerdict))
		pod.Annotations[v1alpha1.ManifestHashAnnotation] = strings.Repeat("h", 200*1024)
		obj, _ := compactPendingPod(pod)
		if kept := obj.(*pendingPod); kept.owner != "models/clinical-ner" || kept.manifestHash != "" {
			t.Errorf("kept owner %q, hash %.40q", kept.owner, kept.manifestHash)
		}
	})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			obj, err := compactPendingPod(tc.pod.DeepCopy())
			if err != nil {
				t.Fatal(err)
			}
			kept := obj.(*pendingPod)
			if kept.wakes() != tc.wakes {
				t.Errorf("wakes() = %v, want %v", kept.wakes(), tc.wakes)
			}
			if tc.pod.Annotations == nil {
				if kept.owner != "" || kept.scheduled != nil {
					t.Errorf("another workload's pod kept as %+v", kept)
				}
				return
			}
			copied := kept.pod()
			for _, k := range []string{v1alpha1.ModelResourceAnnotation, v1alpha1.ManifestHashAnnotation} {
				if copied.Annotations[k] != tc.pod.Annotations[k] {
					t.Errorf("annotation %s = %q, want %q", k, copied.Annotations[k], tc.pod.Annotations[k])
				}
			}
			if w, g := rollout.SchedulingGated(tc.pod), rollout.SchedulingGated(&copied); (w == nil) != (g == nil) ||
				rollout.GateNames(tc.pod) != rollout.GateNames(&copied) || (w != nil && !w.LastTransitionTime.Equal(&g.LastTransitionTime)) {
				t.Errorf("SchedulingGated: full pod %v gates %q, copy %v gates %q", w, rollout.GateNames(tc.pod), g, rollout.GateNames(&copied))
			}
			if w, g := rollout.ClaimNames(tc.pod), rollout.ClaimNames(&copied); w != g {
				t.Errorf("ClaimNames: full pod %q, copy %q", w, g)
			}
			want, got := rollout.Unschedulable(tc.pod), rollout.Unschedulable(&copied)
			switch {
			case (want == nil) != (got == nil):
				t.Fatalf("Unschedulable: full pod %v, copy %v", want, got)
			case want == nil:
				return
			}
			if got.Message != rollout.Shorten(want.Message, rollout.MaxSchedulerMessage) || !got.LastTransitionTime.Equal(&want.LastTransitionTime) {
				t.Errorf("the copy says %q at %s, the pod %q at %s", got.Message, got.LastTransitionTime, want.Message, want.LastTransitionTime)
			}
		})
	}

	t.Run("a retry of the scheduler that says the same wakes no model", func(t *testing.T) {
		a, _ := compactPendingPod(pendingPodOf("p", "models/clinical-ner", unschedulableCondition(schedulerVerdict)))
		retried := pendingPodOf("p", "models/clinical-ner", unschedulableCondition(schedulerVerdict))
		retried.ResourceVersion = "43"
		b, _ := compactPendingPod(retried)
		if !b.(*pendingPod).sameAs(a.(*pendingPod)) {
			t.Error("a new resourceVersion with the same verdict is a change")
		}
		other, _ := compactPendingPod(pendingPodOf("p", "models/clinical-ner", unschedulableCondition("0/4 nodes are available: 4 Insufficient memory.")))
		if other.(*pendingPod).sameAs(a.(*pendingPod)) {
			t.Error("a new verdict is no change")
		}
	})
}

// BenchmarkPendingPodStore reports the heap a kept pending pod costs: what
// the pending-pod store holds per pod of a model that waits for a node.
func BenchmarkPendingPodStore(b *testing.B) {
	const n = 10000
	pods := make([]*corev1.Pod, n)
	for i := range pods {
		pods[i] = pendingPodOf("openmed-service-7c9d8f6b5-"+strconv.Itoa(10000+i), "models/model-"+strconv.Itoa(i%1000),
			unschedulableCondition(schedulerVerdict))
	}
	var perPod float64
	for b.Loop() {
		kept := make([]any, n)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for i, p := range pods {
			kept[i], _ = compactPendingPod(p)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perPod = float64(after.HeapAlloc-before.HeapAlloc) / n
		runtime.KeepAlive(kept)
	}
	b.ReportMetric(perPod, "bytes/pod")
}
