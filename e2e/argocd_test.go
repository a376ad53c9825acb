package e2e_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/localrun"
)

// argoDeadlineSeconds is the models' progress deadline in TestArgoCD.
const argoDeadlineSeconds = 15

// quietWindow is how long each step watches for a sync loop after it
// settled: longer than one reconciliation, so a self-heal (which follows a
// resource change at once) or a periodic comparison would show.
const quietWindow = reconciliation + 5*time.Second

// argoLayout is one way of putting the models in an Application.
type argoLayout struct {
	name string
	// withDeployment: the Application also holds the Deployment (the
	// chart's, without spec.replicas, which the model sets).
	withDeployment bool
	// serverSideApply adds ServerSideApply=true to the sync options.
	serverSideApply bool
}

// TestArgoCD runs a real Argo CD (application controller, repo server, API
// server and CLI, built from its Go module at the pinned version) against
// the suite's cluster and operator, with the published argocd-cm health
// check and actions and Application settings, and the model files pushed
// to a Git server on loopback. For each layout — the models alone, the
// Deployment and the model in one Application with automated sync and
// self-heal, the same with ServerSideApply=true — it measures and checks
// what Argo CD shows through a model's lifecycle: Synced and Healthy
// "Serving v1", an upgrade, a never-ready version (Degraded with the failed
// and the serving version, the Application's health while the operator
// rolls back and after), the revert, every resource action run through
// argocd-server's API, an HPA-style scale-up, and, after each step, a quiet
// window with no sync operation and no drift correction.
func TestArgoCD(t *testing.T) {
	requireCluster(t)
	t.Parallel()
	rig := startArgoCD(t)
	for _, l := range []argoLayout{
		{name: "models"},
		{name: "with-deployment", withDeployment: true},
		{name: "with-deployment-ssa", withDeployment: true, serverSideApply: true},
	} {
		t.Run(l.name, func(t *testing.T) {
			t.Parallel()
			runArgoLayout(t, rig, l)
		})
	}
}

// argoFlow is one layout's Application, its repository and its model.
type argoFlow struct {
	t     *testing.T
	rig   *argoRig
	l     argoLayout
	ns    string
	app   string
	repo  string
	model map[string]any
	syncs *syncCounter
	// note is the data of another object of the Application (the chart's
	// ConfigMap, or a ConfigMap of its own in the models-only layout);
	// empty: the object is as published.
	note string
}

