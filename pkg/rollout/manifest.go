package rollout

import (
	"fmt"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// Manifest ConfigMaps: the content-addressed ConfigMap of a spec, what the
// pass knows of what one holds (status.verifiedConfigMaps, a write of this
// process, a read), the one the target points at checked on every pass,
// and pruning once a rollout settled.

// ensureManifest plans the ConfigMap of spec when it does not exist. It
// reports whether it planned one, and false for ok when the target may not
// point at it in this pass: an owned ConfigMap of that name holds other
// content (it is deleted, with its UID as precondition, and written again
// by the next pass; reason ManifestMismatch), or its content is not known
// yet (Plan.ReadConfigMaps). A name taken by an object the resource does
// not own is learnt when the create fails (Failure NameTaken).
func (d *decider) ensureManifest(spec v1alpha1.NormalizedSpec) (created, ok bool) {
	hash := ManifestHash(spec)
	want := manifestConfigMap(d.obj, spec, d.manifestName(spec))
	if slices.ContainsFunc(d.plan.EnsureConfigMaps, func(cm *corev1.ConfigMap) bool { return cm.Name == want.Name }) {
		// Planned already in this pass (verifyPointed, then apply or
		// ready).
		return true, true
	}
	shard, _ := d.shardLabels()
	for k, v := range shard {
		want.Labels[k] = v
	}
	for i := range d.obs.ConfigMaps {
		cm := &d.obs.ConfigMaps[i]
		if cm.Name != want.Name || !ownedBy(cm, d.obj) {
			continue
		}
		switch d.contentOf(cm, want, hash) {
		case contentWanted:
			d.relabel(cm)
			return false, true
		case contentUnknown:
			if !slices.Contains(d.plan.ReadConfigMaps, cm.Name) {
				d.plan.ReadConfigMaps = append(d.plan.ReadConfigMaps, cm.Name)
			}
			return false, false
		case contentTaken:
			// Replaced by an object the model does not own since the
			// store saw it: not the operator's to delete.
			d.blocked(manifestConflictTuple, v1alpha1.PhasePending, reconciling, "", "")
			d.plan.Requeue = true
			return false, false
		}
		if !slices.Contains(d.plan.PruneConfigMaps, cm.Name) {
			d.plan.PruneConfigMaps = append(d.plan.PruneConfigMaps, cm.Name)
		}
		d.blocked(manifestMismatchTuple, v1alpha1.PhasePending, stalled, v1alpha1.ManifestMismatchReason, fmt.Sprintf(EventMsgManifestMismatch, cm.Name))
		d.plan.Requeue = true
		return false, false
	}
	d.plan.EnsureConfigMaps = append(d.plan.EnsureConfigMaps, want)
	return true, true
}

// manifestName is the name of spec's manifest ConfigMap: the legacy name
// (LegacyManifestConfigMapName) when the target points at it or the
// resource owns a ConfigMap of it — a version rolled out before the
// suffix grew keeps its ConfigMap, and no pod rolls for a name —, else
// ManifestConfigMapName.
func (d *decider) manifestName(spec v1alpha1.NormalizedSpec) string {
	hash := ManifestHash(spec)
	name := ManifestConfigMapName(spec.ManifestConfigMapName, hash)
	legacy := LegacyManifestConfigMapName(spec.ManifestConfigMapName, hash)
	// The name the target points at stays: changing it rolls the pods.
	if dep := d.obs.Deployment; dep != nil {
		if p := pointedConfigMap(dep, spec.TargetRef.ContainerName); p == name || p == legacy {
			return p
		}
	}
	// Then a name the model recorded for the manifest, then a legacy
	// ConfigMap it owns (a version retained before the suffix grew).
	for _, r := range d.old.VerifiedConfigMaps {
		if r.ManifestHash == hash && (r.Name == name || r.Name == legacy) {
			return r.Name
		}
	}
	for i := range d.obs.ConfigMaps {
		if cm := &d.obs.ConfigMaps[i]; cm.Name == legacy && ownedBy(cm, d.obj) {
			return legacy
		}
	}
	return name
}

// verifyPointed checks, on every pass that goes on to roll out, roll back
// or hold, the manifest ConfigMap the target points at: its new pods load
// it, whether or not the pass applies anything. It is judged as the
// manifest of the spec it is named for (the desired spec, a rollback's, a
// retained one's), as ensureManifest does: unknown content is read,
// other content is ManifestMismatch and the pass stops there; one that is
// missing is written again. A name that is no spec's of the model's is
// not its to judge.
func (d *decider) verifyPointed() bool {
	name := pointedConfigMap(d.obs.Deployment, d.desired.TargetRef.ContainerName)
	if name == "" {
		return true
	}
	specs := []v1alpha1.NormalizedSpec{d.desired}
	if r := d.st.RollbackSpec; r != nil {
		specs = append(specs, *r)
	}
	for _, e := range d.history {
		specs = append(specs, e.Spec)
	}
	for _, spec := range specs {
		if d.manifestName(spec) == name {
			_, ok := d.ensureManifest(spec)
			return ok
		}
	}
	return true
}

// contentOf is what the pass knows of the content of cm, an owned
// manifest ConfigMap of want's name that should hold the manifest of
// hash: a copy read in this pass decides (ConfigMapContents, the copy of
// that name, whatever its UID: the store may trail it); otherwise the
// status's record or this process's write of cm's UID does. What a read or
// a write verified is recorded (recordVerified).
func (d *decider) contentOf(cm, want *corev1.ConfigMap, hash string) content {
	for i := range d.obs.ConfigMapContents {
		read := &d.obs.ConfigMapContents[i]
		if read.Name != cm.Name {
			continue
		}
		if !ownedBy(read, d.obj) {
			return contentTaken
		}
		if !sameData(read, want) {
			return contentOther
		}
		d.verified(v1alpha1.VerifiedConfigMap{Name: read.Name, UID: read.UID, ManifestHash: hash}, true)
		return contentWanted
	}
	rec := v1alpha1.VerifiedConfigMap{Name: cm.Name, UID: cm.UID, ManifestHash: hash}
	switch {
	case slices.Contains(d.old.VerifiedConfigMaps, rec):
		return contentWanted
	case slices.Contains(d.obs.WrittenConfigMaps, rec):
		d.verified(rec, false)
		return contentWanted
	}
	return contentUnknown
}

// verified notes a ConfigMap whose content the pass verified; read says a
// read of this pass did, which the status records at once (a new process
// would read it again otherwise).
func (d *decider) verified(rec v1alpha1.VerifiedConfigMap, read bool) {
	d.verifiedNow = append(d.verifiedNow, rec)
	d.verifiedByRead = d.verifiedByRead || read
}

// recordVerified updates status.verifiedConfigMaps: the records of
// ConfigMaps the pass still observes under the same UID and does not
// delete, and what it verified. A ConfigMap this process wrote is
// recorded with the next status write the pass makes anyway — a new
// process that finds it unrecorded reads it once —, one a read verified at
// once. Records outlive nothing they describe: a UID is never reused, and
// an immutable ConfigMap's data never changes.
func (d *decider) recordVerified() {
	if !d.verifiedByRead && apiequality.Semantic.DeepEqual(d.st, d.old) {
		return
	}
	var out []v1alpha1.VerifiedConfigMap
	// What this process wrote rides along too, whether or not this pass
	// consulted it (a rollout's passes between the apply and Ready do not).
	for _, r := range append(append(slices.Clone(d.old.VerifiedConfigMaps), d.obs.WrittenConfigMaps...), d.verifiedNow...) {
		if slices.Contains(d.plan.PruneConfigMaps, r.Name) || !slices.ContainsFunc(d.obs.ConfigMaps, func(cm corev1.ConfigMap) bool {
			return cm.Name == r.Name && (cm.UID == r.UID || slices.ContainsFunc(d.obs.ConfigMapContents, func(read corev1.ConfigMap) bool {
				return read.Name == r.Name && read.UID == r.UID
			}))
		}) {
			continue
		}
		out = slices.DeleteFunc(out, func(o v1alpha1.VerifiedConfigMap) bool { return o.Name == r.Name })
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	if len(out) > v1alpha1.MaxVerifiedConfigMaps {
		// More ConfigMaps of the model than it retains versions: the
		// records beyond the bound are read again when a pass needs them.
		out = out[:v1alpha1.MaxVerifiedConfigMaps]
	}
	if len(out) == 0 {
		out = nil
	}
	d.st.VerifiedConfigMaps = out
}

// relabel plans the shard labels of the model onto cm, an owned manifest
// ConfigMap that does not carry them (see Plan.LabelConfigMaps).
func (d *decider) relabel(cm *corev1.ConfigMap) {
	shard, unset := d.shardLabels()
	labels := map[string]*string{}
	for k, v := range shard {
		if have, ok := cm.Labels[k]; !ok || have != v {
			labels[k] = &v
		}
	}
	for _, k := range unset {
		if _, ok := cm.Labels[k]; ok {
			labels[k] = nil
		}
	}
	if len(labels) == 0 {
		return
	}
	for _, l := range d.plan.LabelConfigMaps {
		if l.Name == cm.Name {
			return
		}
	}
	d.plan.LabelConfigMaps = append(d.plan.LabelConfigMaps, ConfigMapLabels{Name: cm.Name, Labels: labels})
}

// prune plans the deletion of owned manifest ConfigMaps that neither the
// target nor any retained or active spec needs. It runs only once a rollout
// has settled, so a pod of an old ReplicaSet never loses its ConfigMap
// mid-rollout.
func (d *decider) prune() {
	keep := map[string]bool{
		d.st.ManifestConfigMapName:                                            true,
		d.pointerFor(d.desired).cmName:                                        true,
		pointedConfigMap(d.obs.Deployment, d.desired.TargetRef.ContainerName): true,
	}
	if r := d.st.RollbackSpec; r != nil {
		keep[d.pointerFor(*r).cmName] = true
	}
	for _, e := range d.history {
		for _, base := range []string{e.Spec.ManifestConfigMapName, d.desired.ManifestConfigMapName} {
			keep[ManifestConfigMapName(base, e.ManifestHash)] = true
			keep[LegacyManifestConfigMapName(base, e.ManifestHash)] = true
		}
	}
	for i := range d.obs.ConfigMaps {
		cm := &d.obs.ConfigMaps[i]
		if ownedBy(cm, d.obj) && !keep[cm.Name] && !slices.Contains(d.plan.PruneConfigMaps, cm.Name) {
			d.plan.PruneConfigMaps = append(d.plan.PruneConfigMaps, cm.Name)
		}
	}
	sort.Strings(d.plan.PruneConfigMaps)
}
