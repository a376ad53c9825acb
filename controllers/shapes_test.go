package controllers_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/rollout"
)

// shape is one target Deployment as a real tool writes it
// (testdata/shapes): the object and the writes that produce it, each with
// the field manager and operation of the tool.
type shape struct {
	Description string `json:"description"`
	Writes      []struct {
		Manager   string `json:"manager"`
		Operation string `json:"operation"`
		Replicas  int32  `json:"replicas,omitempty"`
		Patch     string `json:"patch,omitempty"`
	} `json:"writes"`
	Model struct {
		Replicas *int32 `json:"replicas"`
		Strategy string `json:"strategy,omitempty"`
	} `json:"model"`
	Replaced   []string        `json:"replaced,omitempty"`
	Paused     bool            `json:"paused,omitempty"`
	Deployment json.RawMessage `json:"deployment"`

	unsetReplicas bool
}

func readShapes(t *testing.T) map[string]shape {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "shapes", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no shapes: %v", err)
	}
	out := map[string]shape{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var s shape
		if err := yaml.UnmarshalStrict(data, &s); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		// "replicas: null" in the file means the model leaves them unset.
		var raw map[string]map[string]any
		_ = yaml.Unmarshal(data, &raw)
		if v, ok := raw["model"]["replicas"]; ok && v == nil {
			s.unsetReplicas = true
		}
		out[strings.TrimSuffix(filepath.Base(f), ".yaml")] = s
	}
	return out
}

// create writes the shape's Deployment into ns with the tools' field
// managers and operations.
func (s shape) create(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	dep := &unstructured.Unstructured{}
	if err := dep.UnmarshalJSON(s.Deployment); err != nil {
		t.Fatal(err)
	}
	dep.SetNamespace(ns)
	for _, w := range s.Writes {
		c := client.WithFieldOwner(env.Client, w.Manager)
		var err error
		switch w.Operation {
		case "Update":
			err = c.Create(ctx, dep.DeepCopy())
		case "ClientSideApply":
			// kubectl's (and Argo CD's) client-side apply: a create that
			// records the applied configuration in an annotation.
			applied := dep.DeepCopy()
			last, _ := applied.MarshalJSON()
			ann := applied.GetAnnotations()
			if ann == nil {
				ann = map[string]string{}
			}
			ann["kubectl.kubernetes.io/last-applied-configuration"] = string(last)
			applied.SetAnnotations(ann)
			err = c.Create(ctx, applied)
		case "ServerSideApply":
			err = env.Client.Patch(ctx, dep.DeepCopy(), client.Apply, client.FieldOwner(w.Manager), client.ForceOwnership)
		case "Scale":
			scale := &autoscalingv1.Scale{Spec: autoscalingv1.ScaleSpec{Replicas: w.Replicas}}
			err = c.SubResource("scale").Update(ctx, getDeployment(t, ns, dep.GetName()), client.WithSubResourceBody(scale))
		case "StrategicMergePatch":
			err = env.Client.Patch(ctx, getDeployment(t, ns, dep.GetName()), client.RawPatch(types.StrategicMergePatchType, []byte(w.Patch)), client.FieldOwner(w.Manager))
		default:
			t.Fatalf("unknown operation %q", w.Operation)
		}
		if err != nil {
			t.Fatalf("%s %s: %v", w.Manager, w.Operation, err)
		}
	}
}

