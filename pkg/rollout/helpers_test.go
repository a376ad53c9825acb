package rollout

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions/check"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	"sigs.k8s.io/yaml"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/target"
)

// Versions of the Kopf operator's test suite, whose scenarios the tests replay.
const (
	v1 = "OpenMed/synthetic-pii-v1"
	v2 = "OpenMed/synthetic-pii-v2"
	v3 = "OpenMed/synthetic-pii-v3"
)

// clock is the fixed clock of the Kopf operator's test suite.
var clock = time.Date(2026, 8, 18, 12, 0, 0, 0, time.UTC)

func readYAML(t testing.TB, name string, into any) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, into); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// fixtureModel is the fixture resource of the Kopf operator's test suite
// (testdata/model.yaml) in namespace "synthetic",
// defaulted as the API server would store it, for the tests that need no
// cluster (names and hashes).
func fixtureModel(t testing.TB) *v1alpha1.OpenMedModel {
	obj := &v1alpha1.OpenMedModel{}
	readYAML(t, "model.yaml", obj)
	obj.Namespace = "synthetic"
	obj.Default()
	return obj
}

// fluxChecker applies Flux's rules for a finished reconciliation status.
var fluxChecker = func() *check.Checker {
	c := check.NewChecker(nil, &check.Conditions{NegativePolarity: v1alpha1.NegativePolarityConditions})
	c.DisableFetch = true
	return c
}()

// decide runs Decide and checks, for every call in the package's tests, that
// it is deterministic, leaves its inputs alone and produces a status that
// passes Flux's status rules.
func decide(t testing.TB, obj *v1alpha1.OpenMedModel, obs Observed) Plan {
	t.Helper()
	return decideWith(t, obj, obs, Options{})
}

// decideWith is decide with the core's options.
func decideWith(t testing.TB, obj *v1alpha1.OpenMedModel, obs Observed, opts Options) Plan {
	t.Helper()
	before, obsBefore := obj.DeepCopy(), deepCopyObserved(obs)
	plan := Decide(obj, obs, opts)
	again := Decide(obj.DeepCopy(), deepCopyObserved(obs), opts)
	if !reflect.DeepEqual(plan, again) {
		t.Fatalf("Decide is not deterministic:\n%+v\n%+v", plan, again)
	}
	if !apiequality.Semantic.DeepEqual(before, obj) || !reflect.DeepEqual(obsBefore, obs) {
		t.Fatal("Decide modified its inputs")
	}
	if obj.DeletionTimestamp == nil {
		checkFlux(t, obj, plan.Status)
	}
	checkDeclared(t, plan.Status)
	return plan
}

// checkDeclared fails when the Ready reason of st is no declared state
// (states.go): a state set without declare would get no summary.
func checkDeclared(t testing.TB, st v1alpha1.OpenMedModelStatus) {
	t.Helper()
	if c := apimeta.FindStatusCondition(st.Conditions, v1alpha1.ReadyCondition); c != nil {
		if _, ok := summaries[c.Reason]; !ok {
			t.Fatalf("Ready reason %s is no declared state", c.Reason)
		}
	}
}

func checkFlux(t testing.TB, obj *v1alpha1.OpenMedModel, st v1alpha1.OpenMedModelStatus) {
	t.Helper()
	if err := fluxFailure(obj, st); err != nil {
		t.Fatalf("status breaks Flux's rules: %v\nconditions: %v", err, condSummary(st))
	}
}

func fluxFailure(obj *v1alpha1.OpenMedModel, st v1alpha1.OpenMedModelStatus) error {
	out := obj.DeepCopy()
	out.Status = st
	fail, _ := fluxChecker.Check(context.Background(), out)
	return fail
}

