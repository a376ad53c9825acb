package main

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/testenv"
)

// timeout bounds every wait; the machine running the tests is small and
// shared, and each step involves a separate process.
const timeout = 60 * time.Second

// eventually polls cond until it holds or the timeout passes.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	testenv.Eventually(t, timeout, what, cond)
}

var nsCounter atomic.Int64

// newNamespace creates a namespace for one test.
func newNamespace(t *testing.T, prefix string) string {
	t.Helper()
	name := fmt.Sprintf("%s-%d", prefix, nsCounter.Add(1))
	if err := env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	return name
}

// fixture reads testdata/<file> into obj.
func fixture(t *testing.T, file string, obj any) {
	t.Helper()
	data, err := os.ReadFile("testdata/" + file)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, obj); err != nil {
		t.Fatalf("testdata/%s: %v", file, err)
	}
}

// createTarget creates the chart's Deployment as Helm would (field manager
// "helm").
func createTarget(t *testing.T, ns, name string) {
	t.Helper()
	dep := &appsv1.Deployment{}
	fixture(t, "target.yaml", dep)
	dep.Namespace, dep.Name = ns, name
	if err := env.Client.Create(context.Background(), dep, client.FieldOwner("helm")); err != nil {
		t.Fatal(err)
	}
}

// createModel creates an OpenMedModel for the target of the same name.
func createModel(t *testing.T, ns, name string, labels map[string]string) {
	t.Helper()
	m := &v1alpha1.OpenMedModel{}
	fixture(t, "model.yaml", m)
	m.Namespace, m.Name, m.Labels = ns, name, labels
	m.Spec.TargetRef.Name = name
	if err := env.Client.Create(context.Background(), m, client.FieldValidation("Strict")); err != nil {
		t.Fatal(err)
	}
}

func getModel(t *testing.T, ns, name string) *v1alpha1.OpenMedModel {
	t.Helper()
	m := &v1alpha1.OpenMedModel{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, m); err != nil {
		t.Fatal(err)
	}
	return m
}

// waitPhase waits until the model's status describes its generation in the
// given phase.
func waitPhase(t *testing.T, ns, name string, phase v1alpha1.Phase) {
	t.Helper()
	eventually(t, fmt.Sprintf("%s/%s in phase %s", ns, name, phase), func() (bool, string) {
		m := getModel(t, ns, name)
		return m.Status.Phase == phase && m.Status.ObservedGeneration == m.Generation,
			fmt.Sprintf("phase=%q og=%d gen=%d", m.Status.Phase, m.Status.ObservedGeneration, m.Generation)
	})
}

// completeRollout plays the Deployment controller: the current template is
// fully available.
func completeRollout(t *testing.T, ns, name string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d := &appsv1.Deployment{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, d); err != nil {
			return err
		}
		r := ptr.Deref(d.Spec.Replicas, 1)
		d.Status = appsv1.DeploymentStatus{
			ObservedGeneration: d.Generation, Replicas: r, UpdatedReplicas: r, ReadyReplicas: r, AvailableReplicas: r,
			Conditions: []appsv1.DeploymentCondition{
				{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable"},
				{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetAvailable"},
			},
		}
		return env.Client.Status().Update(context.Background(), d)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// hasPointer reports whether the target carries the operator's preload env.
func hasPointer(t *testing.T, ns, name string) bool {
	t.Helper()
	d := &appsv1.Deployment{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, d); err != nil {
		t.Fatal(err)
	}
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, e := range c.Env {
			if e.Name == v1alpha1.PreloadEnvVar {
				return true
			}
		}
	}
	return false
}

// deleteModel deletes the model and waits until the finalizer let it go.
func deleteModel(t *testing.T, ns, name string) {
	t.Helper()
	if err := env.Client.Delete(context.Background(), getModel(t, ns, name)); err != nil {
		t.Fatal(err)
	}
	eventually(t, fmt.Sprintf("%s/%s deleted", ns, name), func() (bool, string) {
		err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &v1alpha1.OpenMedModel{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

// rollOut creates a target and its model in ns and plays the rollout: the
// operator sets the model pointer, the test completes the Deployment's
// rollout (nothing else runs controllers here), the model is Ready.
func rollOut(t *testing.T, ns, name string) {
	t.Helper()
	createTarget(t, ns, name)
	createModel(t, ns, name, nil)
	waitPhase(t, ns, name, v1alpha1.PhaseRollingOut)
	if !hasPointer(t, ns, name) {
		t.Fatal("the rollout did not set the model pointer")
	}
	completeRollout(t, ns, name)
	waitPhase(t, ns, name, v1alpha1.PhaseReady)
}
