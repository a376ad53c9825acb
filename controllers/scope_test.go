package controllers_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
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
	a, b := startTwoShards(t, ns)
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

// TestShardsSplitTheBakingPods runs two shards as TestShardsSplitTheTargets
// does, each with a model that bakes. The pods carry their model's shard
// label from the pod template (the operator put it there with the apply
// that rolled them), so each shard's pod store holds its own model's pods
// only. The model of shard a then moves to the main shard in the middle
// of its bake: no pod rolls, its pods keep shard a's label, and the main
// shard, whose store cannot see them, reads them from the API server in
// each pass of the bake: a pod OOM-killed after the move fails the bake
// (the model's first version, so Failed).
func TestShardsSplitTheBakingPods(t *testing.T) {
	ns := newNamespace(t)
	a, b := startTwoShards(t, ns)
	pods := map[string]string{}
	for _, name := range []string{"moved", "stays"} {
		createDeployment(t, chartDeployment(ns, name, 1))
		m := newModel(ns, name, "OpenMed/pii-v1")
		m.Spec.RolloutStrategy.BakeSeconds = ptr.To[int32](600)
		if name == "moved" {
			m.Labels = map[string]string{shardKey: "a"}
		}
		createModel(t, m)
		var d *appsv1.Deployment
		eventually(t, name+" pointed with the bake label", func() (bool, string) {
			d = getDeployment(t, ns, name)
			return preload(d) != nil && d.Spec.Template.Labels[v1alpha1.BakeLabel] == "true", labels.FormatLabels(d.Spec.Template.Labels)
		})
		if v, ok := d.Spec.Template.Labels[shardKey]; (name == "moved") != ok || (ok && v != "a") {
			t.Fatalf("%s: template labels %v", name, d.Spec.Template.Labels)
		}
		pods[name] = createTemplatePod(t, d)
		updateDeploymentStatus(t, ns, name, rolloutComplete)
		eventually(t, name+" baking", func() (bool, string) {
			m := getModel(t, ns, name)
			return m.Status.BakeStartedAt != nil, fmt.Sprintf("%s %v", m.Status.Phase, m.Status.Conditions)
		})
	}
	key := func(name string) types.NamespacedName { return types.NamespacedName{Namespace: ns, Name: name} }
	if !a.reconciler.HoldsPod(key(pods["moved"])) || a.reconciler.HoldsPod(key(pods["stays"])) {
		t.Errorf("shard a's pod store: want %s only", pods["moved"])
	}
	if !b.reconciler.HoldsPod(key(pods["stays"])) || b.reconciler.HoldsPod(key(pods["moved"])) {
		t.Errorf("main shard's pod store: want %s only", pods["stays"])
	}
	if q := append(a.writes.queriesOf("/api/v1/namespaces/"+ns+"/pods"), b.writes.queriesOf("/api/v1/namespaces/"+ns+"/pods")...); len(q) != 0 {
		t.Errorf("pods listed from the API server while the stores see them: %v", q)
	}

	// Move the baking model to the main shard.
	before := getDeployment(t, ns, "moved")
	patchModel(t, ns, "moved", func(m *v1alpha1.OpenMedModel) { delete(m.Labels, shardKey) })
	eventually(t, "moved handed over", func() (bool, string) {
		d := getDeployment(t, ns, "moved")
		_, labelled := d.Labels[shardKey]
		return !labelled && b.reconciler.HoldsDeployment(key("moved")), labels.FormatLabels(d.Labels)
	})
	after := getDeployment(t, ns, "moved")
	if after.Generation != before.Generation || after.Spec.Template.Labels[shardKey] != "a" {
		t.Fatalf("the move changed the template (generation %d -> %d, labels %v): the pods would roll",
			before.Generation, after.Generation, after.Spec.Template.Labels)
	}
	eventually(t, "the main shard reads the moved model's pods", func() (bool, string) {
		return len(b.writes.queriesOf("/api/v1/namespaces/"+ns+"/pods")) > 0, ""
	})
	if m := getModel(t, ns, "moved"); m.Status.BakeStartedAt == nil || m.Status.Phase != v1alpha1.PhaseRollingOut {
		t.Fatalf("the moved model stopped baking: %s %v", m.Status.Phase, m.Status.Conditions)
	}
	if b.reconciler.HoldsPod(key(pods["moved"])) {
		t.Error("the main shard's store holds a pod labelled for shard a")
	}
	// The kill reaches the main shard by a list of its own: its store
	// cannot see the pod (a pass of the bake lists them, on a timer,
	// rollout.HiddenPodsRecheck, when nothing else wakes it), and shard a,
	// whose store still holds it, no longer has the model.
	status := func(op *operator) int {
		return len(op.writes.requests(http.MethodPatch, "/openmedmodels/moved/status"))
	}
	statusA, statusB := status(a), status(b)
	setPodStatus(t, ns, pods["moved"], func(p *corev1.Pod) {
		c := &p.Status.ContainerStatuses[0]
		c.RestartCount = 1
		c.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled",
			StartedAt: c.State.Running.StartedAt, FinishedAt: metav1.Now()}
	})
	// The model's first version: nothing retained to roll back to.
	waitFor(t, ns, "moved", v1alpha1.PhaseFailed, v1alpha1.RolloutFailedReason)
	if msgs := recordedEvents(t, ns, "moved", v1alpha1.RolloutFailedReason, 1); len(msgs) != 1 || !strings.Contains(msgs[0], rollout.BakeOOMKilled) {
		t.Errorf("RolloutFailed events %q, want one naming %s", msgs, rollout.BakeOOMKilled)
	}
	if status(a) != statusA || status(b) == statusB {
		t.Errorf("status writes of the moved model after the kill: shard a %d, main shard %d; want the main shard's only",
			status(a)-statusA, status(b)-statusB)
	}
	if m := getModel(t, ns, "stays"); m.Status.BakeStartedAt == nil {
		t.Errorf("the main shard's own model stopped baking: %s %v", m.Status.Phase, m.Status.Conditions)
	}
}

