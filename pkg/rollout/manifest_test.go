package rollout

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/target"
)

// replaceConfigMap deletes the manifest ConfigMap name and creates it again
// under the same name, owned by the model and immutable, with data, as
// whoever may delete and create ConfigMaps in the namespace could.
func (c *cluster) replaceConfigMap(name string, data map[string]string) {
	c.t.Helper()
	ctx := context.Background()
	old := &corev1.ConfigMap{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: c.ns, Name: name}, old); err != nil {
		c.t.Fatal(err)
	}
	c.deleteConfigMap(name)
	forged := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.ns, Name: name, Labels: old.Labels, Annotations: old.Annotations, OwnerReferences: old.OwnerReferences},
		Immutable:  ptr.To(true),
		Data:       data,
	}
	if err := env.Client.Create(ctx, forged); err != nil {
		c.t.Fatal(err)
	}
}

// otherModel is what a replaced ConfigMap holds: another model's pointer.
var otherModel = map[string]string{
	v1alpha1.ManifestKey:   `{"apiVersion":"openmed.ai/v1alpha1","kind":"OpenMedModelManifest","models":[{"family":"PII","tier":"Small","version":"Someone/else"}]}` + "\n",
	v1alpha1.PreloadEnvVar: "Someone/else",
}

// TestManifestVerified covers what a manifest ConfigMap must hold before
// the target points at it: the ConfigMaps the operator wrote are recorded
// by UID with the status write the pass makes anyway, one replaced under
// the same name is read and, holding other content, deleted and written
// again (ManifestMismatch, Stalled, one event), one the operator did not
// write is never pointed at, and names written before the suffix grew are
// kept.
func TestManifestVerified(t *testing.T) {
	t.Run("what the operator wrote is recorded with the next status write, and read by no pass", func(t *testing.T) {
		c := newCluster(t)
		c.readyAt(v1)
		name := c.obj.Status.ManifestConfigMapName
		cm := c.configMaps()[name]
		want := []v1alpha1.VerifiedConfigMap{{Name: name, UID: cm.UID, ManifestHash: ManifestHash(normalize(t, c.obj))}}
		if !slices.Equal(c.obj.Status.VerifiedConfigMaps, want) {
			t.Fatalf("verifiedConfigMaps %v, want %v", c.obj.Status.VerifiedConfigMaps, want)
		}
		// A new process remembers no write: the record says what it holds.
		c.written = nil
		if p := c.decide(); len(p.ReadConfigMaps) != 0 || !equalStatus(p.Status, c.obj.Status) || p.HasChanges() {
			t.Errorf("a steady pass after a restart: reads %v, changes %v, status changed %v", p.ReadConfigMaps, p.HasChanges(), !equalStatus(p.Status, c.obj.Status))
		}
		if len(strings.TrimPrefix(name, "openmed-service-model-manifest-")) != 20 {
			t.Errorf("a new ConfigMap named %s, want a suffix of 20 hex characters", name)
		}
	})

	t.Run("the record rides on a status write the pass makes anyway", func(t *testing.T) {
		c := newCluster(t)
		c.pass()
		// The pass that created the ConfigMap wrote its status before the
		// create answered: no record yet, and a pass that changes nothing
		// else writes none for it.
		if len(c.obj.Status.VerifiedConfigMaps) != 0 {
			t.Fatalf("recorded before the create answered: %v", c.obj.Status.VerifiedConfigMaps)
		}
		if p := c.decide(); !equalStatus(p.Status, c.obj.Status) || len(p.ReadConfigMaps) != 0 {
			t.Errorf("a pass that changes nothing writes the record alone: reads %v", p.ReadConfigMaps)
		}
		c.markReady()
		if p := c.pass(); p.Status.Phase != v1alpha1.PhaseReady || len(p.Status.VerifiedConfigMaps) != 1 {
			t.Errorf("Ready: %s, verified %v", p.Status.Phase, p.Status.VerifiedConfigMaps)
		}
	})

	t.Run("a ConfigMap replaced with other content is deleted and written again, never pointed at", func(t *testing.T) {
		c := newCluster(t)
		c.readyAt(v1)
		name := c.obj.Status.ManifestConfigMapName
		before := c.configMaps()[name]
		c.replaceConfigMap(name, otherModel)
		replaced := c.configMaps()[name]

		c.refresh()
		obs := c.observed()
		first := decideWith(t, c.obj, obs, c.opts)
		if !slices.Equal(first.ReadConfigMaps, []string{name}) || first.HasChanges() {
			t.Fatalf("a ConfigMap of an unrecorded UID: reads %v, changes %v; want it read first, nothing written", first.ReadConfigMaps, first.HasChanges())
		}
		p := c.pass()
		st := p.Status
		if !slices.Equal(p.PruneConfigMaps, []string{name}) || p.ApplyDeployment != nil ||
			!conditionIs(&st, v1alpha1.ReadyCondition, metav1.ConditionFalse, v1alpha1.ManifestMismatchReason) ||
			!conditionIs(&st, v1alpha1.StalledCondition, metav1.ConditionTrue, v1alpha1.ManifestMismatchReason) ||
			!conditionIs(&st, v1alpha1.DegradedCondition, metav1.ConditionTrue, v1alpha1.ManifestMismatchReason) {
			t.Fatalf("prune %v, apply %v, %v", p.PruneConfigMaps, p.ApplyDeployment != nil, condSummary(st))
		}
		if got := kstatusOf(t, c.obj, st); got != "Failed" {
			t.Errorf("kstatus %s, want Failed", got)
		}
		if h := argoFace(t, c.obj, st); h.Code != "Degraded" {
			t.Errorf("Argo CD %s, want Degraded", h.Code)
		}
		assertStrings(t, "events", eventReasons(p.Events), []string{v1alpha1.ManifestMismatchReason})
		if !strings.Contains(p.Events[0].Message, name) || strings.Contains(p.Events[0].Message, "Someone/else") {
			t.Errorf("event %q: want the ConfigMap named, none of its content", p.Events[0].Message)
		}
		if _, ok := c.configMaps()[name]; ok {
			t.Fatal("the replaced ConfigMap was not deleted")
		}
		// Written again by the next pass: Ready, the same name (no roll),
		// the operator's content, a record of the new UID.
		p = c.pass()
		again := c.configMaps()[name]
		if p.Status.Phase != v1alpha1.PhaseReady || again.UID == replaced.UID || again.UID == before.UID ||
			again.Data[v1alpha1.PreloadEnvVar] != v1 || pointedConfigMap(c.dep(), "openmed-service") != name {
			t.Fatalf("after the restore: %s %v, preload %q", p.Status.Phase, condSummary(p.Status), again.Data[v1alpha1.PreloadEnvVar])
		}
		// The record of the new ConfigMap rides on the next status write;
		// a new process before it reads the ConfigMap once and records it.
		if p := c.decide(); len(p.ReadConfigMaps) != 0 || p.HasChanges() {
			t.Errorf("a pass of the same process: reads %v, changes %v", p.ReadConfigMaps, p.HasChanges())
		}
		c.written = nil
		c.refresh()
		if p := decideWith(t, c.obj, c.observed(), c.opts); !slices.Equal(p.ReadConfigMaps, []string{name}) {
			t.Errorf("a new process: reads %v, want %s", p.ReadConfigMaps, name)
		}
		if p := c.pass(); len(p.Status.VerifiedConfigMaps) != 1 || p.Status.VerifiedConfigMaps[0].UID != again.UID || p.HasChanges() {
			t.Errorf("after the read: verifiedConfigMaps %v, changes %v; want the new UID recorded", p.Status.VerifiedConfigMaps, p.HasChanges())
		}
	})

	t.Run("a ConfigMap replaced with the same content is read once and recorded", func(t *testing.T) {
		c := newCluster(t)
		c.readyAt(v1)
		name := c.obj.Status.ManifestConfigMapName
		c.replaceConfigMap(name, c.configMaps()[name].Data)
		uid := c.configMaps()[name].UID
		p := c.pass()
		if p.Status.Phase != v1alpha1.PhaseReady || len(p.PruneConfigMaps) != 0 || len(p.Events) != 0 {
			t.Fatalf("%s %v, prune %v, events %v", p.Status.Phase, condSummary(p.Status), p.PruneConfigMaps, eventReasons(p.Events))
		}
		if rec := p.Status.VerifiedConfigMaps; len(rec) != 1 || rec[0].UID != uid {
			t.Errorf("verifiedConfigMaps %v, want the read UID %s", rec, uid)
		}
		if q := c.decide(); len(q.ReadConfigMaps) != 0 {
			t.Errorf("read again: %v", q.ReadConfigMaps)
		}
	})

	t.Run("a ConfigMap created under the next version's name is not served", func(t *testing.T) {
		c := newCluster(t)
		c.readyAt(v1)
		c.setVersion(v2)
		next := manifestConfigMap(c.obj, normalize(t, c.obj), ManifestConfigMapName(normalize(t, c.obj).ManifestConfigMapName, ManifestHash(normalize(t, c.obj))))
		next.Data = otherModel
		if err := env.Client.Create(context.Background(), next); err != nil {
			t.Fatal(err)
		}
		p := c.pass()
		if p.ApplyDeployment != nil || !slices.Equal(p.PruneConfigMaps, []string{next.Name}) ||
			!conditionIs(&p.Status, v1alpha1.ReadyCondition, metav1.ConditionFalse, v1alpha1.ManifestMismatchReason) {
			t.Fatalf("apply %v, prune %v, %v", p.ApplyDeployment != nil, p.PruneConfigMaps, condSummary(p.Status))
		}
		if pointedConfigMap(c.dep(), "openmed-service") == next.Name {
			t.Fatal("the target points at the ConfigMap the operator did not write")
		}
		p = c.pass()
		if p.ApplyDeployment == nil || c.configMaps()[next.Name].Data[v1alpha1.PreloadEnvVar] != v2 {
			t.Fatalf("the next pass: apply %v, preload %q", p.ApplyDeployment != nil, c.configMaps()[next.Name].Data[v1alpha1.PreloadEnvVar])
		}
	})

	t.Run("a target pointed at a legacy name keeps it", func(t *testing.T) {
		c := newCluster(t)
		c.readyAt(v1)
		spec := normalize(t, c.obj)
		legacy := manifestConfigMap(c.obj, spec, LegacyManifestConfigMapName(spec.ManifestConfigMapName, ManifestHash(spec)))
		if err := env.Client.Create(context.Background(), legacy); err != nil {
			t.Fatal(err)
		}
		// The Deployment as an operator of the shorter names left it: its
		// apply of the same version under the legacy name.
		if _, err := target.Apply(context.Background(), env.Client, DeploymentIntent(spec, c.owner(), legacy.Name, ManifestHash(spec)), DefaultFieldManager, ""); err != nil {
			t.Fatal(err)
		}
		c.markReady()
		generation := c.dep().Generation
		var p Plan
		for range 3 {
			p = c.pass()
		}
		if p.Status.Phase != v1alpha1.PhaseReady || p.Status.ManifestConfigMapName != legacy.Name || c.dep().Generation != generation {
			t.Fatalf("%s, ConfigMap %s, generation %d (was %d): a legacy name must not roll the pods", p.Status.Phase, p.Status.ManifestConfigMapName, c.dep().Generation, generation)
		}
		if _, ok := c.configMaps()[legacy.Name]; !ok {
			t.Error("the legacy ConfigMap was pruned")
		}
	})
}

