package rollout

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions/check"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// Versions of the reference test suite.
const (
	v1 = "OpenMed/synthetic-pii-v1"
	v2 = "OpenMed/synthetic-pii-v2"
	v3 = "OpenMed/synthetic-pii-v3"
)

// clock is the reference suite's fixed clock.
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

// fixtureModel is the reference fixture resource, defaulted as the API
// server would store it.
func fixtureModel(t testing.TB) *v1alpha1.OpenMedModel {
	obj := &v1alpha1.OpenMedModel{}
	readYAML(t, "model.yaml", obj)
	obj.Default()
	return obj
}

func fixtureDeployment(t testing.TB) *appsv1.Deployment {
	dep := &appsv1.Deployment{}
	readYAML(t, "deployment.yaml", dep)
	return dep
}

// fluxChecker applies Flux's rules for a finished reconciliation status.
var fluxChecker = func() *check.Checker {
	c := check.NewChecker(nil, &check.Conditions{NegativePolarity: []string{
		v1alpha1.StalledCondition, v1alpha1.ReconcilingCondition, v1alpha1.DegradedCondition, v1alpha1.RolledBackCondition,
	}})
	c.DisableFetch = true
	return c
}()

// decide runs Decide and checks, for every call in the package's tests, that
// it is deterministic, leaves its inputs alone and produces a status that
// passes Flux's status rules.
func decide(t testing.TB, obj *v1alpha1.OpenMedModel, obs Observed) Plan {
	t.Helper()
	before, obsBefore := obj.DeepCopy(), deepCopyObserved(obs)
	plan := Decide(obj, obs, Options{})
	again := Decide(obj.DeepCopy(), deepCopyObserved(obs), Options{})
	if !reflect.DeepEqual(plan, again) {
		t.Fatalf("Decide is not deterministic:\n%+v\n%+v", plan, again)
	}
	if !apiequality.Semantic.DeepEqual(before, obj) || !reflect.DeepEqual(obsBefore, obs) {
		t.Fatal("Decide modified its inputs")
	}
	if obj.DeletionTimestamp == nil {
		checkFlux(t, obj, plan.Status)
	}
	return plan
}

func checkFlux(t testing.TB, obj *v1alpha1.OpenMedModel, st v1alpha1.OpenMedModelStatus) {
	t.Helper()
	out := obj.DeepCopy()
	out.Status = st
	if fail, _ := fluxChecker.Check(context.Background(), out); fail != nil {
		t.Fatalf("status breaks Flux's rules: %v\nconditions: %v", fail, condSummary(st))
	}
}