// startTwoShards starts, Flux-style, shard a (sharding.fluxcd.io/key=a)
// and the main shard (the models without the key) in namespace ns.
func startTwoShards(t *testing.T, ns string) (a, main *operator) {
	t.Helper()
	unlabelled, err := labels.Parse("!" + shardKey)
	if err != nil {
		t.Fatal(err)
	}
	return startOperatorShard(t, ns, "", labels.SelectorFromSet(labels.Set{shardKey: "a"})), startOperatorShard(t, ns, "", unlabelled)
}

// TestShardingReconfigurationRollsNoPod: an operator restarted without
// sharding, or with another shard label key, keeps the label its earlier
// configuration put on a Deployment's pod template: its store keeps it
// (the operator's field manager set it), and an apply that does not roll
// the pods anyway (here, new replicas) sends it again at its value, so the
// template does not change. The next version's rollout, which rolls the
// pods anyway, goes without it (and with the new key's value).
func TestShardingReconfigurationRollsNoPod(t *testing.T) {
	const newKey = "shard.example.com/key"
	for _, tc := range []struct {
		name string
		// models is the new configuration's selector (nil: no sharding),
		// labels the model's labels with it.
		models labels.Selector
		labels map[string]string
		// template is the new key's value on the next version's template
		// ("": none).
		template string
		// chart has a chart apply the old key's template label too (the
		// same value): the operator leaves it to the chart at once.
		chart bool
	}{
		{name: "sharding turned off"},
		{name: "the label key changed", models: labels.SelectorFromSet(labels.Set{newKey: "x"}), labels: map[string]string{newKey: "x"}, template: "x"},
		{name: "sharding turned off, the label also the chart's", chart: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := newNamespace(t)
			op := startOperatorShard(t, ns, "", labels.SelectorFromSet(labels.Set{shardKey: "a"}))
			createDeployment(t, chartDeployment(ns, "svc", 2))
			m := newModel(ns, "svc", "OpenMed/pii-v1")
			m.Labels = map[string]string{shardKey: "a"}
			createModel(t, m)
			waitFor(t, ns, "svc", v1alpha1.PhaseRollingOut)
			updateDeploymentStatus(t, ns, "svc", rolloutComplete)
			waitFor(t, ns, "svc", v1alpha1.PhaseReady, v1alpha1.RolloutSucceededReason)
			if tc.chart {
				chart := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "Deployment",
					"metadata": map[string]any{"namespace": ns, "name": "svc"},
					"spec":     map[string]any{"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{shardKey: "a"}}}}}}
				if err := env.Client.Patch(context.Background(), chart, client.Apply, client.FieldOwner("helm")); err != nil {
					t.Fatal(err)
				}
			}
			before := getDeployment(t, ns, "svc")
			if before.Spec.Template.Labels[shardKey] != "a" {
				t.Fatalf("template labels %v after the first rollout", before.Spec.Template.Labels)
			}
			op.stop()

			op = startOperatorShard(t, ns, "", tc.models)
			patchModel(t, ns, "svc", func(m *v1alpha1.OpenMedModel) {
				m.Labels = tc.labels
				m.Spec.Replicas = ptr.To[int32](3)
			})
			eventually(t, "the new replicas applied", func() (bool, string) {
				d := getDeployment(t, ns, "svc")
				return *d.Spec.Replicas == 3, fmt.Sprintf("replicas %d", *d.Spec.Replicas)
			})
			updateDeploymentStatus(t, ns, "svc", rolloutComplete)
			waitFor(t, ns, "svc", v1alpha1.PhaseReady)
			after := getDeployment(t, ns, "svc")
			if !equalTemplates(before, after) {
				t.Fatalf("the pod template changed (the pods would roll): labels %v -> %v", before.Spec.Template.Labels, after.Spec.Template.Labels)
			}
			for k, v := range tc.labels {
				if after.Labels[k] != v {
					t.Errorf("label %s=%q on the Deployment, want %q", k, after.Labels[k], v)
				}
			}
			if !op.reconciler.HoldsDeployment(types.NamespacedName{Namespace: ns, Name: "svc"}) {
				t.Error("the restarted operator's store does not hold the Deployment")
			}
			if owns := operatorNames(after, shardKey); owns == tc.chart {
				t.Errorf("the operator's apply entry names %s: %v, want %v", shardKey, owns, !tc.chart)
			}

			// The next version rolls the pods anyway: the old key goes.
			patchModel(t, ns, "svc", func(m *v1alpha1.OpenMedModel) { m.Spec.Version = "OpenMed/pii-v2" })
			eventually(t, "v2's template applied", func() (bool, string) {
				d := getDeployment(t, ns, "svc")
				_, old := d.Spec.Template.Labels[shardKey]
				return old == tc.chart && d.Spec.Template.Labels[newKey] == tc.template &&
						d.Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation] != before.Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation],
					fmt.Sprintf("template labels %v", d.Spec.Template.Labels)
			})
			updateDeploymentStatus(t, ns, "svc", rolloutComplete)
			if got := waitFor(t, ns, "svc", v1alpha1.PhaseReady, v1alpha1.RolloutSucceededReason); len(got.Status.Corrections) != 0 {
				t.Errorf("corrections %v", got.Status.Corrections)
			}
		})
	}
}

