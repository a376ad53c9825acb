package controllers_test

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	kstatus "github.com/fluxcd/cli-utils/pkg/kstatus/status"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/health"
	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/rollout"
	"github.com/openmed/openmed-operator/pkg/testenv"
)

const (
	container = "openmed-service"
	timeout   = 30 * time.Second
)

var nsCounter atomic.Int64

// newNamespace creates a namespace of its own for one test.
func newNamespace(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("t%d-%s", nsCounter.Add(1), strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name())))
	if len(name) > 60 {
		name = strings.TrimRight(name[:60], "-")
	}
	if err := env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	return name
}

// helmClient writes as Helm 3 does: client-side (Update) with manager "helm".
func helmClient() client.Client { return client.WithFieldOwner(env.Client, "helm") }

// chartDeployment is the target as the OpenMed Helm chart renders it: no
// strategy, one container with an image, probes, an env var and envFrom.
func chartDeployment(ns, name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app.kubernetes.io/name": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"helm.sh/chart": "openmed-service-0.1.0"}},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name:  container,
					Image: "openmed:2.2.0",
					Env:   []corev1.EnvVar{{Name: "OTHER", Value: "kept"}},
					EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{
						LocalObjectReference: corev1.LocalObjectReference{Name: name + "-config"}}}},
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromInt32(8080)}}},
				}}},
			},
		},
	}
}

func createDeployment(t *testing.T, dep *appsv1.Deployment) *appsv1.Deployment {
	t.Helper()
	if err := helmClient().Create(context.Background(), dep); err != nil {
		t.Fatal(err)
	}
	return dep
}

func newModel(ns, name, version string) *v1alpha1.OpenMedModel {
	return &v1alpha1.OpenMedModel{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.OpenMedModelSpec{
			Family:    "PII",
			Version:   version,
			Tier:      v1alpha1.TierSmall,
			Replicas:  ptr.To[int32](2),
			TargetRef: &v1alpha1.TargetReference{Name: name, ContainerName: container},
			RolloutStrategy: v1alpha1.RolloutStrategy{
				Type:                    v1alpha1.RollingUpdateRolloutStrategyType,
				ProgressDeadlineSeconds: ptr.To[int32](60),
			},
		},
	}
}

func createModel(t *testing.T, m *v1alpha1.OpenMedModel) {
	t.Helper()
	if err := env.Client.Create(context.Background(), m, client.FieldValidation("Strict")); err != nil {
		t.Fatal(err)
	}
}

// eventually polls cond until it holds or the timeout passes.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	testenv.Eventually(t, timeout, what, cond)
}

func getModel(t *testing.T, ns, name string) *v1alpha1.OpenMedModel {
	t.Helper()
	m := &v1alpha1.OpenMedModel{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, m); err != nil {
		t.Fatal(err)
	}
	return m
}

func getDeployment(t *testing.T, ns, name string) *appsv1.Deployment {
	t.Helper()
	d := &appsv1.Deployment{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, d); err != nil {
		t.Fatal(err)
	}
	return d
}

// waitFor waits until the model's status matches: phase, the Ready
// condition's status and reason, and that the status describes the current
// generation.
// Any of readyReasons matches; none means any reason.
func waitFor(t *testing.T, ns, name string, phase v1alpha1.Phase, readyReasons ...string) *v1alpha1.OpenMedModel {
	t.Helper()
	var m *v1alpha1.OpenMedModel
	eventually(t, fmt.Sprintf("%s/%s phase %s reason %v", ns, name, phase, readyReasons), func() (bool, string) {
		m = getModel(t, ns, name)
		ready := condition(m, v1alpha1.ReadyCondition)
		got := fmt.Sprintf("phase=%s ready=%v og=%d gen=%d", m.Status.Phase, ready, m.Status.ObservedGeneration, m.Generation)
		return m.Status.Phase == phase && ready != nil && (len(readyReasons) == 0 || contains(readyReasons, ready.Reason)) &&
			m.Status.ObservedGeneration == m.Generation, got
	})
	return m
}

func condition(m *v1alpha1.OpenMedModel, t string) *metav1.Condition {
	for i := range m.Status.Conditions {
		if m.Status.Conditions[i].Type == t {
			return &m.Status.Conditions[i]
		}
	}
	return nil
}

// preload returns the target container's OPENMED_SERVICE_PRELOAD_MODELS entry.
func preload(d *appsv1.Deployment) *corev1.EnvVar { return rollout.PreloadEnv(d, container) }

// pointerConfigMap is the ConfigMap the Deployment's preload env points at.
func pointerConfigMap(t *testing.T, d *appsv1.Deployment) *corev1.ConfigMap {
	t.Helper()
	env := preload(d)
	if env == nil || env.ValueFrom == nil || env.ValueFrom.ConfigMapKeyRef == nil {
		t.Fatalf("Deployment %s has no preload pointer", d.Name)
	}
	cm := &corev1.ConfigMap{}
	if err := envClient().Get(context.Background(), client.ObjectKey{Namespace: d.Namespace, Name: env.ValueFrom.ConfigMapKeyRef.Name}, cm); err != nil {
		t.Fatal(err)
	}
	return cm
}