func runArgoLayout(t *testing.T, rig *argoRig, l argoLayout) {
	f := &argoFlow{t: t, rig: rig, l: l, ns: newNamespace(t), app: "openmed-" + l.name, repo: "models-" + l.name}
	url := rig.git.repo(t, f.repo)
	if !l.withDeployment {
		// The Deployment is applied otherwise (a Helm release, another
		// Application).
		createTarget(t, f.ns, func(d *appsv1.Deployment) { d.Spec.MinReadySeconds = warmUpSeconds })
	}
	f.model = argoModel(t)
	start := time.Now()
	rig.git.commit(t, f.repo, "openmed-service v1", f.files())
	createApplication(t, f.app, url, ".", f.ns, func(spec map[string]any) {
		if l.serverSideApply {
			policy := spec["syncPolicy"].(map[string]any)
			policy["syncOptions"] = append(policy["syncOptions"].([]any), "ServerSideApply=true")
		}
	})
	f.syncs = watchSyncs(t, f.app)

	// First commit: Synced and Healthy, the model's health with the
	// operator's message.
	s := f.await("Synced and Healthy, serving v1", func(s appState) bool {
		return s.sync == "Synced" && s.health == "Healthy" && s.modelHealth == "Healthy" && s.modelMessage == "Serving "+v1
	})
	t.Logf("first commit -> Healthy in %s: %s", time.Since(start).Round(100*time.Millisecond), s)
	f.quiet("first commit")
	f.appGet("Healthy")
	if l.serverSideApply {
		// Argo CD applied server-side: its field manager holds an Apply
		// entry on the Deployment and on the model.
		s := read(t, f.ns)
		for _, o := range []client.Object{s.d, s.m} {
			if !slices.ContainsFunc(o.GetManagedFields(), func(e metav1.ManagedFieldsEntry) bool {
				return e.Manager == argocdSSAManager && e.Operation == metav1.ManagedFieldsOperationApply
			}) {
				t.Errorf("%T %s: no %s Apply entry with ServerSideApply=true: %v", o, o.GetName(), argocdSSAManager, managerOps(o))
			}
		}
	}
	f.anotherObject()
	f.quiet("a commit of another object")

	// An upgrade.
	committed := f.commitVersion(v2)
	f.await("Healthy, serving v2", func(s appState) bool {
		return s.sync == "Synced" && s.health == "Healthy" && s.modelMessage == "Serving "+v2
	})
	t.Logf("upgrade commit -> Healthy in %s", time.Since(committed).Round(100*time.Millisecond))
	f.quiet("upgrade")

	// A never-ready version: Degraded with the failed and the serving
	// version once the operator rolled back; what the Application shows
	// meanwhile.
	committed = f.commitVersion(brokenVersion)
	seen := f.record()
	s = f.await("the model Degraded after the rollback", func(s appState) bool {
		return s.modelHealth == "Degraded" && strings.Contains(s.modelMessage, brokenVersion) && strings.Contains(s.modelMessage, "serving the retained "+v2)
	})
	t.Logf("never-ready commit -> Degraded in %s: %s", time.Since(committed).Round(100*time.Millisecond), s)
	if s.health != "Degraded" {
		t.Errorf("the Application's health is %s while its model is Degraded", s.health)
	}
	// argocd-notifications pages once, with the model's message.
	brokenAt := committed
	degraded := f.notified("degraded", brokenAt)
	if m := degraded.model(modelName); !strings.Contains(m, brokenVersion) || !strings.Contains(m, v2) {
		t.Errorf("the degraded notification's model message %q does not name the failed and the serving version", m)
	}
	t.Logf("never-ready commit -> degraded notification in %s: %q", degraded.At.Sub(brokenAt).Round(100*time.Millisecond), degraded.model(modelName))
	t.Logf("the Application's health after the never-ready commit, in order: %s", strings.Join(seen.stop(), " -> "))
	// It stays Degraded until Git changes: every health the Application
	// reports over the quiet window is Degraded.
	held := f.record()
	f.quiet("never-ready version")
	for _, h := range held.stop() {
		if !strings.HasPrefix(h, "Degraded") {
			t.Errorf("the Application went %s after the rollback, before Git changed", h)
		}
	}
	f.appGet("Degraded")

	// The revert.
	committed = f.commitVersion(v2)
	f.await("Healthy again after the revert", func(s appState) bool {
		return s.sync == "Synced" && s.health == "Healthy" && s.modelMessage == "Serving "+v2
	})
	t.Logf("revert commit -> Healthy in %s", time.Since(committed).Round(100*time.Millisecond))
	deployed := f.notified("deployed", committed)
	t.Logf("revert commit -> deployed notification in %s: %q", deployed.At.Sub(committed).Round(100*time.Millisecond), deployed.model(modelName))
	f.quiet("revert")
	// One page for the never-ready version, until the fix was committed.
	if n := rig.receiver.before(rig.receiver.of(f.app, "degraded", brokenAt), committed); len(n) != 1 {
		t.Errorf("%d degraded notifications between the never-ready commit and the revert, want 1:\n%s", len(n), notificationList(n))
	}
	if n := rig.receiver.of(f.app, "deployed", committed); len(n) != 1 {
		t.Errorf("%d deployed notifications after the revert, want 1", len(n))
	}
	// The catalog's on-health-degraded fires once per sync revision while
	// the Application is Degraded: the fix's sync re-sends it, with the
	// sync's revision still empty while it runs and with the fix's
	// revision before Argo CD assessed health again, always before the
	// deployed notification and with the failed version's message. That
	// is Argo CD's trigger (notifications-engine keeps no "already sent"
	// for an empty oncePer value, so those may come more than once); the
	// docs say so. Once per non-empty revision is the engine's promise.
	resent := rig.receiver.of(f.app, "degraded", committed)
	perRevision := map[string]int{}
	for _, n := range resent {
		if n.Revision != "" && n.Revision != "<no value>" {
			perRevision[n.Revision]++
		}
	}
	for rev, n := range perRevision {
		if n > 1 {
			t.Errorf("the revert's sync re-sent the degraded notification %d times for revision %s, more than the once per revision the docs state:\n%s", n, rev, notificationList(resent))
		}
	}
	for _, n := range resent {
		if !n.At.Before(deployed.At) || !strings.Contains(n.model(modelName), brokenVersion) {
			t.Errorf("a degraded notification after the revert that is not a re-send of the never-ready one during the fix's sync:\n%s", notificationList([]notification{n}))
		}
	}
	t.Logf("the revert's sync re-sent the degraded notification %d times before the deployed one (the catalog trigger's oncePer revision)", len(resent))

	// The resource actions, through argocd-server's API, with Argo CD's
	// RBAC deciding who may run which (examples/argocd/argocd-rbac-cm.yaml):
	// the viewer may run none, the rollbacker only rollback. A refused
	// action changes nothing.
	before := read(t, f.ns).m
	for _, try := range []struct{ account, action string }{
		{argoViewer, "rollback"}, {argoViewer, "suspend"}, {argoRollbacker, "suspend"}, {argoRollbacker, "retry"},
	} {
		out, err := f.actionAs(try.account, try.action)
		if err == nil || !strings.Contains(out, "PermissionDenied") {
			t.Errorf("%s ran the %s action: err %v, output %q; want Argo CD's PermissionDenied", try.account, try.action, err, out)
		} else if try.account == argoViewer && try.action == "rollback" {
			t.Logf("%s runs rollback: %s", try.account, strings.TrimSpace(out))
		}
	}
	if after := read(t, f.ns).m; after.ResourceVersion != before.ResourceVersion {
		t.Errorf("refused actions changed the model: resourceVersion %s -> %s, annotations %v, suspend %v",
			before.ResourceVersion, after.ResourceVersion, after.Annotations, after.Spec.Suspend)
	}
	if out, err := f.actionAs(argoRollbacker, "rollback"); err != nil {
		t.Fatalf("%s may run rollback: %v\n%s", argoRollbacker, err, out)
	}
	f.await("held at v1 by the rollback action", func(s appState) bool {
		return s.modelHealth == "Degraded" && strings.Contains(s.modelMessage, "Held at "+v1)
	})
	f.quiet("rollback action")
	f.action("retry")
	f.await("the desired version again after retry", func(s appState) bool {
		return s.health == "Healthy" && s.modelMessage == "Serving "+v2
	})
	if m := read(t, f.ns).m; m.Annotations[v1alpha1.RollbackToAnnotation] != "" {
		t.Errorf("retry left %s=%s", v1alpha1.RollbackToAnnotation, m.Annotations[v1alpha1.RollbackToAnnotation])
	}
	f.quiet("retry action")
	f.action("suspend")
	f.await("Suspended", func(s appState) bool { return s.modelHealth == "Suspended" })
	// What self-heal does with spec.suspend: the published model file
	// does not set it, so the field is not Git's, and Argo CD keeps it.
	suspended := f.record()
	time.Sleep(quietWindow)
	if m := read(t, f.ns).m; !m.Spec.Suspend {
		t.Errorf("self-heal reverted spec.suspend to Git; the docs say it keeps a field the file does not set")
	}
	if s := readApp(t, f.app, modelName); s.modelHealth != "Suspended" {
		t.Errorf("the model reads %s %d s after the suspend action, want Suspended throughout: %s", s.modelHealth, int(quietWindow.Seconds()), s)
	}
	t.Logf("the Application's health while suspended: %v", suspended.stop())
	f.action("resume")
	f.await("Healthy after resume", func(s appState) bool { return s.health == "Healthy" && s.modelMessage == "Serving "+v2 })
	f.quiet("suspend and resume actions")

	// An HPA takes the replicas: the model leaves them out, then the scale
	// subresource goes 2 -> 4. The Application is never Degraded.
	delete(f.model["spec"].(map[string]any), "replicas")
	committed = f.commit("leave replicas to an HPA")
	f.await("synced without replicas", func(s appState) bool {
		m := read(t, f.ns).m
		return s.sync == "Synced" && s.health == "Healthy" && m.Spec.Replicas == nil && m.Status.ObservedGeneration == m.Generation
	})
	f.notified("deployed", committed)
	scaleFrom := time.Now()
	seen = f.record()
	scale := &autoscalingv1.Scale{Spec: autoscalingv1.ScaleSpec{Replicas: 4}}
	if err := k8s.SubResource("scale").Update(context.Background(), &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: modelName}},
		client.WithSubResourceBody(scale), client.FieldOwner("kube-controller-manager")); err != nil {
		t.Fatal(err)
	}
	waitState(t, f.ns, "4 pods available", func(s state) bool { return ptr.Deref(s.d.Spec.Replicas, 0) == 4 && settled(s.d) })
	f.await("Healthy after the scale-up", func(s appState) bool { return s.health == "Healthy" })
	healths := seen.stop()
	t.Logf("the Application's health through the scale-up: %s", strings.Join(healths, " -> "))
	progressing := false
	for _, h := range healths {
		if strings.HasPrefix(h, "Degraded") {
			t.Errorf("the Application was Degraded during a scale-up: %v", healths)
			break
		}
		progressing = progressing || strings.HasPrefix(h, "Progressing")
	}
	if !progressing {
		t.Errorf("the Application never showed the scale-up (minReadySeconds %d): %v", warmUpSeconds, healths)
	}
	f.quiet("HPA scale-up")
	if n := rig.receiver.of(f.app, "", scaleFrom); len(n) > 0 {
		t.Errorf("the scale-up sent %d notifications (%+v), want none", len(n), n)
	}
}