func deepCopyObserved(o Observed) Observed {
	// Every field as it is, then a copy of what it points to.
	out := o
	out.Deployment, out.PreviousTargets, out.ConfigMaps, out.Pods, out.PendingPods, out.Failure = nil, nil, nil, nil, nil, nil
	out.ConfigMapContents, out.WrittenConfigMaps = nil, slices.Clone(o.WrittenConfigMaps)
	for i := range o.ConfigMapContents {
		out.ConfigMapContents = append(out.ConfigMapContents, *o.ConfigMapContents[i].DeepCopy())
	}
	if o.Deployment != nil {
		out.Deployment = o.Deployment.DeepCopy()
	}
	for _, d := range o.PreviousTargets {
		out.PreviousTargets = append(out.PreviousTargets, d.DeepCopy())
	}
	for i := range o.ConfigMaps {
		out.ConfigMaps = append(out.ConfigMaps, *o.ConfigMaps[i].DeepCopy())
	}
	for i := range o.Pods {
		out.Pods = append(out.Pods, *o.Pods[i].DeepCopy())
	}
	for i := range o.PendingPods {
		out.PendingPods = append(out.PendingPods, *o.PendingPods[i].DeepCopy())
	}
	out.NotReadyNodes = slices.Clone(o.NotReadyNodes)
	out.ReplicaSets = slices.Clone(o.ReplicaSets)
	if o.Failure != nil {
		f := *o.Failure
		out.Failure = &f
	}
	return out
}

// condSummary is the whole condition set as sorted "Type=Status/Reason".
func condSummary(st v1alpha1.OpenMedModelStatus) []string {
	out := make([]string, 0, len(st.Conditions))
	for _, c := range st.Conditions {
		out = append(out, fmt.Sprintf("%s=%s/%s", c.Type, c.Status, c.Reason))
	}
	sort.Strings(out)
	return out
}

func eventReasons(events []Event) []string {
	out := make([]string, 0, len(events))
	for _, e := range events {
		out = append(out, e.Reason)
	}
	return out
}

var nsCounter atomic.Int64

// cluster is one test's namespace on the real API server, holding the
// fixture resource and its target. pass does what the reconciler does with
// a plan, in the same order, with the same requests (pkg/target); the API
// server merges, defaults, validates and tracks field ownership. The tests
// play the Deployment controller (markReady, markFailed, ...) and the other
// field managers (editDeployment).
type cluster struct {
	t      testing.TB
	ns     string
	obj    *v1alpha1.OpenMedModel
	now    time.Time
	events []Event
	// override changes the resource as read, for the states the API server
	// would not store (an invalid spec).
	override func(*v1alpha1.OpenMedModel)
	// opts are the core's options (default: none set).
	opts Options
	// written are the manifest ConfigMaps the fixture created, as the
	// reconciler remembers them (Observed.WrittenConfigMaps).
	written []v1alpha1.VerifiedConfigMap
}

// newCluster creates the fixture: the target Deployment, written by Helm
// (field manager "helm", operation Update) and reported available by the
// Deployment controller, and the OpenMedModel.
func newCluster(t testing.TB) *cluster {
	t.Helper()
	return newClusterWith(t, func(*appsv1.Deployment) {})
}

// newClusterWith creates the fixture with a target shaped by mutate.
func newClusterWith(t testing.TB, mutate func(*appsv1.Deployment)) *cluster {
	t.Helper()
	ctx := context.Background()
	c := &cluster{t: t, ns: fmt.Sprintf("synthetic-%d", nsCounter.Add(1)), now: clock}
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: c.ns}}); err != nil {
		t.Fatal(err)
	}
	c.createTarget(mutate)
	obj := &v1alpha1.OpenMedModel{}
	readYAML(t, "model.yaml", obj)
	obj.Namespace = c.ns
	if err := env.Client.Create(ctx, obj, client.FieldValidation("Strict")); err != nil {
		t.Fatal(err)
	}
	c.refresh()
	return c
}

// createTarget creates the fixture's Deployment, shaped by mutate, as Helm
// writes it, and reports it available.
func (c *cluster) createTarget(mutate func(*appsv1.Deployment)) {
	c.t.Helper()
	dep := &appsv1.Deployment{}
	readYAML(c.t, "deployment.yaml", dep)
	dep.Namespace = c.ns
	mutate(dep)
	if err := client.WithFieldOwner(env.Client, "helm").Create(context.Background(), dep); err != nil {
		c.t.Fatal(err)
	}
	c.setStatusOf(dep.Name, func(d *appsv1.Deployment) {
		n := ptr.Deref(d.Spec.Replicas, 1)
		c.statusOf(d, n, n, n, n)
	})
}

// recreateTarget creates the fixture's Deployment under name.
func (c *cluster) recreateTarget(name string) {
	c.createTarget(func(d *appsv1.Deployment) { d.Name = name })
}

