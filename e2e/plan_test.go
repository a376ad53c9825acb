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
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/openmed/openmed-operator/cmd/kubectl-openmed/cli"
	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/localrun"
	"github.com/openmed/openmed-operator/pkg/preview"
	"github.com/openmed/openmed-operator/pkg/rollout"
)

// revisionAnnotation is written by the Deployment controller on every
// template change, not by the operator; a plan cannot foresee it.
const revisionAnnotation = "deployment.kubernetes.io/revision"

// TestPlanMatchesAct runs `kubectl openmed plan` before each commit of a
// model's lifecycle, commits the file as Flux's kustomize-controller does
// (server-side apply), lets the real operator act, and checks that what the
// operator did is what the plan printed: the Deployment field by field, the
// ConfigMaps created and deleted, the phase and conditions of the acting
// pass, its events and the managers it names for the drift it corrects.
// Each plan's exit code is checked. The lifecycle: a new model, the same
// file again, an upgrade, drift made while the operator was down, dropping
// spec.replicas alone, setting it again, dropping it together with a
// version change, a manual rollback committed in the file and its removal
// from the file, a never-ready version and its revert.
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
	// The plan and the acting pass must read the same Deployment: planned
	// in the middle of the scale-up it edit started, the plan rightly says
	// Scaling, and a pass that comes after the scale-up rightly says Ready.
	// What the operator's first pass reads is the settled Deployment.
	waitState(t, ns, "scaled to 4 by kubectl-edit", func(s state) bool { return ptr.Deref(s.d.Spec.Replicas, 0) == 4 && settled(s.d) })
	res = planFile(t, file, m, cli.ExitChanges)
	if len(res.Drift) != 1 || res.Drift[0].Field != "spec.replicas" || !slices.Contains(res.Drift[0].Managers, "kubectl-edit") || res.PodsRoll || res.SpecChanged {
		t.Errorf("plan with drift: %+v", res)
	}
	commitWith(t, m, func() {
		op2, err := launchOperator(ctx, "plan-2", operatorLabel+"=plan")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = op2.Kill() })
		waitState(t, ns, "replicas restored", func(s state) bool { return ptr.Deref(s.d.Spec.Replicas, 0) == 2 })
		waitServing(t, ns, v2)
	}, res, false)

	// spec.replicas dropped: the operator gives the field up at its live
	// value; nothing on the Deployment changes but its managedFields.
	m.Spec.Replicas = nil
	res = planFile(t, file, m, cli.ExitChanges)
	if !res.ReleaseReplicas || len(res.Deployment) != 0 || res.PodsRoll {
		t.Errorf("plan for dropping spec.replicas: %+v", res)
	}
	commit(t, m, func() {
		waitState(t, ns, "replicas released", func(s state) bool { return !ownsReplicas(s.d) && s.snap.Observed() })
	}, res)
	if d := read(t, ns).d; ptr.Deref(d.Spec.Replicas, 0) != 2 {
		t.Errorf("replicas %d after their release, want 2 kept", ptr.Deref(d.Spec.Replicas, 0))
	}

	// Set again (to a value of its own, so the operator applies and owns
	// it), then dropped together with a version change.
	m.Spec.Replicas = ptr.To[int32](3)
	res = planFile(t, file, m, cli.ExitChanges)
	commit(t, m, func() {
		waitState(t, ns, "replicas owned", func(s state) bool { return ownsReplicas(s.d) && s.snap.Observed() && settled(s.d) })
	}, res)
	m.Spec.Replicas, m.Spec.Version = nil, v1
	res = planFile(t, file, m, cli.ExitChanges)
	if !res.ReleaseReplicas || !res.PodsRoll || hasField(res.Deployment, ".spec.replicas") {
		t.Errorf("plan for dropping spec.replicas with a version change: %+v", res)
	}
	commit(t, m, func() { waitServing(t, ns, v1) }, res)

	// A manual rollback committed in the file, then removed from it: the
	// plan says the applier removes the annotation and the desired version
	// rolls out again.
	m.Annotations = map[string]string{v1alpha1.RollbackToAnnotation: v2}
	res = planFile(t, file, m, cli.ExitChanges)
	if res.Phase != v1alpha1.PhaseRolledBack || !res.PodsRoll {
		t.Errorf("plan for a manual rollback: %+v", res)
	}
	commit(t, m, func() {
		waitState(t, ns, "held at "+v2, func(s state) bool {
			return s.m.Status.Phase == v1alpha1.PhaseRolledBack && s.m.Status.ActiveVersion == v2 && settled(s.d)
		})
	}, res)
	m.Annotations = nil
	res = planFile(t, file, m, cli.ExitChanges)
	if len(res.Annotations) != 1 || res.Annotations[0].Key != v1alpha1.RollbackToAnnotation || !res.Annotations[0].Removed ||
		res.Phase != v1alpha1.PhaseRollingOut || !res.PodsRoll {
		t.Errorf("plan for removing the rollback annotation from the file: %+v", res)
	}
	commit(t, m, func() { waitServing(t, ns, v1) }, res)

	// A version whose pods never become ready, then its revert.
	m.Spec.Version = brokenVersion
	res = planFile(t, file, m, cli.ExitChanges)
	if !strings.HasPrefix(res.OnFailure, "roll back to "+v1) {
		t.Errorf("on failure of %s: %q", brokenVersion, res.OnFailure)
	}
	brokenHash, err := localrun.ManifestHashOf(m, brokenVersion)
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
	// The rollback restored the retained version's pods: the revert to it
	// rolls none, and the model is Ready in the acting pass.
	m.Spec.Version = v1
	res = planFile(t, file, m, cli.ExitChanges)
	if res.PodsRoll || res.Phase != v1alpha1.PhaseReady {
		t.Errorf("plan for the revert: %+v", res)
	}
	commit(t, m, func() { waitServing(t, ns, v1) }, res)
}

