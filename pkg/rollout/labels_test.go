package rollout

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// shardKey is the label Flux's sharding convention selects by.
const shardKey = "sharding.fluxcd.io/key"

// TestBookkeepingLabels: the labels that select a Deployment into the
// operator's caches (ClaimedLabel and the shard labels) are on its
// metadata only. A missing one is put back without a roll and without a
// drift report; the shard's value follows the model; a shard label the
// operator did not set is left alone; a release takes them all.
func TestBookkeepingLabels(t *testing.T) {
	t.Run("a Deployment claimed before the label is labelled without a roll", func(t *testing.T) {
		c := newCluster(t)
		c.readyAt(v1)
		if c.dep().Labels[v1alpha1.ClaimedLabel] != "true" {
			t.Fatalf("claimed Deployment labels %v", c.dep().Labels)
		}
		if _, ok := c.dep().Spec.Template.Labels[v1alpha1.ClaimedLabel]; ok {
			t.Fatal("the claim label is on the pod template")
		}
		p, gen := dropClaimLabel(t, c)
		if c.dep().Generation != gen {
			t.Errorf("generation %d -> %d: the label changed the spec", gen, c.dep().Generation)
		}
		if p.Status.Phase != v1alpha1.PhaseReady || len(p.Events) != 0 || len(p.Status.Corrections) != 0 || len(p.Drift) != 0 {
			t.Errorf("phase %s, events %v, corrections %v, drift %v: want Ready and nothing reported",
				p.Status.Phase, eventReasons(p.Events), p.Status.Corrections, p.Drift)
		}
		if p := c.pass(); p.ApplyDeployment != nil {
			t.Error("the next pass applies again")
		}
	})

	t.Run("a rollout whose Deployment lost the label is judged as if it had it", func(t *testing.T) {
		c := newCluster(t)
		c.readyAt(v1)
		c.setVersion(v2)
		if p := c.pass(); p.ApplyDeployment == nil || p.LabelsOnly {
			t.Fatalf("the rollout's apply: apply %v, labels only %v", p.ApplyDeployment != nil, p.LabelsOnly)
		}
		c.markReady()
		want := c.decide()
		got, gen := dropClaimLabel(t, c)
		if got.Status.Phase != want.Status.Phase {
			t.Errorf("phase %s, want %s as with the label", got.Status.Phase, want.Status.Phase)
		}
		assertStrings(t, "conditions", condSummary(got.Status), condSummary(want.Status))
		if c.dep().Generation != gen {
			t.Errorf("generation %d -> %d: the label changed the spec", gen, c.dep().Generation)
		}
	})

	t.Run("the shard label follows the model, without a roll", func(t *testing.T) {
		c := newCluster(t)
		c.opts.ShardLabels = []string{shardKey}
		c.editModel(func(m *v1alpha1.OpenMedModel) { m.Labels = map[string]string{shardKey: "a"} })
		c.readyAt(v1)
		if got := c.dep().Labels[shardKey]; got != "a" {
			t.Fatalf("shard label %q, want a", got)
		}
		for name, cm := range c.configMaps() {
			if cm.Labels[shardKey] != "a" {
				t.Errorf("ConfigMap %s labels %v", name, cm.Labels)
			}
		}
		gen := c.dep().Generation
		c.editModel(func(m *v1alpha1.OpenMedModel) { m.Labels[shardKey] = "b" })
		if p := c.pass(); c.dep().Labels[shardKey] != "b" || p.Status.Phase != v1alpha1.PhaseReady {
			t.Fatalf("moved to b: label %q, phase %s", c.dep().Labels[shardKey], p.Status.Phase)
		}
		c.editModel(func(m *v1alpha1.OpenMedModel) { delete(m.Labels, shardKey) })
		if p := c.pass(); p.Status.Phase != v1alpha1.PhaseReady {
			t.Fatalf("moved to the main shard: phase %s", p.Status.Phase)
		}
		if v, ok := c.dep().Labels[shardKey]; ok {
			t.Errorf("the operator's shard label %q stayed after the model lost its own", v)
		}
		if c.dep().Generation != gen {
			t.Errorf("generation %d -> %d: the moves changed the spec", gen, c.dep().Generation)
		}
		// A shard label another manager set is theirs.
		c.editDeployment("helm", func(d *appsv1.Deployment) { d.Labels[shardKey] = "x" })
		if p := c.pass(); p.ApplyDeployment != nil {
			t.Error("the operator applies to remove a shard label it did not set")
		}
	})

	// The pods carry the model's shard labels, so that a shard's pod
	// store selects its own models' pods: the template gets them only
	// with an apply that rolls the pods anyway.
	t.Run("the pod template carries the shard label from the apply that rolls it", func(t *testing.T) {
		c := newCluster(t)
		c.opts.ShardLabels = []string{shardKey}
		c.editModel(func(m *v1alpha1.OpenMedModel) { m.Labels = map[string]string{shardKey: "a"} })
		c.readyAt(v1)
		if got := c.dep().Spec.Template.Labels[shardKey]; got != "a" {
			t.Fatalf("template shard label %q after the first rollout, want a", got)
		}
		// A move changes the Deployment's labels, not its template.
		gen := c.dep().Generation
		c.editModel(func(m *v1alpha1.OpenMedModel) { m.Labels[shardKey] = "b" })
		if p := c.pass(); p.Status.Phase != v1alpha1.PhaseReady || (p.ApplyDeployment != nil && !p.LabelsOnly) {
			t.Fatalf("the move: phase %s, a template apply %v", p.Status.Phase, p.ApplyDeployment != nil && !p.LabelsOnly)
		}
		if d := c.dep(); d.Generation != gen || d.Spec.Template.Labels[shardKey] != "a" || d.Labels[shardKey] != "b" {
			t.Fatalf("after the move: generation %d -> %d, template label %q (want a), label %q (want b)",
				gen, d.Generation, d.Spec.Template.Labels[shardKey], d.Labels[shardKey])
		}
		if p := c.pass(); p.ApplyDeployment != nil {
			t.Error("the pass after the move applies again")
		}
		// The next version's template carries the new shard's value.
		c.setVersion(v2)
		c.pass()
		if got := c.dep().Spec.Template.Labels[shardKey]; got != "b" {
			t.Errorf("template shard label %q in v2's rollout, want b", got)
		}
		c.markReady()
		c.pass()
		// Moved to the main shard: the template keeps b until the next
		// version, which goes without it.
		c.editModel(func(m *v1alpha1.OpenMedModel) { delete(m.Labels, shardKey) })
		gen = c.dep().Generation
		c.pass()
		if d := c.dep(); d.Generation != gen || d.Spec.Template.Labels[shardKey] != "b" {
			t.Fatalf("moved to the main shard: generation %d -> %d, template label %q (want b)", gen, d.Generation, d.Spec.Template.Labels[shardKey])
		}
		c.setVersion(v1)
		c.pass()
		if v, ok := c.dep().Spec.Template.Labels[shardKey]; ok {
			t.Errorf("template shard label %q stayed in the rollout of a model without one", v)
		}
		if p := c.pass(); len(p.Drift) != 0 || len(p.Status.Corrections) != 0 {
			t.Errorf("drift %v, corrections %v", p.Drift, p.Status.Corrections)
		}
	})

	t.Run("a shard label another manager set on the template stays theirs", func(t *testing.T) {
		c := newCluster(t)
		c.opts.ShardLabels = []string{shardKey}
		c.editModel(func(m *v1alpha1.OpenMedModel) { m.Labels = map[string]string{shardKey: "a"} })
		c.readyAt(v1)
		// A chart's common labels, on the pod template (the pods roll:
		// the chart's doing).
		c.editDeployment("helm", func(d *appsv1.Deployment) { d.Spec.Template.Labels[shardKey] = "x" })
		c.pass()
		c.setVersion(v2)
		c.pass()
		d := c.dep()
		if got := d.Spec.Template.Labels[shardKey]; got != "x" {
			t.Errorf("template shard label %q after the operator's rollout, want the chart's x", got)
		}
		if valueSetters(d.ManagedFields, templateLabelPath(shardKey))[DefaultFieldManager] {
			t.Error("the operator took the chart's template label over")
		}
	})

	t.Run("a template label of an earlier sharding stays until an apply that rolls", func(t *testing.T) {
		const newKey = "shard.example.com/key"
		for _, tc := range []struct {
			name string
			// shardLabels is the new configuration's; model the labels
			// the model gets with it.
			shardLabels []string
			model       map[string]string
			// template is the new key's value the next version's
			// template carries ("": none).
			template string
			// chart has a chart apply the old key's label on the template
			// too (the same value, so both own it): it stays, the chart's.
			chart bool
		}{
			{name: "sharding turned off"},
			{name: "the label key changed", shardLabels: []string{newKey}, model: map[string]string{newKey: "x"}, template: "x"},
			{name: "sharding turned off, the label also the chart's", chart: true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				c := newCluster(t)
				c.opts.ShardLabels = []string{shardKey}
				c.editModel(func(m *v1alpha1.OpenMedModel) { m.Labels = map[string]string{shardKey: "a"} })
				c.readyAt(v1)
				template := c.dep().Spec.Template
				if template.Labels[shardKey] != "a" {
					t.Fatalf("template labels %v after the first rollout", template.Labels)
				}
				if tc.chart {
					c.applyAs("helm", `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"openmed-service"},"spec":{"template":{"metadata":{"labels":{"`+shardKey+`":"a"}}}}}`)
					template = c.dep().Spec.Template
				}
				// The operator restarts with the new configuration, and the
				// model's replicas change: an apply that does not roll.
				c.opts.ShardLabels = tc.shardLabels
				gen := c.dep().Generation
				c.editModel(func(m *v1alpha1.OpenMedModel) {
					m.Labels = tc.model
					m.Spec.Replicas = ptr.To[int32](3)
				})
				c.pass()
				d := c.dep()
				if d.Generation == gen || *d.Spec.Replicas != 3 {
					t.Fatalf("replicas %d, generation %d -> %d: the change was not applied", *d.Spec.Replicas, gen, d.Generation)
				}
				if !equality.Semantic.DeepEqual(d.Spec.Template, template) {
					t.Fatalf("the pod template changed (the pods roll): labels %v -> %v", template.Labels, d.Spec.Template.Labels)
				}
				if owns := valueSetters(d.ManagedFields, templateLabelPath(shardKey))[DefaultFieldManager]; owns == tc.chart {
					t.Errorf("the operator owns the old key's template label: %v, want %v", owns, !tc.chart)
				}
				for k, v := range tc.model {
					if d.Labels[k] != v {
						t.Errorf("label %s=%q on the Deployment, want %q", k, d.Labels[k], v)
					}
				}
				if p := c.pass(); p.ApplyDeployment != nil || len(p.Drift) != 0 {
					t.Errorf("the next pass applies %v, drift %v", p.ApplyDeployment != nil, p.Drift)
				}
				// The next version's apply rolls the pods anyway: the old
				// key goes with it.
				c.setVersion(v2)
				c.pass()
				d = c.dep()
				if v, ok := d.Spec.Template.Labels[shardKey]; ok != tc.chart {
					t.Errorf("the old key's template label %q (there: %v) in v2's rollout, want there: %v (the chart's)", v, ok, tc.chart)
				}
				if got := d.Spec.Template.Labels[newKey]; got != tc.template {
					t.Errorf("template label %s=%q in v2's rollout, want %q", newKey, got, tc.template)
				}
				c.markReady()
				if p := c.pass(); p.Status.Phase != v1alpha1.PhaseReady || len(p.Drift) != 0 || len(p.Status.Corrections) != 0 {
					t.Errorf("phase %s, drift %v, corrections %v", p.Status.Phase, p.Drift, p.Status.Corrections)
				}
			})
		}
	})

	t.Run("a rolled-back model gets the label back without reopening the rollback", func(t *testing.T) {
		c := newCluster(t)
		c.readyAt(v1)
		c.failRollout(v2)
		if c.obj.Status.Phase != v1alpha1.PhaseRolledBack {
			t.Fatalf("phase %s after the failed rollout", c.obj.Status.Phase)
		}
		c.markReady()
		for i := 0; i < 3; i++ {
			c.pass()
		}
		before := condSummary(c.obj.Status)
		p, _ := dropClaimLabel(t, c)
		assertStrings(t, "conditions", condSummary(p.Status), before)
		if len(p.Events) != 0 {
			t.Errorf("events %v", eventReasons(p.Events))
		}
		if p := c.pass(); len(p.Events) != 0 {
			t.Errorf("the next pass announces %v", eventReasons(p.Events))
		}
	})

	t.Run("a release leaves a shard label another manager also set", func(t *testing.T) {
		c := newCluster(t)
		c.opts.ShardLabels = []string{shardKey}
		c.editModel(func(m *v1alpha1.OpenMedModel) { m.Labels = map[string]string{shardKey: "a"} })
		c.readyAt(v1)
		c.applyAs("kustomize-controller", `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"openmed-service","labels":{"`+shardKey+`":"a"}}}`)
		c.deleteModel()
		for i := 0; i < 5 && c.dep().Annotations[v1alpha1.ModelResourceAnnotation] != ""; i++ {
			c.pass()
		}
		if v := c.dep().Labels[shardKey]; v != "a" {
			t.Errorf("shard label %q after the release, want kustomize's a", v)
		}
		if _, ok := c.dep().Labels[v1alpha1.ClaimedLabel]; ok {
			t.Error("the claim label stayed")
		}
	})

	t.Run("a release takes the labels", func(t *testing.T) {
		c := newCluster(t)
		c.opts.ShardLabels = []string{shardKey}
		c.editModel(func(m *v1alpha1.OpenMedModel) { m.Labels = map[string]string{shardKey: "a"} })
		c.readyAt(v1)
		c.deleteModel()
		for i := 0; i < 5 && c.dep().Annotations[v1alpha1.ModelResourceAnnotation] != ""; i++ {
			c.pass()
		}
		d := c.dep()
		if _, ok := d.Annotations[v1alpha1.ModelResourceAnnotation]; ok {
			t.Fatal("not released")
		}
		for _, k := range []string{v1alpha1.ClaimedLabel, shardKey} {
			if v, ok := d.Labels[k]; ok {
				t.Errorf("label %s=%s left after the release", k, v)
			}
		}
	})
}

// dropClaimLabel removes the claim label as `kubectl label` does, runs a
// pass and fails unless that pass put the label back by a labels-only
// write; it returns the pass and the Deployment's generation before it.
func dropClaimLabel(t *testing.T, c *cluster) (Plan, int64) {
	t.Helper()
	c.patchDeployment("kubectl-label", types.MergePatchType, `{"metadata":{"labels":{"`+v1alpha1.ClaimedLabel+`":null}}}`)
	gen := c.dep().Generation
	p := c.pass()
	if p.ApplyDeployment == nil || !p.LabelsOnly || c.dep().Labels[v1alpha1.ClaimedLabel] != "true" {
		t.Fatalf("label not put back as a labels-only write: apply %v, labels only %v, labels %v",
			p.ApplyDeployment != nil, p.LabelsOnly, c.dep().Labels)
	}
	return p, gen
}
