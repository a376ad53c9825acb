package controllers_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/rollout"
)

// secondRequestFaults are the ways the second request of a release (the
// managedFields replace, guarded by the version the first request
// answered) can fail: the Deployment controller wrote in between (409,
// before it took effect), or the answer is lost after it took effect (a 503,
// a reset connection).
var secondRequestFaults = []struct {
	name  string
	fault func(ns, name string) *fault
}{
	{"conflict", func(ns, name string) *fault {
		// The Deployment controller's status write lands first, and the
		// API server answers the guarded request with a real 409.
		return &fault{before: func() {
			_ = setStatus(ns, name, func(d *appsv1.Deployment) { d.Status.ObservedGeneration = d.Generation })
		}}
	}},
	{"503 after it took effect", func(string, string) *fault { return &fault{status: http.StatusServiceUnavailable, after: true} }},
	{"reset after it took effect", func(string, string) *fault { return &fault{reset: true, after: true} }},
}

// managedFieldsReplace matches the second request of a release of the
// Deployment ns/name.
func managedFieldsReplace(ns, name string) func(method, path, body string) bool {
	return func(method, path, body string) bool {
		return method == http.MethodPatch && strings.HasSuffix(path, "/namespaces/"+ns+"/deployments/"+name) &&
			strings.Contains(body, `"/metadata/managedFields"`)
	}
}

// released reports whether the Deployment carries nothing of the operator
// any more: no managedFields entry of its field manager, no pointer.
func released(t *testing.T, ns, name string) (bool, string) {
	d := getDeployment(t, ns, name)
	var left []string
	for _, e := range d.ManagedFields {
		if e.Manager == rollout.DefaultFieldManager {
			left = append(left, string(e.Operation))
		}
	}
	return len(left) == 0 && preload(d) == nil, fmt.Sprintf("entries of %s: %v, preload %v", rollout.DefaultFieldManager, left, preload(d))
}

// TestReleaseResumesAfterSecondRequestFails: deletion releases the target
// in two requests; the second fails exactly once, in each way it can. The
// next pass finds the operator's managedFields entry still on the
// Deployment (or, when the request took effect, finds it gone) and
// finishes: the model goes only once nothing of it is left.
func TestReleaseResumesAfterSecondRequestFails(t *testing.T) {
	for _, tc := range secondRequestFaults {
		t.Run(tc.name, func(t *testing.T) {
			ns := newNamespace(t)
			op := startOperator(t)
			readyModel(t, ns, "svc")
			f := tc.fault(ns, "svc")
			f.times, f.match = 1, managedFieldsReplace(ns, "svc")
			op.writes.inject(f)
			deleteAndWait(t, ns, "svc")
			if f.hits.Load() != 1 {
				t.Fatalf("the fault hit %d times, want 1", f.hits.Load())
			}
			assertReleased(t, ns, "svc", 2)
		})
	}
}

// TestRetargetReleaseResumesAfterSecondRequestFails: spec.targetRef moves
// to another Deployment; the release of the previous one fails in its
// second request. The status keeps naming the previous target until a pass
// finds it released, so the next pass finishes it.
func TestRetargetReleaseResumesAfterSecondRequestFails(t *testing.T) {
	for _, tc := range secondRequestFaults {
		t.Run(tc.name, func(t *testing.T) {
			ns := newNamespace(t)
			op := startOperator(t)
			readyModel(t, ns, "svc")
			createDeployment(t, chartDeployment(ns, "next", 3))
			f := tc.fault(ns, "svc")
			f.times, f.match = 1, managedFieldsReplace(ns, "svc")
			op.writes.inject(f)
			patchModel(t, ns, "svc", func(m *v1alpha1.OpenMedModel) { m.Spec.TargetRef.Name = "next" })
			eventually(t, "the fault hit", func() (bool, string) { return f.hits.Load() == 1, "" })
			eventually(t, "the previous target released", func() (bool, string) { return released(t, ns, "svc") })
			assertReleased(t, ns, "svc", 2)
			updateDeploymentStatus(t, ns, "next", rolloutComplete)
			eventually(t, "the model serves from the new target and names it", func() (bool, string) {
				m := getModel(t, ns, "svc")
				return m.Status.TargetName == "next" && m.Status.Phase == v1alpha1.PhaseReady && condition(m, v1alpha1.ReadyCondition).Status == "True",
					fmt.Sprintf("target %s phase %s", m.Status.TargetName, m.Status.Phase)
			})
			if d := getDeployment(t, ns, "next"); preload(d) == nil || d.Annotations[v1alpha1.ModelResourceAnnotation] != ns+"/svc" {
				t.Errorf("the new target carries no pointer: %v", d.Annotations)
			}
		})
	}
}