// ownsReplicas reports whether the operator's managedFields entry owns
// spec.replicas.
func ownsReplicas(d *appsv1.Deployment) bool {
	for _, e := range d.ManagedFields {
		if e.Manager == rollout.DefaultFieldManager && e.FieldsV1 != nil && strings.Contains(string(e.FieldsV1.Raw), `"f:replicas"`) {
			return true
		}
	}
	return false
}

func hasField(changes []preview.FieldChange, field string) bool {
	for _, c := range changes {
		if c.Field == field {
			return true
		}
	}
	return false
}

// planFile writes m to file, runs `kubectl openmed plan -f file -o json
// --watch-label-selector <its operator's>` and checks its exit code (-1: 0
// or 2).
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
	// The operator of the model's shard, as the plugin is told it.
	selector := "!" + operatorLabel
	if v, ok := m.Labels[operatorLabel]; ok {
		selector = operatorLabel + "=" + v
	}
	err = cli.Run(context.Background(), []string{"--kubeconfig", cluster.KubeconfigPath(), "plan", "-f", file, "-o", "json", "--watch-label-selector", selector},
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
// with res what the operator did: the Deployment's changes, the ConfigMaps
// created and deleted, the status of the acting pass, its events and the
// managers named for the drift it corrected.
func commit(t *testing.T, m *v1alpha1.OpenMedModel, settle func(), res preview.Result) {
	t.Helper()
	commitWith(t, m, settle, res, true)
}

// commitWith is commit; with apply false it commits nothing (the plan was
// for a change of the cluster, not of the file).
func commitWith(t *testing.T, m *v1alpha1.OpenMedModel, settle func(), res preview.Result, apply bool) {
	t.Helper()
	before := deploymentObject(t, m.Namespace)
	cms := map[string]bool{}
	for _, cm := range manifestConfigMaps(t, m.Namespace) {
		cms[cm.Name] = true
	}
	statuses := watchStatuses(t, m)
	sinceEvent := lastEventVersion(t, m.Namespace)
	var generation int64
	if apply {
		generation = applyFile(t, m)
	} else {
		generation = read(t, m.Namespace).m.Generation
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
	for name := range cms {
		if !left[name] && !slices.Contains(res.PruneConfigMaps, name) {
			t.Errorf("ConfigMap %s was deleted, the plan did not name it (planned %v)", name, res.PruneConfigMaps)
		}
	}

	// The acting pass's status: the first one written for the committed
	// generation after the commit, or, when no pass had to write one, the
	// status as it stands. The watch is read once it has delivered the
	// model's current version, so no status written until now is missed.
	current := read(t, m.Namespace).m
	acted := statuses.first(t, generation, current.ResourceVersion)
	if acted == nil {
		acted = &current.Status
	}
	if acted.Phase != res.Phase {
		t.Errorf("the acting pass wrote phase %s, the plan said %s", acted.Phase, res.Phase)
	}
	if a, p := conditionSet(acted.Conditions), conditionSet(res.Conditions); a != p {
		t.Errorf("the acting pass wrote conditions\n  %s\nthe plan said\n  %s", a, p)
	}
	// Events are posted after the pass that emits them: wait for as many
	// as the plan names before comparing.
	var events []corev1.Event
	var reasons []string
	deadline := time.Now().Add(eventWait)
	for {
		events = eventsSince(t, m.Namespace, sinceEvent)
		reasons = reasons[:0]
		for _, e := range events {
			reasons = append(reasons, e.Reason)
		}
		if len(reasons) >= len(res.Events) || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(reasons) < len(res.Events) || !slices.Equal(reasons[:len(res.Events)], res.Events) {
		t.Errorf("the operator recorded events %v, the plan said they start with %v", reasons, res.Events)
	} else if later := reasons[len(res.Events):]; slices.ContainsFunc(later, func(r string) bool { return !laterPassEvents[r] }) {
		// What follows the acting pass's events is only what later passes
		// of the same change report: its outcome, never the acting pass's
		// work again.
		t.Errorf("the operator recorded events %v: after the planned %v, %v are not the outcome of later passes", reasons, res.Events, later)
	}
	// Drift attribution both ways: every correction the plan names is in an
	// event, and every correction an event names was planned.
	planned := map[string]bool{}
	for _, d := range res.Drift {
		planned[d.String()] = true
	}
	named := map[string]bool{}
	for _, e := range events {
		if e.Reason != v1alpha1.DriftCorrectedReason && e.Reason != v1alpha1.FieldReplacedReason {
			continue
		}
		_, list, _ := strings.Cut(strings.TrimSuffix(e.Message, "."), ": ")
		for _, item := range strings.Split(list, "; ") {
			named[item] = true
			if !planned[item] {
				t.Errorf("the operator corrected %q, which the plan did not name (plan: %v)", item, res.Drift)
			}
		}
	}
	for d := range planned {
		if !named[d] {
			t.Errorf("the plan said %q; no event of the operator says it: %v", d, reasons)
		}
	}
}

// laterPassEvents are the events a later pass of the same change may
// record after the acting pass's: how the rollout or rollback it started
// ended, and the bake's start.
var laterPassEvents = map[string]bool{
	v1alpha1.RolloutSucceededReason:  true,
	v1alpha1.RolloutFailedReason:     true,
	v1alpha1.RollbackStartedReason:   true,
	v1alpha1.RollbackSucceededReason: true,
	v1alpha1.BakingReason:            true,
}

// eventWait bounds how long commit waits for the events a plan names.
const eventWait = 30 * time.Second

// applyFile server-side applies m's spec, labels and annotations as Flux's
// kustomize-controller applies a file from Git (force, its own field
// manager) and returns the generation the API server stored.
func applyFile(t *testing.T, m *v1alpha1.OpenMedModel) int64 {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(), "kind": "OpenMedModel",
		"metadata": map[string]any{"name": m.Name, "namespace": m.Namespace},
	}}
	u.SetLabels(m.Labels)
	u.SetAnnotations(m.Annotations)
	spec, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&m.Spec)
	if err != nil {
		t.Fatal(err)
	}
	u.Object["spec"] = spec
	if err := k8s.Patch(context.Background(), u, client.Apply, client.FieldOwner("kustomize-controller"), client.ForceOwnership); err != nil {
		t.Fatal(err)
	}
	return u.GetGeneration()
}