// notified waits for exactly one notification of event for the
// Application since from, and returns it.
func (f *argoFlow) notified(event string, from time.Time) notification {
	f.t.Helper()
	var got []notification
	eventually(f.t, "one "+event+" notification", func() (bool, string) {
		got = f.rig.receiver.of(f.app, event, from)
		return len(got) > 0, fmt.Sprintf("%d; bodies that were not a notification: %q", len(got), f.rig.receiver.unreadable())
	})
	if len(got) != 1 {
		f.t.Errorf("%d %s notifications, want 1: %+v", len(got), event, got)
	}
	return got[0]
}

// notificationList prints notifications one a line.
func notificationList(ns []notification) string {
	var b strings.Builder
	for _, n := range ns {
		fmt.Fprintf(&b, "  %s %s health=%s revision=%s models=%+v\n", n.At.Format("15:04:05.000"), n.Event, n.Health, n.Revision, n.Models)
	}
	return b.String()
}

// model is the message the notification carries for the model name.
func (n notification) model(name string) string {
	for _, m := range n.Models {
		if m.Name == name {
			return m.Message
		}
	}
	return ""
}

// argocdSSAManager is the field manager of Argo CD's server-side apply
// (argo-cd common.ArgoCDSSAManager).
const argocdSSAManager = "argocd-controller"

