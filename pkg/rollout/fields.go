package rollout

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// pointer is what the operator writes to a Deployment for one spec: the
// values DeploymentIntent sends, in typed form for comparison.
type pointer struct {
	spec         v1alpha1.NormalizedSpec
	owner        string
	cmName       string
	manifestHash string
	// bakeLabel is whether the pod template carries the bake label (see
	// withLive).
	bakeLabel bool
	// shard holds the model's values of the shard label keys it has, unset
	// the keys it lacks (Options.ShardLabels); manager is the operator's
	// field manager, which tells a label the operator set from another's.
	shard   map[string]string
	unset   []string
	manager string
	// stale are the pod template's label keys that the operator's field
	// manager set under a shard label key the operator no longer has (its
	// selector's key changed, or sharding was turned off), sorted; see
	// withTemplateShard.
	stale []string
	// templateShard holds the shard labels the pod template carries after
	// the apply (see withLive): the pods get them, so a shard's pod store
	// selects its own models' pods.
	templateShard map[string]string
	// gate is whether the pod template carries the operator's readiness
	// gate (v1alpha1.VerifiedCondition); otherGates are the template's
	// other readiness gates, gateOwned whether the operator's field
	// manager set the template's readinessGates (see withGate).
	gate       bool
	otherGates []any
	gateOwned  bool
}

// newPointer is the intent for spec, owned by owner (the OwnerKey), pointing
// at the spec's content-addressed manifest ConfigMap.
func newPointer(spec v1alpha1.NormalizedSpec, owner string) pointer {
	hash := ManifestHash(spec)
	return pointer{spec: spec, owner: owner, cmName: ManifestConfigMapName(spec.ManifestConfigMapName, hash), manifestHash: hash,
		bakeLabel: spec.RolloutStrategy.BakeSeconds > 0}
}

// withLive settles the bake label against the live Deployment. A spec that
// bakes (bakes: Bakes) always gets the label, so the guard cannot be
// switched off by accident: bakeSeconds set while its rollout is in flight,
// or the label stripped from the template, puts it (back) on, and the pods
// roll to carry it. A template of a version that does not bake and that
// the apply leaves as it is (the same manifest hash) keeps what it has, so
// turning bakeSeconds on or off for a version that served never rolls the
// pods by itself; one the apply changes anyway gets the label exactly when
// the spec bakes.
func (p pointer) withLive(live *appsv1.Deployment, bakes bool) pointer {
	switch {
	case bakes:
		p.bakeLabel = true
	case live != nil && live.Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation] == p.manifestHash:
		_, p.bakeLabel = live.Spec.Template.Labels[v1alpha1.BakeLabel]
	}
	return p.withTemplateShard(live)
}

// withLiveGate takes the readiness gates as the live template has them,
// before withLive: what the template carries is what the apply keeps
// unless withGate settles otherwise.
func (p pointer) withLiveGate(live *appsv1.Deployment) pointer {
	if live == nil {
		return p
	}
	p.gate, p.otherGates = hasGate(live), otherGates(live)
	p.gateOwned = p.manager != "" && valueSetters(live.ManagedFields, readinessGatesPath)[p.manager]
	return p
}

// withGate settles the operator's readiness gate against the live
// Deployment, after withLive. A model that declares a golden request
// (verifies) gets the gate, and the bake label by which the operator
// watches the pods, with the apply of a version that does not serve yet
// (a new version, a rollback, a rollout in flight whose gate someone
// removed) or with any apply that changes the template anyway: never a
// roll of its own for a version that serves (serving). So turning
// verification on for a version that serves verifies its next one, and
// a gate removed by hand from a serving version comes back with the next;
// turning verification off leaves the gate on the template until an
// apply changes it (the operator then passes those pods without a
// request). readinessGates is an atomic list: the operator sends the
// template's other gates with its own, so a chart's gates stay, and, once
// it set the list, keeps sending them after its own went.
func (p pointer) withGate(live *appsv1.Deployment, verifies, serving bool) pointer {
	if live == nil {
		p.gate = verifies
		p.bakeLabel = p.bakeLabel || verifies
		return p
	}
	switch {
	case p.gate == verifies:
	case verifies && !serving:
		p.gate = true
	case p.templateChanged(live):
		p.gate = verifies
	}
	if p.gate && !p.bakeLabel && (!hasGate(live) || live.Spec.Template.Labels[v1alpha1.BakeLabel] == "true" || p.templateChanged(live)) {
		// The pod store selects the pods by it: it goes on with the
		// gate, or with the apply that changes the template anyway.
		p.bakeLabel = true
	}
	return p
}