// foreignFields is the Deployment without the fields the operator owns
// (the fields the operator owns, docs/spec) and without what the API server and the Deployment
// controller keep (metadata bookkeeping, status): what must come out of a
// model's whole life byte-identical.
func foreignFields(t *testing.T, d *appsv1.Deployment, container string) string {
	t.Helper()
	d = d.DeepCopy()
	d.ManagedFields, d.ResourceVersion, d.Generation, d.Status = nil, "", 0, appsv1.DeploymentStatus{}
	delete(d.Annotations, v1alpha1.ModelResourceAnnotation)
	delete(d.Labels, v1alpha1.ClaimedLabel)
	if len(d.Labels) == 0 {
		d.Labels = nil
	}
	delete(d.Spec.Template.Annotations, v1alpha1.ModelResourceAnnotation)
	delete(d.Spec.Template.Annotations, v1alpha1.ManifestHashAnnotation)
	d.Spec.Replicas, d.Spec.Strategy, d.Spec.ProgressDeadlineSeconds = nil, appsv1.DeploymentStrategy{}, nil
	for i := range d.Spec.Template.Spec.Containers {
		c := &d.Spec.Template.Spec.Containers[i]
		if c.Name != container {
			continue
		}
		var env []corev1.EnvVar
		for _, e := range c.Env {
			if e.Name != v1alpha1.PreloadEnvVar {
				env = append(env, e)
			}
		}
		c.Env = env
	}
	if len(d.Annotations) == 0 {
		d.Annotations = nil
	}
	if len(d.Spec.Template.Annotations) == 0 {
		d.Spec.Template.Annotations = nil
	}
	data, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestShapes takes every target shape of testdata/shapes, created by the
// field manager and operation that really writes it, through a model's
// life on the real API server: first rollout to Ready, a failed version
// rolled back, `kubectl set env` drift after Ready corrected with the
// manager named, and deletion releasing the target. Afterwards every field
// the operator does not own is byte-identical to before.
func TestShapes(t *testing.T) {
	startOperator(t)
	for name, s := range readShapes(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ns := newNamespace(t)
			s.create(t, ns)
			before := foreignFields(t, getDeployment(t, ns, "svc"), container)

			m := newModel(ns, "svc", "OpenMed/pii-v1")
			if s.unsetReplicas {
				m.Spec.Replicas = nil
			}
			if s.Model.Strategy != "" {
				m.Spec.RolloutStrategy.Type = v1alpha1.RolloutStrategyType(s.Model.Strategy)
			}
			createModel(t, m)

			// First rollout.
			if s.Paused {
				// The paused spec is known before the controller observed
				// the apply: the pass after it already says TargetPaused.
				waitFor(t, ns, "svc", v1alpha1.PhaseRollingOut, v1alpha1.RolloutStartedReason, v1alpha1.TargetPausedReason)
				updateDeploymentStatus(t, ns, "svc", pausedStatus)
				waitFor(t, ns, "svc", v1alpha1.PhaseRollingOut, v1alpha1.TargetPausedReason)
				setPaused(t, ns, false)
				before = foreignFields(t, getDeployment(t, ns, "svc"), container)
			}
			waitFor(t, ns, "svc", v1alpha1.PhaseRollingOut)
			for _, want := range s.Replaced {
				eventually(t, "FieldReplaced: "+want, func() (bool, string) {
					msgs := eventMessages(t, ns, "svc", v1alpha1.FieldReplacedReason)
					return strings.Contains(strings.Join(msgs, " "), want), strings.Join(msgs, " | ")
				})
			}
			if p := preload(getDeployment(t, ns, "svc")); p == nil || p.Value != "" || p.ValueFrom.ConfigMapKeyRef == nil {
				t.Fatalf("pointer %+v", p)
			}
			updateDeploymentStatus(t, ns, "svc", rolloutComplete)
			waitFor(t, ns, "svc", v1alpha1.PhaseReady, v1alpha1.RolloutSucceededReason)
			if s.unsetReplicas {
				if r := *getDeployment(t, ns, "svc").Spec.Replicas; r != 3 {
					t.Errorf("replicas %d, the HPA set 3", r)
				}
			}
			good := preload(getDeployment(t, ns, "svc")).ValueFrom.ConfigMapKeyRef.Name

			// A version that never becomes available is rolled back.
			patchModel(t, ns, "svc", func(m *v1alpha1.OpenMedModel) { m.Spec.Version = "OpenMed/pii-broken" })
			waitFor(t, ns, "svc", v1alpha1.PhaseRollingOut)
			updateDeploymentStatus(t, ns, "svc", rolloutStuck)
			eventually(t, "rolled back to v1", func() (bool, string) {
				name := preload(getDeployment(t, ns, "svc")).ValueFrom.ConfigMapKeyRef.Name
				return name == good, name
			})
			updateDeploymentStatus(t, ns, "svc", rolloutComplete)
			waitFor(t, ns, "svc", v1alpha1.PhaseRolledBack, v1alpha1.RolledBackReason)
			patchModel(t, ns, "svc", func(m *v1alpha1.OpenMedModel) { m.Spec.Version = "OpenMed/pii-v1" })
			waitFor(t, ns, "svc", v1alpha1.PhaseReady, v1alpha1.RolloutSucceededReason)

			// kubectl set env after Ready is drift: corrected, the manager named.
			setEnv := `{"spec":{"template":{"spec":{"containers":[{"name":"` + container + `","env":[{"name":"` + v1alpha1.PreloadEnvVar + `","value":"OpenMed/by-hand","valueFrom":null}]}]}}}}`
			if err := env.Client.Patch(context.Background(), getDeployment(t, ns, "svc"), client.RawPatch(types.StrategicMergePatchType, []byte(setEnv)), client.FieldOwner("kubectl-set")); err != nil {
				t.Fatal(err)
			}
			eventually(t, "set env corrected", func() (bool, string) {
				p := preload(getDeployment(t, ns, "svc"))
				return p.Value == "" && p.ValueFrom != nil && p.ValueFrom.ConfigMapKeyRef.Name == good, p.String()
			})
			assertDriftReported(t, ns, "svc", v1alpha1.PreloadEnvVar, `"kubectl-set"`)
			updateDeploymentStatus(t, ns, "svc", rolloutComplete)
			waitFor(t, ns, "svc", v1alpha1.PhaseReady)

			// Deletion releases the target.
			deleteAndWait(t, ns, "svc")
			d := getDeployment(t, ns, "svc")
			if p := preload(d); p != nil && p.ValueFrom != nil && p.ValueFrom.ConfigMapKeyRef != nil && strings.HasPrefix(p.ValueFrom.ConfigMapKeyRef.Name, "svc-model-manifest") {
				t.Errorf("pointer left after deletion: %+v", p)
			}
			for _, e := range d.ManagedFields {
				if e.Manager == rollout.DefaultFieldManager {
					t.Errorf("managedFields entry of the operator left: %s %s", e.Operation, e.FieldsV1.Raw)
				}
			}
			if after := foreignFields(t, d, container); after != before {
				t.Errorf("fields the operator does not own changed:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

// pausedStatus is what the Deployment controller reports for a paused
// Deployment whose template changed: the change observed, no pod of it.
func pausedStatus(d *appsv1.Deployment) {
	r := ptr.Deref(d.Spec.Replicas, 1)
	d.Status = appsv1.DeploymentStatus{
		ObservedGeneration: d.Generation, Replicas: r, UpdatedReplicas: 0, ReadyReplicas: r, AvailableReplicas: r,
		Conditions: []appsv1.DeploymentCondition{
			{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable"},
			{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionUnknown, Reason: "DeploymentPaused"},
		},
	}
}

func setPaused(t *testing.T, ns string, paused bool) {
	t.Helper()
	d := getDeployment(t, ns, "svc")
	d.Spec.Paused = paused
	if err := helmClient().Update(context.Background(), d); err != nil {
		t.Fatal(err)
	}
}