// TestReleaseKeepsNewerReplicas: the release applies the live replicas
// conditional on the version it read them from, so an HPA's newer value
// written in between is never overwritten with the older one.
func TestReleaseKeepsNewerReplicas(t *testing.T) {
	ns := newNamespace(t)
	op := startOperator(t)
	readyModel(t, ns, "svc")
	// The scale write lands right before the release's first request,
	// after the pass read the Deployment.
	var scaled error = errors.New("the release's first request was not seen")
	f := &fault{times: 1, before: func() {
		scaled = scale(ns, "svc", "kube-controller-manager", 5)
	}, match: func(method, path, body string) bool {
		return method == http.MethodPatch && strings.HasSuffix(path, "/namespaces/"+ns+"/deployments/svc") &&
			!strings.Contains(body, v1alpha1.PreloadEnvVar) && !strings.Contains(body, "managedFields")
	}}
	op.writes.inject(f)
	deleteAndWait(t, ns, "svc")
	if scaled != nil {
		t.Fatal(scaled)
	}
	assertReleased(t, ns, "svc", 5)
}

// scale writes the Deployment's scale subresource as manager (an HPA is
// kube-controller-manager).
func scale(ns, name, manager string, replicas int32) error {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	body := &autoscalingv1.Scale{Spec: autoscalingv1.ScaleSpec{Replicas: replicas}}
	return client.WithFieldOwner(env.Client, manager).SubResource("scale").Update(context.Background(), d, client.WithSubResourceBody(body))
}

// TestRetargetTwiceWithALostStatusWriteThenDelete: spec.targetRef moves
// A → B, and a second edit (→ C, or back to A) lands while the pass that
// wrote B is about to write its status, so that write is answered 409 and
// the status never says B was written. The write-ahead record
// (status.claimedTargets, written before the first write to B) still names
// B: the next pass releases it, and deletion leaves no Deployment with
// anything of the operator's, the replicas kept. Without the record B keeps
// the pointer, the owner annotation and the operator's managedFields entry
// (issue 26, item 10).
func TestRetargetTwiceWithALostStatusWriteThenDelete(t *testing.T) {
	for _, then := range []string{"c", "svc"} {
		t.Run("svc to b to "+then, func(t *testing.T) {
			ns := newNamespace(t)
			op := startOperator(t)
			readyModel(t, ns, "svc")
			createDeployment(t, chartDeployment(ns, "b", 3))
			createDeployment(t, chartDeployment(ns, "c", 4))
			// The pass that writes B: its own status write (the first
			// with conditions; the write-ahead record carries
			// claimedTargets only) meets the second edit.
			edited := make(chan error, 1)
			f := &fault{times: 1, before: func() {
				m := &v1alpha1.OpenMedModel{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "svc"}}
				edited <- env.Client.Patch(context.Background(), m, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"targetRef":{"name":"`+then+`"}}}`)))
			}, match: func(method, path, body string) bool {
				return method == http.MethodPatch && strings.HasSuffix(path, "/namespaces/"+ns+"/openmedmodels/svc/status") &&
					strings.Contains(body, `"conditions"`)
			}}
			op.writes.inject(f)
			patchModel(t, ns, "svc", func(m *v1alpha1.OpenMedModel) { m.Spec.TargetRef.Name = "b" })
			select {
			case err := <-edited:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(time.Minute):
				t.Fatal("no pass wrote a status after the write-ahead record of B")
			}
			// The API server answers the status write after the edit landed.
			eventually(t, "the status write of the pass that wrote B answered 409", func() (bool, string) {
				return op.writes.answered(http.MethodPatch, "/namespaces/"+ns+"/openmedmodels/svc/status", http.StatusConflict) > 0, ""
			})
			// The apply to B took effect (the next pass may have released B
			// already: the answers tell, not the Deployment).
			if n := op.writes.answered(http.MethodPatch, "/namespaces/"+ns+"/deployments/b", http.StatusOK); n == 0 {
				t.Fatal("the pass did not write B before its status write")
			}
			eventually(t, "B released after the lost status write", func() (bool, string) { return released(t, ns, "b") })
			deleteAndWait(t, ns, "svc")
			// A release keeps the replicas the model set (2) on every
			// Deployment it wrote; C keeps its own when it was never written.
			want := map[string]int32{"svc": 2, "b": 2, "c": 2}
			if then != "c" {
				want["c"] = 4
			}
			for name, replicas := range want {
				assertReleased(t, ns, name, replicas)
				if d := getDeployment(t, ns, name); d.Spec.Template.Labels[v1alpha1.BakeLabel] != "" ||
					d.Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation] != "" {
					t.Errorf("Deployment %s keeps the bake label or the manifest hash: %v %v", name, d.Spec.Template.Labels, d.Spec.Template.Annotations)
				}
			}
		})
	}
}