// hasGate reports whether d's pod template carries the operator's
// readiness gate.
func hasGate(d *appsv1.Deployment) bool {
	return slices.ContainsFunc(d.Spec.Template.Spec.ReadinessGates, func(g corev1.PodReadinessGate) bool {
		return g.ConditionType == v1alpha1.VerifiedCondition
	})
}

// otherGates are the readiness gates of d's pod template but the
// operator's, in their order.
func otherGates(d *appsv1.Deployment) []any {
	var out []any
	for _, g := range d.Spec.Template.Spec.ReadinessGates {
		if g.ConditionType != v1alpha1.VerifiedCondition {
			out = append(out, map[string]any{"conditionType": string(g.ConditionType)})
		}
	}
	return out
}

var readinessGatesPath = fieldpath.MakePathOrDie("spec", "template", "spec", "readinessGates")

// gateValue is the readinessGates list the apply sends: the template's
// other gates, then the operator's when p.gate; not sent when the
// operator neither has a gate to set nor set the list before, or the list
// would be empty (the operator's ownership goes and the API server
// removes what only it set).
func (p pointer) gateValue() (any, bool) {
	if !p.gate && !p.gateOwned {
		return nil, false
	}
	list := slices.Clone(p.otherGates)
	if p.gate {
		list = append(list, map[string]any{"conditionType": v1alpha1.VerifiedCondition})
	}
	return list, len(list) > 0
}

// withTemplateShard settles the shard labels of the pod template (in a
// shard: Options.ShardLabels). The pods carry them, so a shard's pod store
// selects by them the pods of its own models and no others. A label of the
// template rolls the pods when it changes, so the template gets the model's
// shard labels only when the apply changes the template anyway (another
// version, a rollback, drift put back, the bake label put on); otherwise
// it keeps the values it has, and a model that moves to another shard
// rolls nothing: its pods keep the old shard's value until its next
// version (the new shard reads them from the API server while it bakes,
// Observed.PodsHidden). A label another field manager set on the template
// (a chart's common labels) keeps its value: the operator never takes a
// template label over. A template label the operator set under a key it no
// longer shards by (the selector's key changed, or sharding was turned
// off) is kept at its value by an apply that does not roll the pods (not
// sending it would remove it, and roll them), and left out by the next
// apply that rolls them anyway (removed, unless another manager set it
// too: then it stays theirs).
func (p pointer) withTemplateShard(live *appsv1.Deployment) pointer {
	// Who set a template label, parsed once per key.
	setters := map[string]map[string]bool{}
	settersOf := func(k string) map[string]bool {
		s, ok := setters[k]
		if !ok {
			s = valueSetters(live.ManagedFields, templateLabelPath(k))
			setters[k] = s
		}
		return s
	}
	p.stale = staleTemplateLabels(live, p.shard, p.unset, p.manager, settersOf)
	keys := p.templateKeys()
	if len(keys) == 0 {
		return p
	}
	p.templateShard = nil // not sent: templateChanged then asks about the other fields only
	rolls := live == nil || p.templateChanged(live)
	out := map[string]string{}
	for _, k := range keys {
		have, ok := "", false
		if live != nil {
			have, ok = live.Spec.Template.Labels[k]
		}
		var setters map[string]bool
		if ok {
			setters = settersOf(k)
		}
		want, wanted := p.shard[k]
		switch {
		case slices.Contains(p.stale, k):
			// A key the operator no longer shards by (live has it, the
			// operator set it): kept at its value only by an apply that
			// does not roll the pods and only while the operator alone set
			// it (leaving out a label another manager also set changes
			// nothing).
			if !rolls && len(others(setters, p.manager)) == 0 {
				out[k] = have
			}
		case ok && (!rolls || len(others(setters, p.manager)) > 0):
			// Kept as it is (the apply does not roll the pods, or another
			// manager set it): sent when the operator set it (not sending
			// it would remove it), left to its owner otherwise.
			if setters[p.manager] {
				out[k] = have
			}
		case rolls && wanted:
			out[k] = want
		}
	}
	p.templateShard = out
	return p
}

// staleTemplateLabels returns, sorted, the label keys of live's pod template
// that manager set (settersOf says who set a key) and that are neither the
// operator's own (openmed.ai/) nor a shard label key it has now (those of
// shard and unset): the shard labels of an earlier sharding configuration.
func staleTemplateLabels(live *appsv1.Deployment, shard map[string]string, unset []string, manager string,
	settersOf func(string) map[string]bool) []string {
	if live == nil || manager == "" {
		return nil
	}
	var stale []string
	for k := range live.Spec.Template.Labels {
		if _, ok := shard[k]; ok || strings.HasPrefix(k, v1alpha1.GroupVersion.Group+"/") || slices.Contains(unset, k) {
			continue
		}
		if settersOf(k)[manager] {
			stale = append(stale, k)
		}
	}
	sort.Strings(stale)
	return stale
}