// managerOps lists an object's managedFields as manager/operation.
func managerOps(o client.Object) []string {
	var out []string
	for _, e := range o.GetManagedFields() {
		out = append(out, e.Manager+"/"+string(e.Operation))
	}
	return out
}

// argoModel is examples/openmedmodel.yaml at v1 with the suite's progress
// deadline.
func argoModel(t *testing.T) map[string]any {
	t.Helper()
	objs, err := localrun.ReadObjects(filepath.Join(localrun.ExamplesDir(), localrun.ModelExample))
	if err != nil || len(objs) != 1 {
		t.Fatalf("%s: %v", localrun.ModelExample, err)
	}
	m := objs[0].Object
	unstructured.RemoveNestedField(m, "metadata", "namespace")
	_ = unstructured.SetNestedField(m, v1, "spec", "version")
	_ = unstructured.SetNestedField(m, int64(argoDeadlineSeconds), "spec", "rolloutStrategy", "progressDeadlineSeconds")
	return m
}

// files is the repository's content: the model and, for the layouts that
// hold it, the chart's Deployment (without spec.replicas, which the model
// sets, and with minReadySeconds) and ConfigMap.
func (f *argoFlow) files() map[string][]byte {
	model, err := yaml.Marshal(f.model)
	if err != nil {
		f.t.Fatal(err)
	}
	files := map[string][]byte{"openmedmodel.yaml": model}
	if f.l.withDeployment {
		objs, err := localrun.ReadObjects(filepath.Join(localrun.ExamplesDir(), localrun.TargetExample))
		if err != nil {
			f.t.Fatal(err)
		}
		for _, u := range objs {
			u.SetNamespace("")
			if u.GetKind() == "ConfigMap" && f.note != "" {
				_ = unstructured.SetNestedField(u.Object, f.note, "data", "openmed-note")
			}
			if u.GetKind() == "Deployment" {
				unstructured.RemoveNestedField(u.Object, "spec", "replicas")
				// A model server that warms up: new pods count as
				// available only after this, so a scale-up takes as long.
				_ = unstructured.SetNestedField(u.Object, int64(warmUpSeconds), "spec", "minReadySeconds")
			}
		}
		app, err := localrun.MarshalObjects(objs)
		if err != nil {
			f.t.Fatal(err)
		}
		files["target.yaml"] = app
	} else if f.note != "" {
		cm := map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": f.noteConfigMap()},
			"data": map[string]any{"openmed-note": f.note}}
		data, err := yaml.Marshal(cm)
		if err != nil {
			f.t.Fatal(err)
		}
		files["notes.yaml"] = data
	}
	return files
}