// statusWatch keeps every status of one model a watch carried.
type statusWatch struct {
	mu   sync.Mutex
	seen []v1alpha1.OpenMedModelStatus
	// versions are the model's resourceVersions the watch delivered;
	// initial is the one the list before it read.
	versions map[string]bool
	initial  string
	w        watch.Interface
	done     chan struct{}
}

// watchStatuses watches m's statuses from now on.
func watchStatuses(t *testing.T, m *v1alpha1.OpenMedModel) *statusWatch {
	t.Helper()
	var list v1alpha1.OpenMedModelList
	if err := k8s.List(context.Background(), &list, client.InNamespace(m.Namespace)); err != nil {
		t.Fatal(err)
	}
	w, err := k8s.Watch(context.Background(), &v1alpha1.OpenMedModelList{}, client.InNamespace(m.Namespace),
		&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
	if err != nil {
		t.Fatal(err)
	}
	s := &statusWatch{w: w, versions: map[string]bool{}, done: make(chan struct{})}
	var last *v1alpha1.OpenMedModelStatus
	for i := range list.Items {
		if list.Items[i].Name == m.Name {
			last = list.Items[i].Status.DeepCopy()
			s.initial = list.Items[i].ResourceVersion
		}
	}
	go func() {
		defer close(s.done)
		for ev := range w.ResultChan() {
			o, ok := ev.Object.(*v1alpha1.OpenMedModel)
			if !ok || o.Name != m.Name {
				continue
			}
			s.mu.Lock()
			s.versions[o.ResourceVersion] = true
			if last == nil || !apiequality.Semantic.DeepEqual(*last, o.Status) {
				last = o.Status.DeepCopy()
				s.seen = append(s.seen, *last)
			}
			s.mu.Unlock()
		}
	}()
	t.Cleanup(func() { w.Stop(); <-s.done })
	return s
}

// first is the first status written for generation (its
// observedGeneration) since the watch started, or nil, once the watch has
// delivered the model's version rv.
func (s *statusWatch) first(t *testing.T, generation int64, rv string) *v1alpha1.OpenMedModelStatus {
	t.Helper()
	eventually(t, "the status watch delivered resourceVersion "+rv, func() (bool, string) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.versions[rv] || s.initial == rv, ""
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.seen {
		if s.seen[i].ObservedGeneration == generation {
			return s.seen[i].DeepCopy()
		}
	}
	return nil
}

func conditionSet(conds []metav1.Condition) string {
	out := make([]string, 0, len(conds))
	for _, c := range conds {
		out = append(out, c.Type+"="+string(c.Status)+"/"+c.Reason)
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// lastEventVersion is the newest resourceVersion among the model's events.
func lastEventVersion(t *testing.T, ns string) int64 {
	t.Helper()
	var last int64
	for _, e := range modelEvents(t, ns) {
		last = max(last, eventVersion(e))
	}
	return last
}

// eventsSince lists the model's events newer than version, oldest first.
func eventsSince(t *testing.T, ns string, version int64) []corev1.Event {
	t.Helper()
	var out []corev1.Event
	for _, e := range modelEvents(t, ns) {
		if eventVersion(e) > version {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return eventVersion(out[i]) < eventVersion(out[j]) })
	return out
}

func modelEvents(t *testing.T, ns string) []corev1.Event {
	t.Helper()
	var events corev1.EventList
	if err := k8s.List(context.Background(), &events, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []corev1.Event
	for _, e := range events.Items {
		if e.InvolvedObject.Name == modelName && e.InvolvedObject.Kind == "OpenMedModel" {
			out = append(out, e)
		}
	}
	return out
}

// eventVersion orders events by when the API server stored them: the
// suite's own etcd hands out growing resourceVersions.
func eventVersion(e corev1.Event) int64 {
	n, _ := strconv.ParseInt(e.ResourceVersion, 10, 64)
	return n
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