// shardKeys are the shard label keys, the model's and those it lacks,
// sorted.
func (p pointer) shardKeys() []string {
	keys := append(shardKeys(p.shard), p.unset...)
	sort.Strings(keys)
	return keys
}

// templateKeys are the pod template's label keys withTemplateShard settles:
// the shard label keys and the stale ones, sorted.
func (p pointer) templateKeys() []string {
	keys := append(p.shardKeys(), p.stale...)
	sort.Strings(keys)
	return keys
}

// ownedField is one Deployment field the operator owns (docs/spec). The
// table of them, ownedFields, is the one declaration the apply intent, drift
// detection and the release read.
type ownedField struct {
	// name is the display path used in events and status.
	name string
	// path is the field in the apply configuration and in managedFields.
	path fieldpath.Path
	// template is true for fields of the pod template: changing one rolls
	// the pods.
	template bool
	// bookkeeping is true for the labels that select the Deployment into
	// the operator's cache (ClaimedLabel and the shard labels): a missing
	// one is put (back) on by the next pass that applies (a serving or
	// rolling model's, a rollback's), without a roll, and is no drift to
	// report — a Deployment claimed before the label existed
	// lacks it, and nobody's change to the model's serving is undone.
	bookkeeping bool
	// keep is true for fields a release leaves at their live value
	// (replicas, strategy, deadline) instead of removing them.
	keep bool
	// value is the operator's value in the apply configuration; sent is
	// false when the spec leaves the field to others (replicas unset).
	value func(p pointer) (v any, sent bool)
	// holds reports whether the live Deployment has the operator's value.
	holds func(p pointer, live *appsv1.Deployment) bool
	// present reports whether the live Deployment has the field at all, so
	// a missing field can be told from one set to another value.
	present func(p pointer, live *appsv1.Deployment) bool
	// live is the field's live value in apply-configuration form, for the
	// fields a release or a takeover sends at their live value (keep).
	live func(live *appsv1.Deployment) any
}

func annotationPath(parts ...any) fieldpath.Path { return fieldpath.MakePathOrDie(parts...) }

// containerPath is spec.template.spec.containers[name=c].
func containerPath(c string) []any {
	return []any{"spec", "template", "spec", "containers", fieldpath.KeyByFields("name", c)}
}

// envPath is the preload env entry of container c.
func envPath(c string) fieldpath.Path {
	return fieldpath.MakePathOrDie(append(containerPath(c), "env", fieldpath.KeyByFields("name", v1alpha1.PreloadEnvVar))...)
}

// ownedFields lists, in the order events name them, every field the
// operator owns on the target. The table depends on the container (the env
// entry's path) and on the shard labels, not on the rest of the pointer:
// it is built once for each of those and shared (a pass asks for it several
// times, and building it allocated its paths and names each time). Callers
// must not change it.
func ownedFields(p pointer) []ownedField {
	key := fieldTableKey{container: p.spec.TargetRef.ContainerName}
	if len(p.shard) > 0 || len(p.unset) > 0 || len(p.stale) > 0 {
		var b strings.Builder
		for _, k := range shardKeys(p.shard) {
			b.WriteString(k + "=" + p.shard[k] + "\x00")
		}
		for _, k := range p.unset {
			b.WriteString("\x00" + k)
		}
		for _, k := range p.stale {
			b.WriteString("\x01" + k)
		}
		key.labels = b.String()
	}
	fieldTables.Lock()
	defer fieldTables.Unlock()
	if fields, ok := fieldTables.m[key]; ok {
		return fields
	}
	fields := buildOwnedFields(p)
	if fieldTables.m == nil {
		fieldTables.m = map[fieldTableKey][]ownedField{}
	}
	if len(fieldTables.m) < maxFieldTables {
		fieldTables.m[key] = fields
	}
	return fields
}

// fieldTableKey is what an owned-field table depends on: the container and
// the shard labels (keys and values, then the unset keys, then the stale
// template label keys).
type fieldTableKey struct{ container, labels string }

// fieldTables are the tables built so far; maxFieldTables bounds them (a
// table is about 2 KiB; a namespace's models name a handful of containers).
var fieldTables struct {
	sync.Mutex
	m map[fieldTableKey][]ownedField
}

const maxFieldTables = 256