// owner is the fixture's owner key.
func (c *cluster) owner() string { return c.ns + "/openmed-service" }

// refresh reads the resource from the API server.
func (c *cluster) refresh() {
	c.t.Helper()
	obj := &v1alpha1.OpenMedModel{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: c.ns, Name: "openmed-service"}, obj); err != nil {
		c.t.Fatal(err)
	}
	if c.override != nil {
		c.override(obj)
	}
	c.obj = obj
}

// dep is the live target Deployment, or nil.
func (c *cluster) dep() *appsv1.Deployment {
	return c.deployment("openmed-service")
}

func (c *cluster) deployment(name string) *appsv1.Deployment {
	c.t.Helper()
	d := &appsv1.Deployment{}
	err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: c.ns, Name: name}, d)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		c.t.Fatal(err)
	}
	return d
}

// configMaps are the live ConfigMaps of the namespace, by name.
func (c *cluster) configMaps() map[string]corev1.ConfigMap {
	c.t.Helper()
	var list corev1.ConfigMapList
	if err := env.Client.List(context.Background(), &list, client.InNamespace(c.ns)); err != nil {
		c.t.Fatal(err)
	}
	out := map[string]corev1.ConfigMap{}
	for _, cm := range list.Items {
		if cm.Name != "kube-root-ca.crt" {
			out[cm.Name] = cm
		}
	}
	return out
}

// observed reads what a pass decides on, from the API server.
func (c *cluster) observed() Observed {
	c.t.Helper()
	// The fixture reads the pods from the API server, as the reconciler
	// does before a bake ends.
	obs := Observed{Now: metav1.NewTime(c.now), Deployment: c.dep(), PodsRead: true}
	desired, previous := TargetNames(c.obj)
	if desired != "openmed-service" {
		obs.Deployment = c.deployment(desired)
	}
	for _, name := range previous {
		if d := c.deployment(name); d != nil {
			obs.PreviousTargets = append(obs.PreviousTargets, d)
		}
	}
	var pods corev1.PodList
	if err := env.Client.List(context.Background(), &pods, client.InNamespace(c.ns), client.MatchingLabels{v1alpha1.BakeLabel: "true"}); err != nil {
		c.t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Annotations[v1alpha1.ModelResourceAnnotation] == OwnerKey(c.obj) {
			obs.Pods = append(obs.Pods, p)
		}
	}
	obs.ReplicaSets = c.targetReplicaSets(obs.Deployment)
	// The pods without a node, as the operator's pending-pod store selects
	// them (by field, on the API server).
	var pending corev1.PodList
	if err := env.Client.List(context.Background(), &pending, client.InNamespace(c.ns),
		client.MatchingFieldsSelector{Selector: fields.ParseSelectorOrDie("spec.nodeName=,status.phase=Pending")}); err != nil {
		c.t.Fatal(err)
	}
	for _, p := range pending.Items {
		if p.Annotations[v1alpha1.ModelResourceAnnotation] == OwnerKey(c.obj) {
			obs.PendingPods = append(obs.PendingPods, p)
		}
	}
	names := []string{}
	cms := c.configMaps()
	for n := range cms {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		cm := cms[n]
		if ownedBy(&cm, c.obj) {
			// As the reconciler's store keeps them: metadata only.
			cm.Data, cm.Immutable = nil, nil
			obs.ConfigMaps = append(obs.ConfigMaps, cm)
		}
	}
	for _, w := range c.written {
		if !slices.Contains(c.obj.Status.VerifiedConfigMaps, w) {
			obs.WrittenConfigMaps = append(obs.WrittenConfigMaps, w)
		}
	}
	return obs
}

// readContents is what the reconciler does for a plan that asks to read
// manifest ConfigMaps (Plan.ReadConfigMaps): it reads them whole and
// decides again.
func (c *cluster) readContents(obs Observed, plan Plan) (Observed, Plan) {
	c.t.Helper()
	if len(plan.ReadConfigMaps) == 0 {
		return obs, plan
	}
	cms := c.configMaps()
	for _, name := range plan.ReadConfigMaps {
		if cm, ok := cms[name]; ok {
			obs.ConfigMapContents = append(obs.ConfigMapContents, cm)
		}
	}
	return obs, decideWith(c.t, c.obj, obs, c.opts)
}