// operatorNames reports whether the operator's apply entry in d's
// managedFields names the field key.
func operatorNames(d *appsv1.Deployment, key string) bool {
	for _, e := range d.ManagedFields {
		if e.Manager == rollout.DefaultFieldManager && e.Operation == metav1.ManagedFieldsOperationApply && e.FieldsV1 != nil {
			return strings.Contains(string(e.FieldsV1.Raw), `"f:`+key+`"`)
		}
	}
	return false
}

// createTemplatePod creates a pod of the Deployment d as its ReplicaSet
// would (the template's labels and annotations, a pod-template-hash, the
// ReplicaSet as controller), Running and Ready; it returns its name.
func createTemplatePod(t *testing.T, d *appsv1.Deployment) string {
	t.Helper()
	hash := strings.TrimPrefix(d.Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation], "sha256:")[:10]
	l := maps.Clone(d.Spec.Template.Labels)
	l[appsv1.DefaultDeploymentUniqueLabelKey] = hash
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: d.Namespace, Name: d.Name + "-" + hash + "-a", Labels: l,
			Annotations:     maps.Clone(d.Spec.Template.Annotations),
			OwnerReferences: []metav1.OwnerReference{templateReplicaSet(t, d, hash)}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: container, Image: "openmed:2.2.0"}}},
	}
	if err := env.Client.Create(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	setPodStatus(t, d.Namespace, p.Name, func(p *corev1.Pod) {
		now := metav1.Now()
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: container, Image: "openmed:2.2.0", Ready: true, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}}
	})
	return p.Name
}

// setPodStatus plays the kubelet for the pod name.
func setPodStatus(t *testing.T, ns, name string, mutate func(*corev1.Pod)) {
	t.Helper()
	p := &corev1.Pod{}
	if err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, p); err != nil {
		t.Fatal(err)
	}
	mutate(p)
	if err := env.Client.Status().Update(context.Background(), p); err != nil {
		t.Fatal(err)
	}
}