// equalStatus reports whether two statuses are the same.
func equalStatus(a, b v1alpha1.OpenMedModelStatus) bool {
	return apiequality.Semantic.DeepEqual(a, b)
}

// TestConfigMapWritesCarryTheUID: a relabel and a deletion of a manifest
// ConfigMap carry the UID the pass observed; the real API server refuses
// both for another ConfigMap created under the name since
// (target.ErrReplaced), which keeps its labels and stays, and takes both
// for the one the pass observed.
func TestConfigMapWritesCarryTheUID(t *testing.T) {
	c := newCluster(t)
	c.readyAt(v1)
	ctx := context.Background()
	name := c.obj.Status.ManifestConfigMapName
	old := c.configMaps()[name]
	c.replaceConfigMap(name, otherModel)
	now := c.configMaps()[name]
	shard := "shard-1"
	labels := map[string]*string{"sharding.fluxcd.io/key": &shard}
	if err := target.LabelConfigMap(ctx, env.Client, c.ns, name, old.UID, labels); !errors.Is(err, target.ErrReplaced) {
		t.Errorf("relabel with the replaced ConfigMap's UID: %v, want ErrReplaced", err)
	}
	if err := target.DeleteConfigMap(ctx, env.Client, c.ns, name, old.UID); !errors.Is(err, target.ErrReplaced) {
		t.Errorf("delete with the replaced ConfigMap's UID: %v, want ErrReplaced", err)
	}
	if cm, ok := c.configMaps()[name]; !ok || cm.UID != now.UID || cm.Labels["sharding.fluxcd.io/key"] != "" {
		t.Fatalf("the ConfigMap created since was touched: present %v, labels %v", ok, cm.Labels)
	}
	if err := target.LabelConfigMap(ctx, env.Client, c.ns, name, now.UID, labels); err != nil {
		t.Fatal(err)
	}
	if c.configMaps()[name].Labels["sharding.fluxcd.io/key"] != shard {
		t.Error("the relabel with the right UID did not land")
	}
	if err := target.DeleteConfigMap(ctx, env.Client, c.ns, name, now.UID); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.configMaps()[name]; ok {
		t.Error("the delete with the right UID did not land")
	}
}