// targetReplicaSets are the UIDs of the ReplicaSets of dep's namespace
// whose controller is dep (by UID), as the reconciler verifies the
// controllers of the pods it judges.
func (c *cluster) targetReplicaSets(dep *appsv1.Deployment) []types.UID {
	c.t.Helper()
	if dep == nil {
		return nil
	}
	var list appsv1.ReplicaSetList
	if err := env.Client.List(context.Background(), &list, client.InNamespace(dep.Namespace)); err != nil {
		c.t.Fatal(err)
	}
	var out []types.UID
	for i := range list.Items {
		if ref := metav1.GetControllerOf(&list.Items[i]); ref != nil && ref.Kind == "Deployment" && ref.UID == dep.UID {
			out = append(out, list.Items[i].UID)
		}
	}
	return out
}

// decide computes the plan of the next pass without carrying it out.
func (c *cluster) decide() Plan {
	c.t.Helper()
	c.refresh()
	obs := c.observed()
	_, plan := c.readContents(obs, decideWith(c.t, c.obj, obs, c.opts))
	return plan
}

// pass computes the plan and carries it out like the reconciler, status
// included.
func (c *cluster) pass() Plan {
	c.t.Helper()
	plan, err := c.passWith(true)
	if err != nil {
		c.t.Fatalf("carry out the plan: %v", err)
	}
	return plan
}

// passLosingStatus carries out the plan but loses the status write, as a
// crash or a failed request after the changes would.
func (c *cluster) passLosingStatus() Plan {
	c.t.Helper()
	plan, err := c.passWith(false)
	if err != nil {
		c.t.Fatalf("carry out the plan: %v", err)
	}
	return plan
}

func (c *cluster) passWith(writeStatus bool) (Plan, error) {
	c.t.Helper()
	ctx := context.Background()
	c.refresh()
	if c.obj.DeletionTimestamp == nil && !slices.Contains(c.obj.Finalizers, v1alpha1.Finalizer) {
		base := c.obj.DeepCopy()
		c.obj.Finalizers = append(c.obj.Finalizers, v1alpha1.Finalizer)
		if err := env.Client.Patch(ctx, c.obj, client.MergeFrom(base)); err != nil {
			return Plan{}, err
		}
	}
	obs := c.observed()
	obs, plan := c.readContents(obs, decideWith(c.t, c.obj, obs, c.opts))
	if len(plan.ClaimTargets) > 0 {
		// The reconciler's write-ahead record: durable before any write of
		// the plan, whatever happens to the pass's own status write.
		st := *c.obj.Status.DeepCopy()
		st.ClaimedTargets = ClaimedTargets(&st)
		for _, name := range plan.ClaimTargets {
			if !slices.Contains(st.ClaimedTargets, name) {
				st.ClaimedTargets = append(st.ClaimedTargets, name)
			}
		}
		sort.Strings(st.ClaimedTargets)
		c.writeStatus(st)
	}
	if err := c.execute(obs, plan); err != nil {
		return plan, err
	}
	c.events = append(c.events, plan.Events...)
	if writeStatus {
		c.writeStatus(plan.Status)
	}
	if plan.RemoveFinalizer && writeStatus {
		base := c.obj.DeepCopy()
		c.obj.Finalizers = nil
		if err := env.Client.Patch(ctx, c.obj, client.MergeFrom(base)); err != nil && !apierrors.IsNotFound(err) {
			return plan, err
		}
	}
	return plan, nil
}

