package controllers_test

import (
	"context"
	"net/http"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/rollout"
)

// shardKey is the label Flux's sharding convention selects by.
const shardKey = "sharding.fluxcd.io/key"

// TestCacheHoldsOnlyClaimedDeployments: the operator's Deployment cache
// holds the Deployments it claimed and nothing else. A Deployment no model
// targets is never in it; a target is read from the API server once, by
// the pass that claims it (labelled openmed.ai/claimed on its metadata, not
// on its pod template), and from the cache after that: steady passes read
// nothing.
func TestCacheHoldsOnlyClaimedDeployments(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	op := startOperatorIn(t, ns)
	createDeployment(t, chartDeployment(ns, "bystander", 1))
	createDeployment(t, chartDeployment(ns, "served", 2))
	createModel(t, newModel(ns, "served", "OpenMed/v1"))
	eventually(t, "served claimed", func() (bool, string) {
		d := getDeployment(t, ns, "served")
		return d.Labels[v1alpha1.ClaimedLabel] == "true", "labels: " + labels.FormatLabels(d.Labels)
	})
	updateDeploymentStatus(t, ns, "served", rolloutComplete)
	waitFor(t, ns, "served", v1alpha1.PhaseReady)

	dep := getDeployment(t, ns, "served")
	if _, ok := dep.Spec.Template.Labels[v1alpha1.ClaimedLabel]; ok {
		t.Errorf("the claim label is on the pod template: it would roll the pods")
	}
	if !op.reconciler.HoldsDeployment(client.ObjectKey{Namespace: ns, Name: "served"}) {
		t.Errorf("the claimed Deployment is not in the cache")
	}
	if op.reconciler.HoldsDeployment(client.ObjectKey{Namespace: ns, Name: "bystander"}) {
		t.Errorf("a Deployment no model targets is in the cache")
	}
	if n := op.writes.readsOf("/apis/apps/v1/namespaces/" + ns + "/deployments/served"); n != 1 {
		t.Errorf("the target was read %d times from the API server, want 1 (the claim)", n)
	}
	if n := op.writes.readsOf("/apis/apps/v1/namespaces/" + ns + "/deployments/bystander"); n != 0 {
		t.Errorf("the bystander was read %d times, want 0", n)
	}
	// A steady pass (a status change of the Deployment wakes one) reads
	// from the cache only.
	updateDeploymentStatus(t, ns, "served", func(d *appsv1.Deployment) { d.Status.ObservedGeneration = d.Generation })
	m := getModel(t, ns, "served")
	m.Annotations = map[string]string{"example.com/touch": "1"}
	if err := env.Client.Update(ctx, m); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ns, "served", v1alpha1.PhaseReady)
	if n := op.writes.readsOf("/apis/apps/v1/namespaces/" + ns + "/deployments/served"); n != 1 {
		t.Errorf("after steady passes the target was read %d times, want still 1", n)
	}
}

// TestTargetCreatedAfterTheModel: a model whose target does not exist yet
// waits (TargetNotFound) and claims the Deployment once it appears, although
// no watch event announces a Deployment nobody claimed: the pass is
// repeated with a backoff while the target is outside the cache.
func TestTargetCreatedAfterTheModel(t *testing.T) {
	ns := newNamespace(t)
	startOperatorIn(t, ns)
	createModel(t, newModel(ns, "late", "OpenMed/v1"))
	waitFor(t, ns, "late", v1alpha1.PhasePending, v1alpha1.TargetNotFoundReason)
	createDeployment(t, chartDeployment(ns, "late", 2))
	eventually(t, "late claimed", func() (bool, string) {
		d := getDeployment(t, ns, "late")
		return preload(d) != nil && d.Labels[v1alpha1.ClaimedLabel] == "true", "labels: " + labels.FormatLabels(d.Labels)
	})
}