func (f *argoFlow) commit(message string) time.Time {
	f.rig.git.commit(f.t, f.repo, message, f.files())
	return time.Now()
}

func (f *argoFlow) commitVersion(version string) time.Time {
	_ = unstructured.SetNestedField(f.model, version, "spec", "version")
	return f.commit("openmed-service " + version)
}

// await polls the Application until cond holds.
func (f *argoFlow) await(what string, cond func(appState) bool) appState {
	f.t.Helper()
	var s appState
	eventually(f.t, f.app+": "+what, func() (bool, string) {
		s = readApp(f.t, f.app, modelName)
		return cond(s), s.String()
	})
	return s
}

// quiet checks that no sync loop runs once a step settled: over the quiet
// window neither Argo CD nor the operator changes the Deployment's spec
// (the pod template with the operator's fields included) or the model's
// spec, annotations and labels — compared by content, not by generation,
// which an annotation-only write moves and a metadata-only revert does
// not — and the operator corrects no field. At most one sync operation
// runs in the window: right after a sync, Argo CD's comparison can still
// read the object from before it and self-heal the model once more with
// the same revision, which changes nothing; a self-heal loop re-applies
// again and again.
func (f *argoFlow) quiet(step string) {
	f.t.Helper()
	f.await("no sync operation running", func(s appState) bool { return s.operationPhase != "Running" && s.sync == "Synced" })
	syncs := f.syncs.count()
	drift := f.corrections()
	before := read(f.t, f.ns)
	time.Sleep(quietWindow)
	after := read(f.t, f.ns)
	for _, d := range quietDiff(before, after) {
		f.t.Errorf("after %s: in %s of quiet %s", step, quietWindow, d)
	}
	if n := f.corrections() - drift; n != 0 {
		f.t.Errorf("after %s: the operator corrected %d fields in %s of quiet: %v", step, n, quietWindow, eventMessages(f.t, f.ns, v1alpha1.DriftCorrectedReason))
	}
	added := f.syncs.list()[syncs:]
	if len(added) > 1 {
		f.t.Errorf("after %s: %d sync operations in %s of quiet (a self-heal loop): %v", step, len(added), quietWindow, added)
	}
	f.t.Logf("after %s: %d sync operations in all, %d in the %s quiet window %v; the spec of the Deployment and the model unchanged; %d operator corrections in all",
		step, len(f.syncs.list()), len(added), quietWindow, added, drift)
}

// quietDiff lists what changed between two readings that a quiet window
// must keep: the Deployment's spec, the model's spec, annotations and
// labels.
func quietDiff(before, after state) []string {
	var out []string
	if !equality.Semantic.DeepEqual(before.d.Spec, after.d.Spec) {
		out = append(out, fmt.Sprintf("the Deployment's spec changed (generation %d -> %d)", before.d.Generation, after.d.Generation))
	}
	if !equality.Semantic.DeepEqual(before.m.Spec, after.m.Spec) {
		out = append(out, fmt.Sprintf("the model's spec changed (generation %d -> %d)", before.m.Generation, after.m.Generation))
	}
	// Argo CD's client-side apply bookkeeping is not the model's metadata.
	bookkept := func(a map[string]string) map[string]string {
		a = maps.Clone(a)
		delete(a, corev1.LastAppliedConfigAnnotation)
		return a
	}
	if !maps.Equal(bookkept(before.m.Annotations), bookkept(after.m.Annotations)) || !maps.Equal(before.m.Labels, after.m.Labels) {
		out = append(out, fmt.Sprintf("the model's metadata changed: annotations %v -> %v, labels %v -> %v", before.m.Annotations, after.m.Annotations, before.m.Labels, after.m.Labels))
	}
	return out
}