func deepCopyObserved(o Observed) Observed {
	out := Observed{Now: o.Now}
	if o.Deployment != nil {
		out.Deployment = o.Deployment.DeepCopy()
	}
	if o.PreviousTarget != nil {
		out.PreviousTarget = o.PreviousTarget.DeepCopy()
	}
	for i := range o.ConfigMaps {
		out.ConfigMaps = append(out.ConfigMaps, *o.ConfigMaps[i].DeepCopy())
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

// cluster is an in-memory stand-in for what the reconciler does with a plan:
// it applies the pointer the way server-side apply would for the fields the
// operator owns, bumps the Deployment generation on spec changes, creates and
// deletes ConfigMaps, records the applied generation and stores the status.
type cluster struct {
	t      testing.TB
	obj    *v1alpha1.OpenMedModel
	dep    *appsv1.Deployment
	prev   *appsv1.Deployment
	cms    map[string]corev1.ConfigMap
	events []Event
}

func newCluster(t testing.TB) *cluster {
	return &cluster{t: t, obj: fixtureModel(t), dep: fixtureDeployment(t), cms: map[string]corev1.ConfigMap{}}
}

func (c *cluster) observed() Observed {
	obs := Observed{Now: metav1.NewTime(clock)}
	if c.dep != nil {
		obs.Deployment = c.dep.DeepCopy()
	}
	if c.prev != nil {
		obs.PreviousTarget = c.prev.DeepCopy()
	}
	names := make([]string, 0, len(c.cms))
	for n := range c.cms {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		cm := c.cms[n]
		obs.ConfigMaps = append(obs.ConfigMaps, *cm.DeepCopy())
	}
	return obs
}

// decide computes the plan of the next pass without carrying it out.
func (c *cluster) decide() Plan {
	c.t.Helper()
	return decide(c.t, c.obj, c.observed())
}

// pass computes the plan and carries it out.
func (c *cluster) pass() Plan {
	c.t.Helper()
	plan := c.decide()
	for _, cm := range plan.EnsureConfigMaps {
		if _, exists := c.cms[cm.Name]; !exists {
			c.cms[cm.Name] = *cm.DeepCopy()
		}
	}
	if plan.ApplyDeployment != nil {
		plan.RecordApplied(c.applyIntent(plan))
	}
	if plan.Release != nil {
		c.releaseDeployment(c.dep)
	}
	if plan.ReleasePrevious != nil {
		c.releaseDeployment(c.prev)
	}
	for _, name := range plan.PruneConfigMaps {
		delete(c.cms, name)
	}
	c.obj.Status = plan.Status
	c.events = append(c.events, plan.Events...)
	return plan
}

// applyIntent merges the partial object into the Deployment and returns the
// new generation, as the API server would.
func (c *cluster) applyIntent(plan Plan) int64 {
	c.t.Helper()
	partial := &appsv1.Deployment{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(plan.ApplyDeployment.Object, partial); err != nil {
		c.t.Fatal(err)
	}
	if partial.Name != c.dep.Name {
		c.t.Fatalf("apply to %q, but the target is %q", partial.Name, c.dep.Name)
	}
	before := c.dep.Spec.DeepCopy()
	d := c.dep
	if d.Annotations == nil {
		d.Annotations = map[string]string{}
	}
	for k, v := range partial.Annotations {
		d.Annotations[k] = v
	}
	if partial.Spec.Replicas != nil {
		d.Spec.Replicas = partial.Spec.Replicas
	}
	d.Spec.ProgressDeadlineSeconds = partial.Spec.ProgressDeadlineSeconds
	d.Spec.Strategy = partial.Spec.Strategy
	if d.Spec.Template.Annotations == nil {
		d.Spec.Template.Annotations = map[string]string{}
	}
	for k, v := range partial.Spec.Template.Annotations {
		d.Spec.Template.Annotations[k] = v
	}
	for _, pc := range partial.Spec.Template.Spec.Containers {
		// SSA drops the entry from a container the operator no longer
		// targets.
		for i := range d.Spec.Template.Spec.Containers {
			if d.Spec.Template.Spec.Containers[i].Name != pc.Name {
				removeEnv(&d.Spec.Template.Spec.Containers[i])
			}
		}
		live := findContainer(d, pc.Name)
		replaced := false
		for i := range live.Env {
			if live.Env[i].Name == v1alpha1.PreloadEnvVar {
				live.Env[i] = pc.Env[0]
				replaced = true
			}
		}
		if !replaced {
			live.Env = append(live.Env, pc.Env[0])
		}
	}
	setManager(d, DefaultFieldManager, metav1.ManagedFieldsOperationApply, operatorFields(partial))
	if !apiequality.Semantic.DeepEqual(before, &d.Spec) {
		d.Generation++
	}
	return d.Generation
}

// releaseDeployment carries out a release: the env entry and annotations go,
// Keep's fields stay, the operator's managedFields entry goes.
func (c *cluster) releaseDeployment(d *appsv1.Deployment) {
	delete(d.Annotations, v1alpha1.ModelResourceAnnotation)
	delete(d.Spec.Template.Annotations, v1alpha1.ModelResourceAnnotation)
	delete(d.Spec.Template.Annotations, v1alpha1.ManifestHashAnnotation)
	for i := range d.Spec.Template.Spec.Containers {
		removeEnv(&d.Spec.Template.Spec.Containers[i])
	}
	var kept []metav1.ManagedFieldsEntry
	for _, e := range d.ManagedFields {
		if e.Manager != DefaultFieldManager {
			kept = append(kept, e)
		}
	}
	d.ManagedFields = kept
	d.Generation++
}

func removeEnv(c *corev1.Container) {
	var env []corev1.EnvVar
	for _, e := range c.Env {
		if e.Name != v1alpha1.PreloadEnvVar {
			env = append(env, e)
		}
	}
	c.Env = env
}

// operatorFields is the fieldsV1 of the operator's apply entry for a partial
// Deployment.
func operatorFields(p *appsv1.Deployment) string {
	var spec []string
	if p.Spec.Replicas != nil {
		spec = append(spec, `"f:replicas":{}`)
	}
	spec = append(spec, `"f:progressDeadlineSeconds":{}`)
	if p.Spec.Strategy.RollingUpdate != nil {
		spec = append(spec, `"f:strategy":{"f:type":{},"f:rollingUpdate":{"f:maxSurge":{},"f:maxUnavailable":{}}}`)
	} else {
		spec = append(spec, `"f:strategy":{"f:type":{}}`)
	}
	container := p.Spec.Template.Spec.Containers[0].Name
	spec = append(spec, fmt.Sprintf(`"f:template":{"f:metadata":{"f:annotations":{"f:openmed.ai/model-manifest-hash":{},"f:openmed.ai/model-resource":{}}},`+
		`"f:spec":{"f:containers":{"k:{\"name\":\"%s\"}":{".":{},"f:name":{},"f:env":{"k:{\"name\":\"OPENMED_SERVICE_PRELOAD_MODELS\"}":{".":{},"f:name":{},"f:valueFrom":{"f:configMapKeyRef":{"f:key":{},"f:name":{}}}}}}}}}`, container))
	return `{"f:metadata":{"f:annotations":{"f:openmed.ai/model-resource":{}}},"f:spec":{` + strings.Join(spec, ",") + `}}`
}

// setManager replaces the managedFields entry of manager.
func setManager(d *appsv1.Deployment, manager string, op metav1.ManagedFieldsOperationType, fields string) {
	var out []metav1.ManagedFieldsEntry
	for _, e := range d.ManagedFields {
		if e.Manager != manager {
			out = append(out, e)
		}
	}
	d.ManagedFields = append(out, metav1.ManagedFieldsEntry{
		Manager: manager, Operation: op, APIVersion: "apps/v1", FieldsType: "FieldsV1",
		FieldsV1: &metav1.FieldsV1{Raw: []byte(fields)},
	})
}

// markReady makes the Deployment controller report the rollout complete.
func markReady(d *appsv1.Deployment) {
	n := ptr.Deref(d.Spec.Replicas, 1)
	d.Status = appsv1.DeploymentStatus{
		ObservedGeneration: d.Generation,
		Replicas:           n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n,
		Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetAvailable"}},
	}
}

// markFailed is the reference suite's mark_failed: the deadline passed.
func markFailed(d *appsv1.Deployment) {
	d.Status.ObservedGeneration = d.Generation
	d.Status.UnavailableReplicas = 1
	d.Status.Conditions = []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded"}}
}

// markUnavailable is a Deployment that lost pods without failing.
func markUnavailable(d *appsv1.Deployment) {
	d.Status.ObservedGeneration = d.Generation
	d.Status.ReadyReplicas, d.Status.AvailableReplicas = 0, 0
	d.Status.UnavailableReplicas = ptr.Deref(d.Spec.Replicas, 1)
}

// setVersion edits spec.version, which bumps the generation.
func (c *cluster) setVersion(version string) {
	c.obj.Spec.Version = version
	c.obj.Generation++
}

func (c *cluster) annotate(key, value string) {
	if c.obj.Annotations == nil {
		c.obj.Annotations = map[string]string{}
	}
	if value == "" {
		delete(c.obj.Annotations, key)
		return
	}
	c.obj.Annotations[key] = value
}

// readyAt drives the fixture to Ready on version.
func (c *cluster) readyAt(version string) {
	c.t.Helper()
	if c.obj.Spec.Version != version {
		c.setVersion(version)
	}
	c.pass()
	markReady(c.dep)
	if p := c.pass(); p.Status.Phase != v1alpha1.PhaseReady {
		c.t.Fatalf("not Ready on %s: %v", version, condSummary(p.Status))
	}
}

// failRollout sets version, lets its rollout exceed the deadline and runs
// the pass that reacts to it (an automatic rollback when one is retained).
func (c *cluster) failRollout(version string) {
	c.t.Helper()
	c.setVersion(version)
	c.pass()
	markFailed(c.dep)
	c.pass()
}

// pointedVersion is the preload version the Deployment's pods would load.
func (c *cluster) pointedVersion() string {
	name := pointedConfigMap(c.dep, v1alpha1.DefaultContainerName)
	cm, ok := c.cms[name]
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