// TestClaimedBeforeTheLabelIsLabelledWithoutARoll: a Deployment an earlier
// operator version claimed carries the pointer but not openmed.ai/claimed,
// so the label-selected cache does not hold it. The operator reads it,
// recognises its own claim and adds the label: the pod template and the
// Deployment's generation stay as they were (no pod rolls), the model stays
// Ready, and no drift is reported.
func TestClaimedBeforeTheLabelIsLabelledWithoutARoll(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	op := startOperatorIn(t, ns)
	createDeployment(t, chartDeployment(ns, "old", 2))
	createModel(t, newModel(ns, "old", "OpenMed/v1"))
	eventually(t, "old pointed", func() (bool, string) { return preload(getDeployment(t, ns, "old")) != nil, "" })
	updateDeploymentStatus(t, ns, "old", rolloutComplete)
	waitFor(t, ns, "old", v1alpha1.PhaseReady)
	op.stop()

	// What the operator's apply looked like before the label: the same
	// intent without it, by the operator's field manager, so the API
	// server removes the label the operator owned.
	m := getModel(t, ns, "old")
	dep := getDeployment(t, ns, "old")
	cm := pointerConfigMap(t, dep)
	spec := m.Status.LastSuccessfulSpec
	if spec == nil {
		t.Fatal("no lastSuccessfulSpec on a Ready model")
	}
	intent := rollout.DeploymentIntent(*spec, rollout.OwnerKey(m), cm.Name, dep.Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation])
	unstructured.RemoveNestedField(intent.Object, "metadata", "labels")
	if err := env.Client.Patch(ctx, intent, client.Apply, client.FieldOwner(rollout.DefaultFieldManager), client.ForceOwnership); err != nil {
		t.Fatal(err)
	}
	before := getDeployment(t, ns, "old")
	if _, ok := before.Labels[v1alpha1.ClaimedLabel]; ok {
		t.Fatal("the label survived the old-style apply: the setup is wrong")
	}
	reasons := len(eventReasons(t, ns, "old"))

	op = startOperatorIn(t, ns)
	eventually(t, "old labelled", func() (bool, string) {
		d := getDeployment(t, ns, "old")
		return d.Labels[v1alpha1.ClaimedLabel] == "true", "labels: " + labels.FormatLabels(d.Labels)
	})
	after := getDeployment(t, ns, "old")
	if after.Generation != before.Generation {
		t.Errorf("generation %d -> %d: labelling changed the spec", before.Generation, after.Generation)
	}
	if !equalTemplates(before, after) {
		t.Errorf("the pod template changed: the pods would roll")
	}
	got := waitFor(t, ns, "old", v1alpha1.PhaseReady)
	if len(got.Status.Corrections) != 0 {
		t.Errorf("corrections recorded for the label: %v", got.Status.Corrections)
	}
	if r := eventReasons(t, ns, "old")[reasons:]; contains(r, v1alpha1.DriftCorrectedReason) {
		t.Errorf("a drift event for the label: %v", r)
	}
	if n := op.writes.readsOf("/apis/apps/v1/namespaces/" + ns + "/deployments/old"); n != 1 {
		t.Errorf("the operator read the Deployment %d times, want 1", n)
	}
}

// equalTemplates compares the pod templates of two versions of a
// Deployment.
func equalTemplates(a, b *appsv1.Deployment) bool {
	return apiequality.Semantic.DeepEqual(a.Spec.Template, b.Spec.Template)
}