// anotherObject commits a change to another object of the Application
// (the chart's ConfigMap; a ConfigMap of its own where the Application
// holds only the model), waits until Argo CD synced that revision, and
// checks that nothing of the model's Deployment moved: its spec with the
// operator's fields as it was, no pod rolled, no correction by the
// operator, the model untouched. With client-side apply Argo CD's sync
// also rewrites the Deployment's last-applied-configuration annotation,
// which moves its generation with an identical spec: compared by spec.
func (f *argoFlow) anotherObject() {
	f.t.Helper()
	before := read(f.t, f.ns)
	drift := f.corrections()
	rsBefore := replicaSetNames(f.t, f.ns)
	f.note = "changed in Git at " + time.Now().UTC().Format(time.RFC3339Nano)
	rev := f.rig.git.commit(f.t, f.repo, "another object only", f.files())
	f.await("synced to the commit of another object", func(s appState) bool {
		return s.sync == "Synced" && s.revision == rev && s.operationPhase != "Running" && s.health == "Healthy"
	})
	eventually(f.t, "the ConfigMap carries the change", func() (bool, string) {
		cm := &corev1.ConfigMap{}
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: f.noteConfigMap()}, cm); err != nil {
			return false, err.Error()
		}
		return cm.Data["openmed-note"] == f.note, fmt.Sprint(cm.Data)
	})
	after := read(f.t, f.ns)
	for _, d := range quietDiff(before, after) {
		f.t.Errorf("a commit of another object only: %s", d)
	}
	rsAfter := replicaSetNames(f.t, f.ns)
	if !slices.Equal(rsBefore, rsAfter) {
		f.t.Errorf("a commit of another object only rolled pods: ReplicaSets %v -> %v", rsBefore, rsAfter)
	}
	if n := f.corrections() - drift; n != 0 {
		f.t.Errorf("a commit of another object only: the operator corrected %d fields: %v", n, eventMessages(f.t, f.ns, v1alpha1.DriftCorrectedReason))
	}
	f.t.Logf("after the commit of another object: Deployment generation %d -> %d, spec unchanged, ReplicaSets %v", before.d.Generation, after.d.Generation, rsAfter)
}

// noteConfigMap is the ConfigMap anotherObject changes.
func (f *argoFlow) noteConfigMap() string {
	if f.l.withDeployment {
		return modelName + "-config"
	}
	return "openmed-notes"
}

// replicaSetNames lists the ReplicaSets of the namespace, sorted.
func replicaSetNames(t *testing.T, ns string) []string {
	t.Helper()
	var list appsv1.ReplicaSetList
	if err := k8s.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, rs := range list.Items {
		out = append(out, rs.Name)
	}
	slices.Sort(out)
	return out
}

// corrections counts the operator's DriftCorrected and FieldReplaced
// events for the model.
func (f *argoFlow) corrections() int {
	return len(eventMessages(f.t, f.ns, v1alpha1.DriftCorrectedReason)) + len(eventMessages(f.t, f.ns, v1alpha1.FieldReplacedReason))
}

// action runs a resource action on the model with `argocd app actions run`
// as Argo CD's admin.
func (f *argoFlow) action(name string) {
	f.t.Helper()
	if out, err := f.actionAs(argoAdmin, name); err != nil {
		f.t.Fatalf("argocd app actions run %s: %v\n%s", name, err, out)
	}
}

// actionAs runs a resource action as a local account of the rig.
func (f *argoFlow) actionAs(account, name string) (string, error) {
	f.t.Helper()
	return f.rig.cliAs(f.t, account, "app", "actions", "run", f.app, name, "--kind", "OpenMedModel", "--group", "openmed.ai",
		"--resource-name", modelName, "--namespace", f.ns)
}

