package rollout_test

import (
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/rollout"
)

func exampleModel() *v1alpha1.OpenMedModel {
	replicas := int32(2)
	obj := &v1alpha1.OpenMedModel{
		ObjectMeta: metav1.ObjectMeta{Name: "openmed-service", Namespace: "models", UID: "uid-1", Generation: 1},
		Spec: v1alpha1.OpenMedModelSpec{
			Family: "PII", Version: "OpenMed/synthetic-pii-v1", Tier: v1alpha1.TierSmall, Replicas: &replicas,
			RolloutStrategy: v1alpha1.RolloutStrategy{Type: v1alpha1.RollingUpdateRolloutStrategyType},
		},
	}
	obj.Default()
	return obj
}

func exampleDeployment() *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "openmed-service", Namespace: "models", Generation: 1},
		Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "openmed-service", Image: "openmed-service:2.3.0"}},
		}}},
	}
}

// Decide on a new resource whose target exists: the plan creates the
// manifest ConfigMap, claims the Deployment and points it at the manifest.
func ExampleDecide() {
	obj := exampleModel()
	plan := rollout.Decide(obj, rollout.Observed{
		Deployment: exampleDeployment(),
		Now:        metav1.NewTime(time.Date(2026, 8, 18, 12, 0, 0, 0, time.UTC)),
	}, rollout.Options{})

	fmt.Println("phase:", plan.Status.Phase)
	fmt.Println("create:", plan.EnsureConfigMaps[0].Name)
	fmt.Println("apply to:", plan.ApplyDeployment.GetName(), "claim:", plan.Claim)
	for _, e := range plan.Events {
		fmt.Println("event:", e.Type, e.Reason)
	}
	fmt.Println("requeue after:", plan.RequeueAfter)
	// Output:
	// phase: RollingOut
	// create: openmed-service-model-manifest-5a62c38517f97235ee02
	// apply to: openmed-service claim: true
	// event: Normal RolloutStarted
	// requeue after: 15s
}

// Normalize, hash and name what a spec produces, without a cluster.
func ExampleNormalize() {
	obj := exampleModel()
	spec, err := rollout.Normalize(obj)
	if err != nil {
		fmt.Println("invalid:", err)
		return
	}
	hash := rollout.ManifestHash(spec)
	fmt.Println(rollout.OwnerKey(obj))
	fmt.Println(hash)
	fmt.Println(rollout.ManifestConfigMapName(spec.ManifestConfigMapName, hash))
	// Output:
	// models/openmed-service
	// sha256:5a62c38517f97235ee02660f166bd123927813578528e33f909a5fd37ba72237
	// openmed-service-model-manifest-5a62c38517f97235ee02
}

// Normalize reports an invalid spec without echoing the value.
func ExampleNormalize_invalid() {
	obj := exampleModel()
	obj.Spec.Tier = "Huge"
	_, err := rollout.Normalize(obj)
	fmt.Println(err)
	// Output:
	// spec.tier: Invalid value: must be one of Accurate-XLarge, Base, Large, Medium, Small, Tiny, XLarge
}

// The partial object the operator server-side applies: only its own fields.
func ExampleDeploymentIntent() {
	obj := exampleModel()
	spec, _ := rollout.Normalize(obj)
	hash := rollout.ManifestHash(spec)
	cm := rollout.ManifestConfigMapName(spec.ManifestConfigMapName, hash)
	u := rollout.DeploymentIntent(spec, rollout.OwnerKey(obj), cm, hash)
	data, _ := u.MarshalJSON()
	fmt.Println(string(data))
	// Output:
	// {"apiVersion":"apps/v1","kind":"Deployment","metadata":{"annotations":{"openmed.ai/model-resource":"models/openmed-service"},"labels":{"openmed.ai/claimed":"true"},"name":"openmed-service","namespace":"models"},"spec":{"progressDeadlineSeconds":600,"replicas":2,"strategy":{"rollingUpdate":{"maxSurge":1,"maxUnavailable":0},"type":"RollingUpdate"},"template":{"metadata":{"annotations":{"openmed.ai/model-manifest-hash":"sha256:5a62c38517f97235ee02660f166bd123927813578528e33f909a5fd37ba72237","openmed.ai/model-resource":"models/openmed-service"}},"spec":{"containers":[{"env":[{"name":"OPENMED_SERVICE_PRELOAD_MODELS","value":"","valueFrom":{"configMapKeyRef":{"key":"OPENMED_SERVICE_PRELOAD_MODELS","name":"openmed-service-model-manifest-5a62c38517f97235ee02"}}}],"name":"openmed-service"}]}}}}
}

// Drift is reported per field with the managers that changed it.
func ExampleDrift_String() {
	d := rollout.Drift{Field: "spec.replicas", Managers: []string{"helm"}}
	fmt.Println(d)
	// Output:
	// spec.replicas changed by "helm"
}