// TestShardsSplitTheTargets runs two shards of the operator in one
// namespace, Flux-style: one selects sharding.fluxcd.io/key=a, the main one
// the models without the key. A model of shard a has its Deployment and
// manifest ConfigMap labelled a, so only shard a's caches hold them. Moving
// the model to the main shard (removing its label) hands everything over:
// the main shard claims the Deployment (the label goes, the operator's
// field manager owned it), relabels the ConfigMap, no pod rolls, and there
// is one owner throughout; shard a writes nothing for the model once it
// left.
func TestShardsSplitTheTargets(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	shardA := labels.SelectorFromSet(labels.Set{shardKey: "a"})
	main, err := labels.Parse("!" + shardKey)
	if err != nil {
		t.Fatal(err)
	}
	a := startOperatorShard(t, ns, "", shardA)
	b := startOperatorShard(t, ns, "", main)
	createDeployment(t, chartDeployment(ns, "moved", 2))
	createDeployment(t, chartDeployment(ns, "stays", 2))
	moved := newModel(ns, "moved", "OpenMed/v1")
	moved.Labels = map[string]string{shardKey: "a"}
	createModel(t, moved)
	createModel(t, newModel(ns, "stays", "OpenMed/v1"))
	for _, name := range []string{"moved", "stays"} {
		eventually(t, name+" pointed", func() (bool, string) { return preload(getDeployment(t, ns, name)) != nil, "" })
		updateDeploymentStatus(t, ns, name, rolloutComplete)
		waitFor(t, ns, name, v1alpha1.PhaseReady)
	}

	key := func(name string) client.ObjectKey { return client.ObjectKey{Namespace: ns, Name: name} }
	holds := func(op *operator, obj client.Object, name string) bool {
		switch obj.(type) {
		case *appsv1.Deployment:
			return op.reconciler.HoldsDeployment(key(name))
		case *corev1.ConfigMap:
			return op.reconciler.HoldsConfigMap(key(name))
		}
		return op.cache.Get(ctx, key(name), obj) == nil
	}
	dep := getDeployment(t, ns, "moved")
	if dep.Labels[shardKey] != "a" || dep.Labels[v1alpha1.ClaimedLabel] != "true" {
		t.Errorf("shard a's Deployment labels: %v", dep.Labels)
	}
	cm := pointerConfigMap(t, dep)
	if cm.Labels[shardKey] != "a" {
		t.Errorf("shard a's ConfigMap labels: %v", cm.Labels)
	}
	switch {
	case !holds(a, &appsv1.Deployment{}, "moved") || holds(a, &appsv1.Deployment{}, "stays"):
		t.Errorf("shard a's cache: want Deployment moved only")
	case !holds(b, &appsv1.Deployment{}, "stays") || holds(b, &appsv1.Deployment{}, "moved"):
		t.Errorf("main shard's cache: want Deployment stays only")
	case !holds(a, &corev1.ConfigMap{}, cm.Name) || holds(b, &corev1.ConfigMap{}, cm.Name):
		t.Errorf("ConfigMap %s: want in shard a's cache only", cm.Name)
	}
	// Shard a's passes see the shard label on the ConfigMap they cached:
	// none labels it again (a Ready pass reads the manifest ConfigMap).
	if p := a.writes.requests(http.MethodPatch, "/configmaps/"+cm.Name); len(p) != 0 {
		t.Errorf("shard a patched its model's ConfigMap %d times: %v", len(p), p)
	}

	// Move the model to the main shard.
	before := getDeployment(t, ns, "moved")
	writesA, _ := a.writes.snapshot()
	m := getModel(t, ns, "moved")
	delete(m.Labels, shardKey)
	if err := env.Client.Update(ctx, m); err != nil {
		t.Fatal(err)
	}
	eventually(t, "moved handed over", func() (bool, string) {
		d := getDeployment(t, ns, "moved")
		_, labelled := d.Labels[shardKey]
		c := &corev1.ConfigMap{}
		if err := env.Client.Get(ctx, key(cm.Name), c); err != nil {
			return false, err.Error()
		}
		_, cmLabelled := c.Labels[shardKey]
		return !labelled && !cmLabelled && holds(b, &appsv1.Deployment{}, "moved") && holds(b, &corev1.ConfigMap{}, cm.Name),
			"Deployment labels " + labels.FormatLabels(d.Labels) + ", ConfigMap labels " + labels.FormatLabels(c.Labels)
	})
	after := getDeployment(t, ns, "moved")
	if after.Generation != before.Generation || !equalTemplates(before, after) {
		t.Errorf("the move changed the Deployment's spec (generation %d -> %d): the pods would roll", before.Generation, after.Generation)
	}
	if owner := after.Annotations[v1alpha1.ModelResourceAnnotation]; owner != ns+"/moved" {
		t.Errorf("owner after the move: %q", owner)
	}
	var entries int
	for _, e := range after.ManagedFields {
		if e.Manager == rollout.DefaultFieldManager && e.Operation == metav1.ManagedFieldsOperationApply {
			entries++
		}
	}
	if entries != 1 {
		t.Errorf("%d apply entries of the operator after the move, want 1", entries)
	}
	got := waitFor(t, ns, "moved", v1alpha1.PhaseReady)
	// The ConfigMap labelled for shard a is the model's, not a removed one.
	if len(got.Status.Corrections) != 0 {
		t.Errorf("corrections after the move: %v", got.Status.Corrections)
	}
	if r := eventReasons(t, ns, "moved"); contains(r, v1alpha1.DriftCorrectedReason) {
		t.Errorf("drift reported for the move: %v", r)
	}
	eventually(t, "shard a dropped the Deployment", func() (bool, string) {
		return !holds(a, &appsv1.Deployment{}, "moved"), ""
	})
	if n, _ := a.writes.snapshot(); n != writesA {
		t.Errorf("shard a wrote %d times after the model left it", n-writesA)
	}
}