// appGet logs `argocd app get` as a user sees it, once per layout and
// state, and checks it names the model's health.
func (f *argoFlow) appGet(health string) {
	f.t.Helper()
	out, err := f.rig.cli(f.t, "app", "get", f.app)
	if err != nil {
		f.t.Fatalf("argocd app get: %v\n%s", err, out)
	}
	if got := appGetField(out, "Health Status"); got != health {
		f.t.Errorf("argocd app get says Health Status %q, want %q:\n%s", got, health, out)
	}
	if !slices.ContainsFunc(strings.Split(out, "\n"), func(line string) bool {
		fields := strings.Fields(line)
		return len(fields) > 5 && fields[1] == "OpenMedModel" && fields[4] == "Synced" && fields[5] == health
	}) {
		f.t.Errorf("argocd app get has no OpenMedModel row with health %s:\n%s", health, out)
	}
	f.t.Logf("argocd app get %s (%s):\n%s", f.app, health, out)
	if dir := os.Getenv("OPENMED_ARGOCD_OUTPUT"); dir != "" {
		_ = os.WriteFile(filepath.Join(dir, f.app+"-"+strings.ToLower(health)+".txt"), []byte(out), 0o644)
	}
}

// appGetField is the value of a "Name:   value" line of argocd app get.
func appGetField(out, name string) string {
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == name {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// healthRecorder keeps every distinct health the Application reported.
type healthRecorder struct {
	mu    sync.Mutex
	seen  []string
	stopc chan struct{}
	done  chan struct{}
}

// record samples the Application's health every 200 ms until stop.
func (f *argoFlow) record() *healthRecorder {
	r := &healthRecorder{stopc: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for {
			select {
			case <-r.stopc:
				return
			case <-time.After(200 * time.Millisecond):
			}
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(applicationGVK)
			if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: argocdNamespace, Name: f.app}, u); err != nil {
				continue
			}
			h, _, _ := unstructured.NestedString(u.Object, "status", "health", "status")
			msg, _, _ := unstructured.NestedString(u.Object, "status", "health", "message")
			entry := h
			if msg != "" {
				entry += " (" + msg + ")"
			}
			r.mu.Lock()
			if len(r.seen) == 0 || r.seen[len(r.seen)-1] != entry {
				r.seen = append(r.seen, entry)
			}
			r.mu.Unlock()
		}
	}()
	f.t.Cleanup(func() { r.stop() })
	return r
}

func (r *healthRecorder) stop() []string {
	select {
	case <-r.stopc:
	default:
		close(r.stopc)
	}
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.seen...)
}

// syncCounter counts the Application's sync operations: every distinct
// start time its operation state had.
type syncCounter struct {
	mu      sync.Mutex
	started []string
	stopc   chan struct{}
}

func watchSyncs(t *testing.T, app string) *syncCounter {
	c := &syncCounter{stopc: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-c.stopc:
				return
			case <-time.After(250 * time.Millisecond):
			}
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(applicationGVK)
			if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: argocdNamespace, Name: app}, u); err != nil {
				continue
			}
			started, _, _ := unstructured.NestedString(u.Object, "status", "operationState", "startedAt")
			phase, _, _ := unstructured.NestedString(u.Object, "status", "operationState", "phase")
			if started == "" || phase == "Running" {
				continue
			}
			results, _, _ := unstructured.NestedSlice(u.Object, "status", "operationState", "syncResult", "resources")
			var applied []string
			for _, item := range results {
				if r, ok := item.(map[string]any); ok {
					applied = append(applied, fmt.Sprintf("%v: %v", r["kind"], r["message"]))
				}
			}
			entry := started + " " + phase + " [" + strings.Join(applied, "; ") + "]"
			c.mu.Lock()
			if len(c.started) == 0 || !strings.HasPrefix(c.started[len(c.started)-1], started+" ") {
				c.started = append(c.started, entry)
			}
			c.mu.Unlock()
		}
	}()
	t.Cleanup(func() { close(c.stopc); <-done })
	return c
}

func (c *syncCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.started)
}

func (c *syncCounter) list() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.started...)
}