// execute carries out the plan's changes in the reconciler's order.
func (c *cluster) execute(obs Observed, plan Plan) error {
	ctx, cl := context.Background(), env.Client
	for _, cm := range plan.EnsureConfigMaps {
		uid, err := target.CreateConfigMap(ctx, cl, cl, cm, c.obj.UID)
		if err != nil {
			return err
		}
		c.written = append(c.written, v1alpha1.VerifiedConfigMap{Name: cm.Name, UID: uid, ManifestHash: ManifestConfigMapHash(cm)})
	}
	for _, l := range plan.LabelConfigMaps {
		if err := target.LabelConfigMap(ctx, cl, c.ns, l.Name, obs.ConfigMapUID(l.Name, c.obj.UID), l.Labels); err != nil {
			return err
		}
	}
	precondition := ""
	if plan.Claim {
		precondition = obs.Deployment.ResourceVersion
	}
	if plan.ReleaseReplicas {
		if _, _, err := target.DropField(ctx, cl, cl, obs.Deployment.Namespace, obs.Deployment.Name, DefaultFieldManager, fieldpath.MakePathOrDie("spec", "replicas")); err != nil {
			return err
		}
		precondition = ""
	}
	for _, intent := range []*unstructured.Unstructured{plan.Takeover, plan.ApplyDeployment} {
		if intent == nil {
			continue
		}
		if _, err := target.Apply(ctx, cl, intent, DefaultFieldManager, precondition); err != nil {
			return err
		}
		precondition = ""
	}
	for _, rel := range append(slices.Clone(plan.ReleasePrevious), plan.Release) {
		if rel != nil {
			if _, err := target.Release(ctx, cl, rel.Keep, DefaultFieldManager, rel.ResourceVersion, v1alpha1.ModelResourceAnnotation); err != nil {
				return err
			}
		}
	}
	for _, name := range plan.PruneConfigMaps {
		if err := target.DeleteConfigMap(ctx, cl, c.ns, name, obs.ConfigMapUID(name, c.obj.UID)); err != nil {
			return err
		}
	}
	return nil
}

// writeStatus stores st through the status subresource, guarded by the
// resourceVersion the pass read.
func (c *cluster) writeStatus(st v1alpha1.OpenMedModelStatus) {
	c.t.Helper()
	if apiequality.Semantic.DeepEqual(c.obj.Status, st) {
		return
	}
	base := c.obj.DeepCopy()
	c.obj.Status = st
	err := env.Client.Status().Patch(context.Background(), c.obj, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
	if err != nil && !(c.obj.DeletionTimestamp != nil && apierrors.IsNotFound(err)) {
		c.t.Fatalf("write status: %v", err)
	}
}

// editModel changes the resource as a user would; the API server bumps the
// generation for spec changes.
func (c *cluster) editModel(mutate func(*v1alpha1.OpenMedModel)) {
	c.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c.refresh()
		mutate(c.obj)
		return env.Client.Update(context.Background(), c.obj)
	})
	if err != nil {
		c.t.Fatal(err)
	}
	c.refresh()
}

// setVersion edits spec.version.
func (c *cluster) setVersion(version string) {
	c.editModel(func(m *v1alpha1.OpenMedModel) { m.Spec.Version = version })
}

func (c *cluster) annotate(key, value string) {
	c.editModel(func(m *v1alpha1.OpenMedModel) {
		if m.Annotations == nil {
			m.Annotations = map[string]string{}
		}
		if value == "" {
			delete(m.Annotations, key)
			return
		}
		m.Annotations[key] = value
	})
}

// deleteModel asks the API server to delete the resource; the finalizer
// holds it until a pass releases the target.
func (c *cluster) deleteModel() {
	c.t.Helper()
	if err := env.Client.Delete(context.Background(), c.obj); err != nil {
		c.t.Fatal(err)
	}
	c.refresh()
}

// editDeployment changes the target as field manager would with a
// client-side write (Helm, kubectl edit, kubectl set env: operation Update).
func (c *cluster) editDeployment(manager string, mutate func(*appsv1.Deployment)) {
	c.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d := c.dep()
		mutate(d)
		return client.WithFieldOwner(env.Client, manager).Update(context.Background(), d)
	})
	if err != nil {
		c.t.Fatal(err)
	}
}

// setDeploymentStatus plays the Deployment controller for the target.
func (c *cluster) setDeploymentStatus(mutate func(*appsv1.Deployment)) {
	c.setStatusOf("openmed-service", mutate)
}

func (c *cluster) setStatusOf(name string, mutate func(*appsv1.Deployment)) {
	c.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d := c.deployment(name)
		mutate(d)
		return env.Client.Status().Update(context.Background(), d)
	})
	if err != nil {
		c.t.Fatal(err)
	}
}

