package controllers_test

import (
	"context"
	"reflect"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/controllers"
	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/rollout"
	"github.com/openmed/openmed-operator/pkg/target"
)

// TestPrunedDeploymentDecidesTheSame: the Deployment store keeps
// Deployments pruned (controllers.PruneDeployment), in a compact shape it
// rebuilds them from exactly. For every target shape, with the
// operator's pointer applied and then changed by `kubectl set env`, drift
// detection and its attribution read the same from the pruned copy as from
// the full object, and so does a whole pass of the core.
func TestPrunedDeploymentDecidesTheSame(t *testing.T) {
	ctx := context.Background()
	for name, s := range readShapes(t) {
		t.Run(name, func(t *testing.T) {
			ns := newNamespace(t)
			s.create(t, ns)
			m := newModel(ns, "svc", "OpenMed/pii-v1")
			if s.unsetReplicas {
				m.Spec.Replicas = nil
			}
			if s.Model.Strategy != "" {
				m.Spec.RolloutStrategy.Type = v1alpha1.RolloutStrategyType(s.Model.Strategy)
			}
			m.UID, m.Generation = "00000000-0000-4000-8000-000000000001", 1
			spec, err := rollout.Normalize(m)
			if err != nil {
				t.Fatal(err)
			}
			owner, hash := rollout.OwnerKey(m), rollout.ManifestHash(spec)
			cmName := rollout.ManifestConfigMapName(spec.ManifestConfigMapName, hash)
			plan := rollout.Decide(m, rollout.Observed{Deployment: getDeployment(t, ns, "svc")}, rollout.Options{})
			for _, intent := range []*unstructuredDeployment{plan.Takeover, plan.ApplyDeployment} {
				if intent != nil {
					if _, err := target.Apply(ctx, env.Client, intent, rollout.DefaultFieldManager, ""); err != nil {
						t.Fatal(err)
					}
				}
			}
			setEnv := `{"spec":{"template":{"spec":{"containers":[{"name":"openmed-service","env":[{"name":"` + v1alpha1.PreloadEnvVar + `","value":"x","valueFrom":null}]}]}}}}`
			if err := env.Client.Patch(ctx, getDeployment(t, ns, "svc"), client.RawPatch(types.StrategicMergePatchType, []byte(setEnv)), client.FieldOwner("kubectl-set")); err != nil {
				t.Fatal(err)
			}
			// An HPA (or kubectl scale) writes the scale subresource: its
			// entry must name the replicas' owner from the cache too.
			if err := scale(ns, "svc", "kube-controller-manager", 7); err != nil {
				t.Fatal(err)
			}
			// The Deployment controller reports a pod the API server
			// refused (a quota): the pass names the answer from the
			// pruned copy too.
			refused := getDeployment(t, ns, "svc")
			refused.Status.ObservedGeneration = refused.Generation
			refused.Status.Conditions = []appsv1.DeploymentCondition{{Type: appsv1.DeploymentReplicaFailure, Status: corev1.ConditionTrue,
				Reason: "FailedCreate", Message: `pods "svc-7c9d8f6b5-x2xk4" is forbidden: exceeded quota: gpu, requested: requests.nvidia.com/gpu=1, used: requests.nvidia.com/gpu=2, limited: requests.nvidia.com/gpu=2`,
				LastUpdateTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
			if err := env.Client.Status().Update(ctx, refused, client.FieldOwner("kube-controller-manager")); err != nil {
				t.Fatal(err)
			}
			full := getDeployment(t, ns, "svc")
			pruned := prune(t, full)
			// The store keeps it compact and hands out exactly what
			// pruning keeps.
			if kept, want := controllers.KeptAndPruned(full); !reflect.DeepEqual(kept, want) {
				t.Errorf("the Deployment store hands out\n%+v\nnot what pruning keeps\n%+v", kept, want)
			}
			if a, b := rollout.DetectDrift(full, spec, owner, cmName, hash, rollout.DefaultFieldManager),
				rollout.DetectDrift(pruned, spec, owner, cmName, hash, rollout.DefaultFieldManager); !reflect.DeepEqual(a, b) || len(a) == 0 {
				t.Errorf("drift from the full object %v, from the pruned one %v", a, b)
			}
			// The operator's apply time says whether a ReplicaFailure is
			// its rollout's (older ones are an old ReplicaSet's).
			if got, want := applyTime(pruned, rollout.DefaultFieldManager), applyTime(full, rollout.DefaultFieldManager); got == nil || want == nil || !got.Equal(want) {
				t.Errorf("the operator's apply time: pruned %v, full %v", got, want)
			}
			now := metav1.Now()
			a := rollout.Decide(m, rollout.Observed{Deployment: full, Now: now}, rollout.Options{})
			b := rollout.Decide(m, rollout.Observed{Deployment: pruned, Now: now}, rollout.Options{})
			if !reflect.DeepEqual(a.Status, b.Status) || !reflect.DeepEqual(a.ApplyDeployment, b.ApplyDeployment) ||
				!reflect.DeepEqual(a.Takeover, b.Takeover) || !reflect.DeepEqual(a.Events, b.Events) {
				t.Errorf("a pass decides differently on the pruned Deployment:\nfull   %+v\npruned %+v", a, b)
			}
		})
	}
}

type unstructuredDeployment = unstructured.Unstructured

func prune(t *testing.T, d *appsv1.Deployment) *appsv1.Deployment {
	t.Helper()
	out, err := controllers.PruneDeployment(d.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	return out.(*appsv1.Deployment)
}

// applyTime is the time of manager's apply entry in d's managedFields.
func applyTime(d *appsv1.Deployment, manager string) *metav1.Time {
	for _, e := range d.ManagedFields {
		if e.Manager == manager && e.Operation == metav1.ManagedFieldsOperationApply && e.Subresource == "" {
			return e.Time
		}
	}
	return nil
}
