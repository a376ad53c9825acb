package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/openmed/openmed-operator/cmd/kubectl-openmed/cli"
	"github.com/openmed/openmed-operator/cmd/openmed-demo/demo"
	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/preview"
)

// revisionAnnotation is written by the Deployment controller on every
// template change, not by the operator; a plan cannot foresee it.
const revisionAnnotation = "deployment.kubernetes.io/revision"

// TestPlanMatchesAct runs `kubectl openmed plan` before each commit of a
// model's lifecycle, commits, lets the real operator act, and checks that
// what the operator did to the Deployment is field by field what the plan
// printed, and that the ConfigMaps it created and deleted are the planned
// ones: a new model, the same file again, an upgrade, drift made while the
// operator was down, a never-ready version and its revert.
func TestPlanMatchesAct(t *testing.T) {
	requireCluster(t)
	t.Parallel()
	ctx := context.Background()
	op, err := launchOperator(ctx, "plan-1", operatorLabel+"=plan")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = op.Kill() })
	ns := newNamespace(t)
	createTarget(t, ns, nil)
	file := filepath.Join(t.TempDir(), "openmedmodel.yaml")
	m := newModel(t, ns, v1, "plan")

	// A new model.
	res := planFile(t, file, m, cli.ExitChanges)
	if !res.New || res.Phase != v1alpha1.PhaseRollingOut || len(res.CreateConfigMaps) != 1 || !res.PodsRoll {
		t.Errorf("plan for a new model: %+v", res)
	}
	if !strings.Contains(res.OnFailure, "no retained version") {
		t.Errorf("on failure of the first version: %q", res.OnFailure)
	}
	commit(t, m, func() { waitServing(t, ns, v1) }, res)

	// The same file again: nothing to do.
	if res := planFile(t, file, m, 0); res.Changes() || len(res.Deployment) != 0 {
		t.Errorf("plan for an unchanged file: %+v", res)
	}

	// An upgrade.
	m.Spec.Version = v2
	res = planFile(t, file, m, cli.ExitChanges)
	if !res.SpecChanged || !res.PodsRoll || !strings.HasPrefix(res.OnFailure, "roll back to "+v1) {
		t.Errorf("plan for an upgrade: %+v", res)
	}
	commit(t, m, func() { waitServing(t, ns, v2) }, res)

	// Drift made while the operator was down: the plan names the field and
	// the manager that set it.
	if err := op.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	editReplicas(t, ns, 4, "kubectl-edit")
	res = planFile(t, file, m, cli.ExitChanges)
	if len(res.Drift) != 1 || res.Drift[0].Field != "spec.replicas" || !slices.Contains(res.Drift[0].Managers, "kubectl-edit") || res.PodsRoll || res.SpecChanged {
		t.Errorf("plan with drift: %+v", res)
	}
	commit(t, m, func() {
		op2, err := launchOperator(ctx, "plan-2", operatorLabel+"=plan")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = op2.Kill() })
		waitState(t, ns, "replicas restored", func(s state) bool { return ptr.Deref(s.d.Spec.Replicas, 0) == 2 })
		waitServing(t, ns, v2)
	}, res)

	// A version whose pods never become ready, then its revert.
	m.Spec.Version = brokenVersion
	res = planFile(t, file, m, cli.ExitChanges)
	if !strings.HasPrefix(res.OnFailure, "roll back to "+v2) {
		t.Errorf("on failure of %s: %q", brokenVersion, res.OnFailure)
	}
	brokenHash, err := demo.ManifestHashOf(m, brokenVersion)
	if err != nil {
		t.Fatal(err)
	}
	// Compared while the Deployment carries the never-ready version, before
	// its progress deadline passes and the operator rolls back.
	commit(t, m, func() {
		waitState(t, ns, "the never-ready version applied", func(s state) bool {
			return s.d.Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation] == brokenHash
		})
	}, res)
	waitState(t, ns, "rolled back", func(s state) bool { return s.m.Status.Phase == v1alpha1.PhaseRolledBack && settled(s.d) })
	m.Spec.Version = v2
	res = planFile(t, file, m, -1)
	commit(t, m, func() { waitServing(t, ns, v2) }, res)
}