func envClient() client.Client { return env.Client }

// updateDeploymentStatus plays the Deployment controller: it writes status
// through the status subresource.
func updateDeploymentStatus(t *testing.T, ns, name string, mutate func(*appsv1.Deployment)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d := getDeployment(t, ns, name)
		mutate(d)
		return env.Client.Status().Update(context.Background(), d)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// rolloutComplete is the status of a Deployment whose current template is
// fully available.
func rolloutComplete(d *appsv1.Deployment) {
	r := ptr.Deref(d.Spec.Replicas, 1)
	d.Status = appsv1.DeploymentStatus{
		// The controller never decrements collisionCount.
		CollisionCount:     d.Status.CollisionCount,
		ObservedGeneration: d.Generation, Replicas: r, UpdatedReplicas: r, ReadyReplicas: r, AvailableReplicas: r,
		Conditions: []appsv1.DeploymentCondition{
			{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable"},
			{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetAvailable"},
		},
	}
}

// rolloutStuck is the status of a Deployment whose new pods never became
// ready before the deadline while the old pods keep serving.
func rolloutStuck(d *appsv1.Deployment) {
	r := ptr.Deref(d.Spec.Replicas, 1)
	d.Status = appsv1.DeploymentStatus{
		CollisionCount:     d.Status.CollisionCount,
		ObservedGeneration: d.Generation, Replicas: r + 1, UpdatedReplicas: 1, ReadyReplicas: r, AvailableReplicas: r, UnavailableReplicas: 1,
		Conditions: []appsv1.DeploymentCondition{
			{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable"},
			{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded"},
		},
	}
}

func toUnstructured(t *testing.T, m *v1alpha1.OpenMedModel) *unstructured.Unstructured {
	t.Helper()
	m = m.DeepCopy()
	m.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("OpenMedModel"))
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(m)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: u}
}

// kstatusOf computes Flux's kstatus on the live object.
func kstatusOf(t *testing.T, m *v1alpha1.OpenMedModel) kstatus.Status {
	t.Helper()
	res, err := kstatus.Compute(toUnstructured(t, m))
	if err != nil {
		t.Fatal(err)
	}
	return res.Status
}

// argoHealth is the Argo CD health the shipped health check gives the live
// object.
func argoHealth(t *testing.T, m *v1alpha1.OpenMedModel) health.Code {
	t.Helper()
	return health.Assess(toUnstructured(t, m)).Code
}

// eventReasons lists the reasons of the events recorded for the model.
func eventReasons(t *testing.T, ns, name string) []string {
	t.Helper()
	var list corev1.EventList
	if err := env.Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		if e.InvolvedObject.Name == name && e.InvolvedObject.Kind == "OpenMedModel" {
			out = append(out, e.Reason)
		}
	}
	return out
}

func eventMessages(t *testing.T, ns, name, reason string) []string {
	t.Helper()
	var list corev1.EventList
	if err := env.Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		if e.InvolvedObject.Name == name && e.Reason == reason {
			out = append(out, e.Message)
		}
	}
	return out
}

// recordedEvents waits until at least n events of the object with reason
// are stored and returns their messages. The operator's recorder writes
// events asynchronously: a status that says what happened can be read
// before the event that says it.
func recordedEvents(t *testing.T, ns, name, reason string, n int) []string {
	t.Helper()
	var msgs []string
	eventually(t, fmt.Sprintf("%d %s event(s) of %s", n, reason, name), func() (bool, string) {
		msgs = eventMessages(t, ns, name, reason)
		return len(msgs) >= n, fmt.Sprint(msgs)
	})
	return msgs
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func isNotFound(err error) bool { return apierrors.IsNotFound(err) }

// templateReplicaSet returns the controller reference of d's ReplicaSet of
// the pod-template-hash hash, which it creates the first time as the
// Deployment controller does: named "<deployment>-<hash>", labelled with
// the template's labels and the hash, controlled by d's UID. The test
// environment runs no controllers: it creates no pod of its own.
func templateReplicaSet(t *testing.T, d *appsv1.Deployment, hash string) metav1.OwnerReference {
	t.Helper()
	ctx := context.Background()
	rs := &appsv1.ReplicaSet{}
	err := env.Client.Get(ctx, client.ObjectKey{Namespace: d.Namespace, Name: d.Name + "-" + hash}, rs)
	if apierrors.IsNotFound(err) {
		l := maps.Clone(d.Spec.Template.Labels)
		l[appsv1.DefaultDeploymentUniqueLabelKey] = hash
		rs = &appsv1.ReplicaSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: d.Namespace, Name: d.Name + "-" + hash, Labels: l,
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(d, appsv1.SchemeGroupVersion.WithKind("Deployment"))}},
			Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](0), Selector: &metav1.LabelSelector{MatchLabels: l},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: l}, Spec: d.Spec.Template.Spec}},
		}
		err = env.Client.Create(ctx, rs)
	}
	if err != nil {
		t.Fatal(err)
	}
	return *metav1.NewControllerRef(rs, appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))
}