func buildOwnedFields(p pointer) []ownedField {
	container := p.spec.TargetRef.ContainerName
	fields := []ownedField{{
		name:  "metadata.annotations[" + v1alpha1.ModelResourceAnnotation + "]",
		path:  annotationPath("metadata", "annotations", v1alpha1.ModelResourceAnnotation),
		value: func(p pointer) (any, bool) { return p.owner, true },
		holds: func(p pointer, d *appsv1.Deployment) bool {
			return d.Annotations[v1alpha1.ModelResourceAnnotation] == p.owner
		},
		present: func(_ pointer, d *appsv1.Deployment) bool {
			_, ok := d.Annotations[v1alpha1.ModelResourceAnnotation]
			return ok
		},
	}, {
		name: "spec.replicas",
		path: fieldpath.MakePathOrDie("spec", "replicas"),
		keep: true,
		value: func(p pointer) (any, bool) {
			if p.spec.Replicas == nil {
				return nil, false
			}
			return int64(*p.spec.Replicas), true
		},
		holds: func(p pointer, d *appsv1.Deployment) bool {
			return p.spec.Replicas == nil || (d.Spec.Replicas != nil && *d.Spec.Replicas == *p.spec.Replicas)
		},
		present: func(_ pointer, d *appsv1.Deployment) bool { return d.Spec.Replicas != nil },
		live:    func(d *appsv1.Deployment) any { return int64(*d.Spec.Replicas) },
	}, {
		name: "spec.progressDeadlineSeconds",
		path: fieldpath.MakePathOrDie("spec", "progressDeadlineSeconds"),
		keep: true,
		value: func(p pointer) (any, bool) {
			return int64(p.spec.RolloutStrategy.ProgressDeadlineSeconds), true
		},
		holds: func(p pointer, d *appsv1.Deployment) bool {
			return d.Spec.ProgressDeadlineSeconds != nil && *d.Spec.ProgressDeadlineSeconds == p.spec.RolloutStrategy.ProgressDeadlineSeconds
		},
		present: func(_ pointer, d *appsv1.Deployment) bool { return d.Spec.ProgressDeadlineSeconds != nil },
		live:    func(d *appsv1.Deployment) any { return int64(*d.Spec.ProgressDeadlineSeconds) },
	}, {
		name:  "spec.strategy",
		path:  fieldpath.MakePathOrDie("spec", "strategy"),
		keep:  true,
		value: func(p pointer) (any, bool) { return strategyValue(p.spec.RolloutStrategy), true },
		holds: func(p pointer, d *appsv1.Deployment) bool {
			return strategyMatches(d.Spec.Strategy, p.spec.RolloutStrategy)
		},
		present: func(_ pointer, d *appsv1.Deployment) bool { return d.Spec.Strategy.Type != "" },
		live:    func(d *appsv1.Deployment) any { return liveStrategy(d.Spec.Strategy) },
	}, {
		name:     "spec.template.metadata.annotations[" + v1alpha1.ManifestHashAnnotation + "]",
		path:     annotationPath("spec", "template", "metadata", "annotations", v1alpha1.ManifestHashAnnotation),
		template: true,
		value:    func(p pointer) (any, bool) { return p.manifestHash, true },
		holds: func(p pointer, d *appsv1.Deployment) bool {
			return d.Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation] == p.manifestHash
		},
		present: func(_ pointer, d *appsv1.Deployment) bool {
			_, ok := d.Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation]
			return ok
		},
	}, {
		name:     "spec.template.metadata.annotations[" + v1alpha1.ModelResourceAnnotation + "]",
		path:     annotationPath("spec", "template", "metadata", "annotations", v1alpha1.ModelResourceAnnotation),
		template: true,
		value:    func(p pointer) (any, bool) { return p.owner, true },
		holds: func(p pointer, d *appsv1.Deployment) bool {
			return d.Spec.Template.Annotations[v1alpha1.ModelResourceAnnotation] == p.owner
		},
		present: func(_ pointer, d *appsv1.Deployment) bool {
			_, ok := d.Spec.Template.Annotations[v1alpha1.ModelResourceAnnotation]
			return ok
		},
	}, {
		// The label the operator's pod store selects the pods of a baking version by;
		// sent with the template of a spec that bakes (see withLive).
		name:     "spec.template.metadata.labels[" + v1alpha1.BakeLabel + "]",
		path:     annotationPath("spec", "template", "metadata", "labels", v1alpha1.BakeLabel),
		template: true,
		value: func(p pointer) (any, bool) {
			return "true", p.bakeLabel
		},
		holds: func(p pointer, d *appsv1.Deployment) bool {
			return !p.bakeLabel || d.Spec.Template.Labels[v1alpha1.BakeLabel] == "true"
		},
		present: func(_ pointer, d *appsv1.Deployment) bool {
			_, ok := d.Spec.Template.Labels[v1alpha1.BakeLabel]
			return ok
		},
	}, {
		name:     fmt.Sprintf("spec.template.spec.containers[name=%q].env[name=%q]", container, v1alpha1.PreloadEnvVar),
		path:     envPath(container),
		template: true,
		value: func(p pointer) (any, bool) {
			// value "" takes the entry's literal value over from whoever set
			// it (a chart, `kubectl set env`): next to valueFrom it would
			// make the apply invalid, and the API server drops the empty
			// string, so the entry ends up with the ConfigMap reference only.
			return map[string]any{
				"name":  v1alpha1.PreloadEnvVar,
				"value": "",
				"valueFrom": map[string]any{"configMapKeyRef": map[string]any{
					"name": p.cmName,
					"key":  v1alpha1.PreloadEnvVar,
				}},
			}, true
		},
		holds: func(p pointer, d *appsv1.Deployment) bool {
			return envMatches(d, p.spec.TargetRef.ContainerName, p.cmName)
		},
		present: func(p pointer, d *appsv1.Deployment) bool {
			return PreloadEnv(d, p.spec.TargetRef.ContainerName) != nil
		},
	}, {
		// The readiness gate of a model that verifies its pods (see
		// withGate): an atomic list, sent with the template's other gates.
		name:     "spec.template.spec.readinessGates[conditionType=" + v1alpha1.VerifiedCondition + "]",
		path:     readinessGatesPath,
		template: true,
		value:    func(p pointer) (any, bool) { return p.gateValue() },
		holds:    func(p pointer, d *appsv1.Deployment) bool { return hasGate(d) == p.gate },
		present:  func(_ pointer, d *appsv1.Deployment) bool { return hasGate(d) },
	}, labelField(v1alpha1.ClaimedLabel, "true")}
	for _, k := range shardKeys(p.shard) {
		fields = append(fields, labelField(k, p.shard[k]))
	}
	for _, k := range p.unset {
		fields = append(fields, unsetLabelField(k))
	}
	for _, k := range p.templateKeys() {
		fields = append(fields, templateLabelField(k))
	}
	return fields
}