// planFile writes m to file, runs `kubectl openmed plan -f file -o json`
// and checks its exit code (-1: 0 or 2).
func planFile(t *testing.T, file string, m *v1alpha1.OpenMedModel, wantCode int) preview.Result {
	t.Helper()
	out := m.DeepCopy()
	out.APIVersion, out.Kind = v1alpha1.GroupVersion.String(), "OpenMedModel"
	out.ResourceVersion, out.UID, out.Generation, out.ManagedFields = "", "", 0, nil
	out.Status = v1alpha1.OpenMedModelStatus{}
	data, err := yaml.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	err = cli.Run(context.Background(), []string{"--kubeconfig", cluster.KubeconfigPath(), "plan", "-f", file, "-o", "json"},
		cli.Options{Out: &stdout, ErrOut: &stderr})
	code := 0
	var exit *cli.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.Code
	case err != nil:
		t.Fatalf("plan: %v\n%s", err, stderr.String())
	}
	if wantCode >= 0 && code != wantCode {
		t.Errorf("plan exit code %d, want %d:\n%s", code, wantCode, stdout.String())
	}
	var doc struct{ Items []preview.Result }
	if err := json.Unmarshal(stdout.Bytes(), &doc); err != nil || len(doc.Items) != 1 {
		t.Fatalf("plan output: %v\n%s", err, stdout.String())
	}
	t.Logf("plan for %s (exit %d): phase %s, %d Deployment changes, pods roll %v, configmaps %v, drift %v, on failure %q",
		m.Spec.Version, code, doc.Items[0].Phase, len(doc.Items[0].Deployment), doc.Items[0].PodsRoll, doc.Items[0].CreateConfigMaps, doc.Items[0].Drift, doc.Items[0].OnFailure)
	return doc.Items[0]
}

// commit applies m as a GitOps tool would, waits with settle, and compares
// what changed on the Deployment and which ConfigMaps appeared and went
// with res.
func commit(t *testing.T, m *v1alpha1.OpenMedModel, settle func(), res preview.Result) {
	t.Helper()
	before := deploymentObject(t, m.Namespace)
	cms := map[string]bool{}
	for _, cm := range manifestConfigMaps(t, m.Namespace) {
		cms[cm.Name] = true
	}
	if m.ResourceVersion == "" {
		if err := k8s.Create(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	} else {
		update(t, m)
	}
	settle()
	after := deploymentObject(t, m.Namespace)
	unstructured.RemoveNestedField(after.Object, "metadata", "annotations", revisionAnnotation)
	unstructured.RemoveNestedField(before.Object, "metadata", "annotations", revisionAnnotation)
	got := changeSet(preview.Diff(before, after))
	want := changeSet(res.Deployment)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("the operator changed the Deployment\n  %s\nthe plan said\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	var created []string
	for _, cm := range manifestConfigMaps(t, m.Namespace) {
		if !cms[cm.Name] {
			created = append(created, cm.Name)
		}
	}
	sort.Strings(created)
	if strings.Join(created, ",") != strings.Join(res.CreateConfigMaps, ",") {
		t.Errorf("ConfigMaps created %v, planned %v", created, res.CreateConfigMaps)
	}
	left := map[string]bool{}
	for _, cm := range manifestConfigMaps(t, m.Namespace) {
		left[cm.Name] = true
	}
	for _, name := range res.PruneConfigMaps {
		if left[name] {
			t.Errorf("ConfigMap %s was planned for deletion and is still there", name)
		}
	}
}

// update writes m's spec and annotations over the live object, as an apply
// of the file would, and keeps m's resourceVersion current.
func update(t *testing.T, m *v1alpha1.OpenMedModel) {
	t.Helper()
	live := &v1alpha1.OpenMedModel{}
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(m), live); err != nil {
		t.Fatal(err)
	}
	live.Spec = m.Spec
	if err := k8s.Update(context.Background(), live); err != nil {
		t.Fatal(err)
	}
	m.ResourceVersion = live.ResourceVersion
}

func deploymentObject(t *testing.T, ns string) *unstructured.Unstructured {
	t.Helper()
	d := &appsv1.Deployment{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: modelName}, d); err != nil {
		t.Fatal(err)
	}
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(d)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: content}
}

// changeSet is the comparable form of changes: field, from, to.
func changeSet(changes []preview.FieldChange) []string {
	out := make([]string, 0, len(changes))
	for _, c := range changes {
		out = append(out, c.Field+": "+c.From+" -> "+c.To)
	}
	sort.Strings(out)
	return out
}