// statusOf is a status the Deployment controller writes for d's current
// generation: replicas pods in all, updated of the current template, ready
// and available as given.
func (c *cluster) statusOf(d *appsv1.Deployment, replicas, updated, ready, available int32) {
	d.Status = appsv1.DeploymentStatus{
		ObservedGeneration: d.Generation,
		Replicas:           replicas, UpdatedReplicas: updated, ReadyReplicas: ready, AvailableReplicas: available,
		UnavailableReplicas: max(0, replicas-available),
		Conditions: []appsv1.DeploymentCondition{
			{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable"},
			{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "ReplicaSetUpdated"},
		},
	}
}

// markReady makes the Deployment controller report the current template
// rolled out and available.
func (c *cluster) markReady() {
	c.setDeploymentStatus(func(d *appsv1.Deployment) {
		n := ptr.Deref(d.Spec.Replicas, 1)
		d.Status = appsv1.DeploymentStatus{
			ObservedGeneration: d.Generation,
			Replicas:           n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n,
			Conditions: []appsv1.DeploymentCondition{
				{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable"},
				{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetAvailable"},
			},
		}
	})
}

// markFailed is mark_failed of the Kopf operator's test suite: the deadline of the
// current template's rollout passed while the old pods keep serving.
func (c *cluster) markFailed() {
	c.setDeploymentStatus(c.failedStatusOf)
}

// failedStatusOf is the status of d after its current template's rollout
// exceeded the deadline while the old pods keep serving.
func (c *cluster) failedStatusOf(d *appsv1.Deployment) {
	n := ptr.Deref(d.Spec.Replicas, 1)
	at := metav1.NewTime(c.now)
	d.Status = appsv1.DeploymentStatus{
		ObservedGeneration: d.Generation,
		Replicas:           n + 1, UpdatedReplicas: 1, ReadyReplicas: n, AvailableReplicas: n, UnavailableReplicas: 1,
		Conditions: []appsv1.DeploymentCondition{
			{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable"},
			{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded", LastUpdateTime: at, LastTransitionTime: at},
		},
	}
}

// scaleAs sets the target's replicas through the scale subresource, as an
// HPA (kube-controller-manager) does.
func (c *cluster) scaleAs(manager string, replicas int32) {
	c.t.Helper()
	scale := &autoscalingv1.Scale{Spec: autoscalingv1.ScaleSpec{Replicas: replicas}}
	if err := client.WithFieldOwner(env.Client, manager).SubResource("scale").Update(context.Background(), c.dep(), client.WithSubResourceBody(scale)); err != nil {
		c.t.Fatal(err)
	}
}

// patchDeployment sends a client-side patch as manager would (kubectl set
// env sends a strategic merge patch as "kubectl-set").
func (c *cluster) patchDeployment(manager string, pt types.PatchType, patch string) {
	c.t.Helper()
	if err := env.Client.Patch(context.Background(), c.dep(), client.RawPatch(pt, []byte(patch)), client.FieldOwner(manager)); err != nil {
		c.t.Fatal(err)
	}
}

// applyAs server-side applies a Deployment as manager with force, as Flux's
// kustomize-controller does.
func (c *cluster) applyAs(manager, obj string) {
	c.t.Helper()
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON([]byte(obj)); err != nil {
		c.t.Fatal(err)
	}
	u.SetNamespace(c.ns)
	if err := env.Client.Patch(context.Background(), u, client.Apply, client.FieldOwner(manager), client.ForceOwnership); err != nil {
		c.t.Fatal(err)
	}
}

var replicasPath = fieldpath.MakePathOrDie("spec", "replicas")

// deleteTarget deletes the target Deployment.
func (c *cluster) deleteTarget() {
	c.t.Helper()
	if err := env.Client.Delete(context.Background(), c.dep()); err != nil {
		c.t.Fatal(err)
	}
}

// deleteConfigMap deletes a ConfigMap as a user would.
func (c *cluster) deleteConfigMap(name string) {
	c.t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: c.ns, Name: name}}
	if err := env.Client.Delete(context.Background(), cm); err != nil {
		c.t.Fatal(err)
	}
}

func removeEnv(container *corev1.Container) {
	var env []corev1.EnvVar
	for _, e := range container.Env {
		if e.Name != v1alpha1.PreloadEnvVar {
			env = append(env, e)
		}
	}
	container.Env = env
}

// markRolling is a rollout of the current template half done: old pods
// still run.
func (c *cluster) markRolling() {
	c.setDeploymentStatus(func(d *appsv1.Deployment) {
		n := ptr.Deref(d.Spec.Replicas, 1)
		d.Status = appsv1.DeploymentStatus{
			ObservedGeneration: d.Generation,
			Replicas:           n + 1, UpdatedReplicas: 1, ReadyReplicas: n, AvailableReplicas: n, UnavailableReplicas: 1,
			Conditions: []appsv1.DeploymentCondition{
				{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable"},
				{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "ReplicaSetUpdated"},
			},
		}
	})
}

// markScaling is a Deployment bringing up pods of its current template (a
// scale-up, minReadySeconds): every pod is updated, only available of them
// are available, and with maxUnavailable 0 the controller calls the
// Deployment unavailable.
func (c *cluster) markScaling(available int32) {
	c.setDeploymentStatus(func(d *appsv1.Deployment) {
		n := ptr.Deref(d.Spec.Replicas, 1)
		d.Status = appsv1.DeploymentStatus{
			ObservedGeneration: d.Generation, Replicas: n, UpdatedReplicas: n, ReadyReplicas: n,
			AvailableReplicas: available, UnavailableReplicas: n - available,
			Conditions: []appsv1.DeploymentCondition{
				{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionFalse, Reason: "MinimumReplicasUnavailable"},
				{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "ReplicaSetUpdated"},
			},
		}
	})
}

// markReplicaFailure is a Deployment whose ReplicaSet cannot create the
// pods of a scale-up (a quota): available of them serve.
func (c *cluster) markReplicaFailure(available int32) {
	c.setDeploymentStatus(func(d *appsv1.Deployment) {
		d.Status = appsv1.DeploymentStatus{
			ObservedGeneration: d.Generation, Replicas: available, UpdatedReplicas: available, ReadyReplicas: available,
			AvailableReplicas: available, UnavailableReplicas: ptr.Deref(d.Spec.Replicas, 1) - available,
			Conditions: []appsv1.DeploymentCondition{
				{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionFalse, Reason: "MinimumReplicasUnavailable"},
				{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "ReplicaSetUpdated"},
				{Type: appsv1.DeploymentReplicaFailure, Status: corev1.ConditionTrue, Reason: "FailedCreate"},
			},
		}
	})
}

// markUnavailable is a Deployment that lost its pods without a rollout.
func (c *cluster) markUnavailable() {
	c.setDeploymentStatus(func(d *appsv1.Deployment) {
		n := ptr.Deref(d.Spec.Replicas, 1)
		d.Status = appsv1.DeploymentStatus{
			ObservedGeneration: d.Generation, Replicas: n, UpdatedReplicas: n, UnavailableReplicas: n,
			Conditions: []appsv1.DeploymentCondition{
				{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionFalse, Reason: "MinimumReplicasUnavailable"},
				{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetAvailable"},
			},
		}
	})
}

// readyAt drives the fixture to Ready on version.
func (c *cluster) readyAt(version string) {
	c.t.Helper()
	if c.obj.Spec.Version != version {
		c.setVersion(version)
	}
	c.pass()
	c.markReady()
	if p := c.pass(); p.Status.Phase != v1alpha1.PhaseReady {
		c.t.Fatalf("not Ready on %s: %v", version, condSummary(p.Status))
	}
}

// failRollout sets version, lets its rollout exceed the deadline and runs
// the passes that react to it: the one that records the rollback and the
// one that applies it (or the one that fails, with nothing retained).
func (c *cluster) failRollout(version string) {
	c.t.Helper()
	c.setVersion(version)
	c.pass()
	c.markFailed()
	if p := c.pass(); p.Requeue {
		c.pass()
	}
}

// pointedVersion is the preload version the Deployment's pods would load.
func (c *cluster) pointedVersion() string {
	name := pointedConfigMap(c.dep(), v1alpha1.DefaultContainerName)
	cm, ok := c.configMaps()[name]
	if !ok {
		return ""
	}
	return cm.Data[v1alpha1.PreloadEnvVar]
}

func assertStrings(t testing.TB, what string, got, want []string) {
	t.Helper()
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s = %q, want %q", what, got, want)
	}
}
