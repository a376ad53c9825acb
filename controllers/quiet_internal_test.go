package controllers

import (
	"reflect"
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

// TestObservedFieldsAreInputs holds the digest's one list of inputs to
// rollout.Observed: every field is either an input (passInputs), and a
// change of what it holds changes the digest, or named in observedFields
// with why a backstop pass may skip deciding without it. A field added to
// Observed and to neither fails here, before a backstop pass can skip a
// decision that reads it.
func TestObservedFieldsAreInputs(t *testing.T) {
	inputs := map[string]bool{}
	for _, in := range passInputs {
		if inputs[in.field] {
			t.Errorf("%s is an input twice", in.field)
		}
		inputs[in.field] = true
		if _, ok := observedFields[in.field]; ok {
			t.Errorf("%s is an input and in observedFields", in.field)
		}
	}
	typ := reflect.TypeOf(rollout.Observed{})
	for i := range typ.NumField() {
		name := typ.Field(i).Name
		if _, ok := observedFields[name]; !ok && !inputs[name] {
			t.Errorf("field %s of rollout.Observed is neither an input of the digest (passInputs) nor in observedFields", name)
		}
	}
	for name := range observedFields {
		if _, ok := typ.FieldByName(name); !ok {
			t.Errorf("observedFields names %s, which rollout.Observed does not have", name)
		}
	}
	// Each input's change moves the digest.
	model := &v1alpha1.OpenMedModel{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "svc", ResourceVersion: "10"}}
	model.Spec.TargetRef = &v1alpha1.TargetReference{Name: "svc"}
	model.Status.ClaimedTargets = []string{"old", "svc"}
	meta := func(name, rv string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv}
	}
	with := map[string]func(o *rollout.Observed, rv string){
		"Deployment": func(o *rollout.Observed, rv string) { o.Deployment = &appsv1.Deployment{ObjectMeta: meta("svc", rv)} },
		"PreviousTargets": func(o *rollout.Observed, rv string) {
			o.PreviousTargets = []*appsv1.Deployment{{ObjectMeta: meta("old", rv)}}
		},
		"ConfigMaps": func(o *rollout.Observed, rv string) {
			o.ConfigMaps = []corev1.ConfigMap{{ObjectMeta: meta("svc-a", rv)}}
		},
		"Pods":        func(o *rollout.Observed, rv string) { o.Pods = []corev1.Pod{{ObjectMeta: meta("svc-1", rv)}} },
		"PendingPods": func(o *rollout.Observed, rv string) { o.PendingPods = []corev1.Pod{{ObjectMeta: meta("svc-2", rv)}} },
	}
	for name := range inputs {
		set, ok := with[name]
		if !ok {
			t.Errorf("no change of the input %s is tried here", name)
			continue
		}
		var a, b rollout.Observed
		set(&a, "1")
		set(&b, "2")
		if observedInputs(model, &a) == observedInputs(model, &b) {
			t.Errorf("a change of %s leaves the digest as it was", name)
		}
	}
}