// templateLabelField is a shard label of the pod template, sent with the
// value withTemplateShard settled (none: not sent). It is bookkeeping:
// never drift to report, and it holds whenever the apply leaves the rest of
// the template as it is (withTemplateShard keeps the live value then).
func templateLabelField(key string) ownedField {
	path := templateLabelPath(key)
	return ownedField{
		name:        "spec.template.metadata.labels[" + key + "]",
		path:        path,
		template:    true,
		bookkeeping: true,
		value: func(p pointer) (any, bool) {
			v, ok := p.templateShard[key]
			return v, ok
		},
		holds: func(p pointer, d *appsv1.Deployment) bool {
			v, ok := p.templateShard[key]
			return !ok || d.Spec.Template.Labels[key] == v
		},
		present: func(_ pointer, d *appsv1.Deployment) bool {
			_, ok := d.Spec.Template.Labels[key]
			return ok
		},
	}
}

func templateLabelPath(key string) fieldpath.Path {
	return annotationPath("spec", "template", "metadata", "labels", key)
}

// labelField is a bookkeeping label of the Deployment's metadata that the
// operator sets to value.
func labelField(key, value string) ownedField {
	return ownedField{
		name:        "metadata.labels[" + key + "]",
		path:        labelPath(key),
		bookkeeping: true,
		value:       func(pointer) (any, bool) { return value, true },
		holds:       func(_ pointer, d *appsv1.Deployment) bool { return d.Labels[key] == value },
		present: func(_ pointer, d *appsv1.Deployment) bool {
			_, ok := d.Labels[key]
			return ok
		},
	}
}

// unsetLabelField is a shard label key the model does not have: the apply
// does not send it, so one the operator set for an earlier shard goes; one
// another manager set is left alone.
func unsetLabelField(key string) ownedField {
	path := labelPath(key)
	return ownedField{
		name:        "metadata.labels[" + key + "]",
		path:        path,
		bookkeeping: true,
		value:       func(pointer) (any, bool) { return nil, false },
		holds: func(p pointer, d *appsv1.Deployment) bool {
			_, ok := d.Labels[key]
			return !ok || !valueSetters(d.ManagedFields, path)[p.manager]
		},
		present: func(_ pointer, d *appsv1.Deployment) bool {
			_, ok := d.Labels[key]
			return ok
		},
	}
}

func labelPath(key string) fieldpath.Path { return annotationPath("metadata", "labels", key) }

func shardKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
