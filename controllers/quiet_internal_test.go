package controllers

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/rollout"
)

// The digest a backstop pass compares changes with the resourceVersion of
// every input a pass reads, with an input that comes or goes, and not with
// the order the caches list them in.
func TestObservedInputsDigest(t *testing.T) {
	model := func() *v1alpha1.OpenMedModel {
		m := &v1alpha1.OpenMedModel{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "svc", ResourceVersion: "10"}}
		m.Spec.TargetRef = &v1alpha1.TargetReference{Name: "svc"}
		m.Status.ClaimedTargets = []string{"old", "svc"}
		return m
	}
	named := func(name, rv string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv}
	}
	observed := func() rollout.Observed {
		return rollout.Observed{
			Deployment:      &appsv1.Deployment{ObjectMeta: named("svc", "20")},
			PreviousTargets: []*appsv1.Deployment{{ObjectMeta: named("old", "25")}},
			ConfigMaps:      []corev1.ConfigMap{{ObjectMeta: named("svc-a", "30")}, {ObjectMeta: named("svc-b", "31")}},
			Pods:            []corev1.Pod{{ObjectMeta: named("svc-1", "40")}, {ObjectMeta: named("svc-2", "41")}},
			PendingPods:     []corev1.Pod{{ObjectMeta: named("svc-3", "50")}},
		}
	}
	o := observed()
	base := observedInputs(model(), &o)
	for _, tc := range []struct {
		name   string
		change func(*v1alpha1.OpenMedModel, *rollout.Observed)
		same   bool
	}{
		{"nothing", func(*v1alpha1.OpenMedModel, *rollout.Observed) {}, true},
		{"the order of the ConfigMaps and pods", func(_ *v1alpha1.OpenMedModel, o *rollout.Observed) {
			o.ConfigMaps[0], o.ConfigMaps[1] = o.ConfigMaps[1], o.ConfigMaps[0]
			o.Pods[0], o.Pods[1] = o.Pods[1], o.Pods[0]
		}, true},
		{"the time of the pass", func(_ *v1alpha1.OpenMedModel, o *rollout.Observed) { o.Now = metav1.Now() }, true},
		{"the model", func(m *v1alpha1.OpenMedModel, _ *rollout.Observed) { m.ResourceVersion = "11" }, false},
		{"the target", func(_ *v1alpha1.OpenMedModel, o *rollout.Observed) { o.Deployment.ResourceVersion = "21" }, false},
		{"the target gone", func(_ *v1alpha1.OpenMedModel, o *rollout.Observed) { o.Deployment = nil }, false},
		{"a previous target", func(_ *v1alpha1.OpenMedModel, o *rollout.Observed) { o.PreviousTargets[0].ResourceVersion = "26" }, false},
		{"a previous target gone", func(_ *v1alpha1.OpenMedModel, o *rollout.Observed) { o.PreviousTargets = nil }, false},
		{"a ConfigMap", func(_ *v1alpha1.OpenMedModel, o *rollout.Observed) { o.ConfigMaps[1].ResourceVersion = "32" }, false},
		{"a ConfigMap gone", func(_ *v1alpha1.OpenMedModel, o *rollout.Observed) { o.ConfigMaps = o.ConfigMaps[:1] }, false},
		{"a baking pod", func(_ *v1alpha1.OpenMedModel, o *rollout.Observed) { o.Pods[0].ResourceVersion = "42" }, false},
		{"a baking pod more", func(_ *v1alpha1.OpenMedModel, o *rollout.Observed) {
			o.Pods = append(o.Pods, corev1.Pod{ObjectMeta: named("svc-4", "43")})
		}, false},
		{"a pending pod", func(_ *v1alpha1.OpenMedModel, o *rollout.Observed) { o.PendingPods[0].ResourceVersion = "51" }, false},
		{"a pending pod that became a baking one", func(_ *v1alpha1.OpenMedModel, o *rollout.Observed) {
			o.Pods, o.PendingPods = append(o.Pods, o.PendingPods[0]), nil
		}, false},
		{"the ConfigMap version as a pod's", func(_ *v1alpha1.OpenMedModel, o *rollout.Observed) {
			o.ConfigMaps[0].Name, o.Pods[0].Name = o.Pods[0].Name, o.ConfigMaps[0].Name
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, o := model(), observed()
			tc.change(m, &o)
			if got := observedInputs(m, &o); (got == base) != tc.same {
				t.Errorf("digest %x, unchanged %x: same %v, want %v", got, base, got == base, tc.same)
			}
		})
	}
}
