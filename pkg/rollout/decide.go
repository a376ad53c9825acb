package rollout

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// DefaultRequeueInterval is the first interval of the backstop timer of a
// rollout or rollback in flight. Watches on the Deployment (and, while it
// bakes, its pods) wake the resource on every change; the timer only guards
// against a missed event, and every judgment that depends on time passing (a progress
// deadline of a retry, a bake, a ReplicaFailure's grace, replacing pods in
// place) sets a timer of its own.
const DefaultRequeueInterval = 15 * time.Second

// BackstopGrowth bounds the backstop timer: it grows with the time the
// resource has been Reconciling, from RequeueInterval to BackstopGrowth
// times it (15 s to 2 min by default), so a model that waits minutes for
// its Deployment, behind a wave of other rollouts, is not re-evaluated every
// 15 s for nothing, and a missed event is still noticed within 2 min.
const BackstopGrowth = 8

// Request prefixes of status.rollbackRequest.
const (
	AutomaticRollbackPrefix = "automatic:"
	ManualRollbackPrefix    = "manual:"
)

// Options tune Decide. The zero value uses the defaults.
type Options struct {
	// FieldManager is the operator's server-side apply field manager; drift
	// attribution never names it. Default DefaultFieldManager.
	FieldManager string
	// RequeueInterval is the first interval of the backstop timer while a
	// rollout is in flight (Plan.Backstop); it grows with the time the
	// resource has been Reconciling to BackstopGrowth times it. Default
	// DefaultRequeueInterval.
	RequeueInterval time.Duration
	// DefaultServiceAccount is the ServiceAccount a resource without
	// spec.serviceAccountName writes as (the operator's
	// --default-service-account); empty: the operator's own rights. It only
	// names the identity in the status of a denied write.
	DefaultServiceAccount string
	// ShardLabels are the label keys a shard's --watch-label-selector
	// selects OpenMedModels by. The model's values of them are carried onto
	// the metadata of the Deployment and the manifest ConfigMaps it writes,
	// so the shard's caches can select those by the same selector; a key
	// the model lacks is not sent, and the value the operator set for an
	// earlier shard goes. The pod template gets them too, so that the
	// pods carry them, but only with an apply that changes the template
	// anyway: a move between shards rolls no pod (see withTemplateShard).
	ShardLabels []string
}

// ShardLabels returns the label keys a shard's selector (the operator's
// --watch-label-selector) selects on, for Options.ShardLabels. Nil for no
// selector or one without requirements.
func ShardLabels(models labels.Selector) []string {
	if models == nil {
		return nil
	}
	reqs, _ := models.Requirements()
	var keys []string
	for _, r := range reqs {
		if !slices.Contains(keys, r.Key()) {
			keys = append(keys, r.Key())
		}
	}
	return keys
}

func (o Options) withDefaults() Options {
	if o.FieldManager == "" {
		o.FieldManager = DefaultFieldManager
	}
	if o.RequeueInterval <= 0 {
		o.RequeueInterval = DefaultRequeueInterval
	}
	return o
}

// Decide is the whole rollout state machine: from the resource (spec,
// annotations, status, deletion state) and the cluster state observed for
// one pass it returns the new status and the changes to make. It reads no
// clock, calls no API and does not modify obj or observed, so the same
// inputs always give the same plan.
//
// A pass, in order: a failed step is reported; deletion releases the target;
// a suspended resource is left alone; an invalid spec stalls; the target is
// resolved (missing Deployment, missing container, another owner: each
// re-evaluated on every pass); a manual rollback request is served; a failed
// desired spec stays held; otherwise the desired spec is applied, observed,
// and either reaches Ready, is rolled back, or is reported unavailable. When
// nothing needs to change the plan holds no change and its Status equals
// obj.Status.
func Decide(obj *v1alpha1.OpenMedModel, observed Observed, opts Options) Plan {
	d := &decider{
		obj:   obj,
		obs:   observed,
		opts:  opts.withDefaults(),
		old:   &obj.Status,
		st:    obj.Status.DeepCopy(),
		gen:   obj.Generation,
		now:   observed.Now.Rfc3339Copy(),
		owner: OwnerKey(obj),
	}
	switch {
	case observed.Failure != nil:
		d.failed(*observed.Failure)
	case obj.DeletionTimestamp != nil:
		d.finalize()
	case obj.Spec.Suspend:
		d.suspend()
	default:
		d.reconcile()
	}
	d.finish()
	return d.plan
}

// decider holds one pass.
type decider struct {
	obj   *v1alpha1.OpenMedModel
	obs   Observed
	opts  Options
	old   *v1alpha1.OpenMedModelStatus
	st    *v1alpha1.OpenMedModelStatus
	gen   int64
	now   metav1.Time
	owner string

	desired v1alpha1.NormalizedSpec
	hash    string
	history []v1alpha1.HistoryEntry
	limit   int

	// claimsListed: st.ClaimedTargets holds ClaimedTargets(old), so names
	// can be added and removed (claim, unclaim).
	claimsListed bool

	// bakeWait is what a bake waits for besides its time (bakeWaitNoPods,
	// bakeWaitNode), or "".
	bakeWait string

	// inPlaceNote is what a message about a pod that cannot be scheduled
	// adds about replacing pods in place (when, or why not), or "".
	inPlaceNote string

	// verifiedNow are the manifest ConfigMaps whose content this pass
	// verified by a read or this process's write; verifiedByRead says a
	// read did (recordVerified).
	verifiedNow    []v1alpha1.VerifiedConfigMap
	verifiedByRead bool

	plan Plan
}

func (d *decider) event(eventType, reason, message string) {
	d.plan.Events = append(d.plan.Events, Event{Type: eventType, Reason: reason, Message: message})
}

// eventOnChange records an event only when the Ready reason changes: a state
// that persists over passes is reported once (the reference re-posted
// every 15 s, B9).
func (d *decider) eventOnChange(eventType, reason, message, readyReason string) {
	if c := apimeta.FindStatusCondition(d.old.Conditions, v1alpha1.ReadyCondition); c != nil && c.Reason == readyReason {
		return
	}
	d.event(eventType, reason, message)
}

func (d *decider) conditions(tp tuple, ks kstatus) {
	setConditions(d.st, tp, ks, d.gen, d.now)
}

// inFlight asks for a backstop pass while a rollout or rollback runs:
// the watches wake the resource on every change, so the timer only guards
// against a missed event. Its interval is the time the resource has been
// Reconciling (the condition's lastTransitionTime, before this pass),
// bounded by RequeueInterval and BackstopGrowth times it: 15 s, 15 s,
// 30 s, 60 s, 2 min, 2 min, ... by default.
func (d *decider) inFlight() {
	after := BackstopInterval(d.old, d.now.Time, d.opts.RequeueInterval)
	if d.plan.RequeueAfter == 0 || after < d.plan.RequeueAfter {
		d.plan.RequeueAfter, d.plan.Backstop = after, true
	}
}

// BackstopInterval is the interval of the backstop timer of a resource in
// flight whose status before the pass is st, at now, starting from first
// (Options.RequeueInterval): the time st has been Reconciling, at least
// first and at most BackstopGrowth times first.
func BackstopInterval(st *v1alpha1.OpenMedModelStatus, now time.Time, first time.Duration) time.Duration {
	if first <= 0 {
		first = DefaultRequeueInterval
	}
	c := apimeta.FindStatusCondition(st.Conditions, v1alpha1.ReconcilingCondition)
	if c == nil || c.Status != metav1.ConditionTrue {
		return first
	}
	return min(max(now.Sub(c.LastTransitionTime.Time), first), BackstopGrowth*first)
}

// requeueWithin asks for a pass within after, a timer of a judgment.
func (d *decider) requeueWithin(after time.Duration) {
	if after <= 0 {
		return
	}
	if d.plan.Timer == 0 || after < d.plan.Timer {
		d.plan.Timer = after
	}
	if d.plan.RequeueAfter == 0 || after < d.plan.RequeueAfter {
		d.plan.RequeueAfter, d.plan.Backstop = after, false
	}
}

// finish makes the status consistent with itself: when the pass evaluated
// the current generation, every condition it owns says so, including the
// ones whose value did not change (a generation bump with the same spec
// hash, B16). Then the Reconciling or Stalled message is written with the
// pass's coordinates (summarize).
func (d *decider) finish() {
	if d.obj.DeletionTimestamp == nil && (d.plan.ApplyDeployment != nil || d.plan.Takeover != nil || d.plan.ReleaseReplicas) {
		d.claim(d.obs.Deployment.Name)
	}
	if d.st.ObservedGeneration == d.gen && d.gen > 0 {
		for i := range d.st.Conditions {
			if ownedCondition(d.st.Conditions[i].Type) {
				d.st.Conditions[i].ObservedGeneration = d.gen
			}
		}
	}
	d.summarize()
	d.recordVerified()
	d.plan.Status = *d.st
}

// reconcile is a pass over a live, unsuspended resource.
func (d *decider) reconcile() {
	d.st.ObservedGeneration = d.gen
	if v, ok := meta.ReconcileAnnotationValue(d.obj.Annotations); ok {
		d.st.LastHandledReconcileAt = v
	}
	n, err := Normalize(d.obj)
	if err != nil {
		d.st.Phase = v1alpha1.PhaseFailed
		d.conditions(invalidTuple(err.Error()), stalled)
		return
	}
	d.desired, d.hash = n, SpecHash(n)
	d.st.DesiredVersion = n.Version
	d.st.DesiredSpecHash = d.hash
	d.st.ManifestHash = ManifestHash(n)
	d.limit = int(v1alpha1.DefaultRevisionHistoryLimit)
	if l := d.obj.Spec.RevisionHistoryLimit; l != nil {
		d.limit = int(*l)
	}
	d.history = truncateHistory(retainedHistory(d.st, d.now), d.limit)
	setHistory(d.st, d.history)
	d.expireCorrections()

	// A reset is handled only by a pass that can act on it: a blocked pass
	// (a missing target, say) leaves it for the first one that is not, so
	// the retry is never used up before it can start.
	if !d.resolveTarget() {
		return
	}
	retry := d.reset()
	if v := strings.TrimSpace(d.obj.Annotations[v1alpha1.RollbackToAnnotation]); v != "" {
		d.manualRollback(v)
		d.overlayConflicts()
		return
	}
	if d.st.FailedSpecHash == d.hash {
		d.heldAfterFailure()
		d.overlayConflicts()
		return
	}
	d.rollout(retry)
	d.overlayConflicts()
}

// reset handles a new reconcile.fluxcd.io/resetAt value (helm-controller's
// convention): it lifts the failed-spec block and the ownership-conflict
// record, so the desired spec is tried again. It reports whether a failed
// spec is being retried.
func (d *decider) reset() bool {
	v := d.obj.Annotations[v1alpha1.ResetRequestAnnotation]
	if v == "" || v == d.old.LastHandledResetAt {
		return false
	}
	d.st.LastHandledResetAt = v
	d.st.Corrections = nil
	if d.st.FailedSpecHash == "" {
		return false
	}
	d.st.FailedSpecHash = ""
	d.st.RollbackSpec = nil
	d.st.RollbackRequest = ""
	return true
}

// resolveTarget checks the recoverable blockers of the target and plans the
// release of a Deployment the resource pointed at before a retarget. It
// reports whether the pass may go on.
func (d *decider) resolveTarget() bool {
	dep := d.obs.Deployment
	switch {
	case dep == nil:
		d.blocked(targetNotFoundTuple, v1alpha1.PhasePending, reconciling,
			v1alpha1.TargetNotFoundReason, EventMsgTargetNotFound)
		return false
	case findContainer(dep, d.desired.TargetRef.ContainerName) == nil:
		d.blocked(containerNotFoundTuple, v1alpha1.PhaseFailed, stalled,
			v1alpha1.ContainerNotFoundReason, EventMsgContainerNotFound)
		return false
	case foreign(dep, d.owner):
		d.blocked(targetConflictTuple, v1alpha1.PhaseFailed, stalled,
			v1alpha1.TargetConflictReason, EventMsgTargetConflict)
		return false
	}
	d.releasePrevious(dep.Name)
	return true
}

// releasePrevious plans the release of every Deployment other than the
// desired target that the status records as possibly written and that
// still carries anything of the operator's (releaseLeft). A recorded one
// that carries nothing (or no longer exists) leaves the record: the status
// keeps naming a Deployment until a pass sees it released, so an
// interrupted release is found again from there, even after a restart.
func (d *decider) releasePrevious(desired string) {
	_, previous := TargetNames(d.obj)
	for _, name := range previous {
		if prev := d.previousTarget(name); prev != nil && d.releaseLeft(prev) {
			d.plan.ReleasePrevious = append(d.plan.ReleasePrevious, d.release(prev))
			continue
		}
		d.unclaim(name, desired)
	}
}

// previousTarget is the observed Deployment name of PreviousTargets, or nil.
func (d *decider) previousTarget(name string) *appsv1.Deployment {
	for _, dep := range d.obs.PreviousTargets {
		if dep != nil && dep.Name == name {
			return dep
		}
	}
	return nil
}

// claim lists name in status.claimedTargets; a name the status the pass
// read does not list is written ahead of the plan's writes
// (Plan.ClaimTargets).
func (d *decider) claim(name string) {
	d.listClaims()
	if !slices.Contains(ClaimedTargets(d.old), name) && !slices.Contains(d.plan.ClaimTargets, name) {
		d.plan.ClaimTargets = append(d.plan.ClaimTargets, name)
	}
	if !slices.Contains(d.st.ClaimedTargets, name) {
		d.st.ClaimedTargets = append(d.st.ClaimedTargets, name)
		slices.Sort(d.st.ClaimedTargets)
	}
}

// unclaim drops a released Deployment from the record; a status.targetName
// that still names it moves to the desired target.
func (d *decider) unclaim(name, desired string) {
	d.listClaims()
	d.st.ClaimedTargets = slices.DeleteFunc(d.st.ClaimedTargets, func(n string) bool { return n == name })
	if d.st.TargetName == name {
		d.st.TargetName = desired
	}
}

// listClaims makes st.ClaimedTargets the full record before it changes: a
// status written before claimedTargets existed names its one target in
// targetName only. A pass that changes no claim leaves the list as it was.
func (d *decider) listClaims() {
	if !d.claimsListed {
		d.st.ClaimedTargets = ClaimedTargets(d.old)
		d.claimsListed = true
	}
}

// blocked reports a blocker. It changes no rollout bookkeeping, so the pass
// after the cause goes away continues where the resource was (B2). The
// watch on a claimed target wakes the resource when the cause goes away;
// the reconciler looks again at a target it has not claimed.
func (d *decider) blocked(tp tuple, phase v1alpha1.Phase, ks kstatus, reason, message string) {
	d.st.Phase = phase
	d.conditions(tp, ks)
	if reason != "" {
		d.eventOnChange(corev1.EventTypeWarning, reason, message, tp.ready.reason)
	}
}

// shardLabels returns the model's values of the shard label keys it has,
// and the keys it lacks (Options.ShardLabels).
func (d *decider) shardLabels() (map[string]string, []string) {
	var values map[string]string
	var unset []string
	for _, k := range d.opts.ShardLabels {
		if v, ok := d.obj.Labels[k]; ok {
			if values == nil {
				values = map[string]string{}
			}
			values[k] = v
		} else {
			unset = append(unset, k)
		}
	}
	return values, unset
}

// foreign reports whether the Deployment names another owner.
func foreign(dep *appsv1.Deployment, owner string) bool {
	v := dep.Annotations[v1alpha1.ModelResourceAnnotation]
	return v != "" && v != owner
}

// pointerFor is the operator's intent for spec on the desired target.
func (d *decider) pointerFor(spec v1alpha1.NormalizedSpec) pointer {
	spec = d.inPlaceStrategy(spec)
	p := newPointer(spec, d.owner)
	p.cmName = d.manifestName(spec)
	p.shard, p.unset = d.shardLabels()
	p.manager = d.opts.FieldManager
	return p.withLive(d.obs.Deployment, Bakes(spec, p.manifestHash, d.history))
}

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
	legacy := LegacyManifestConfigMapName(spec.ManifestConfigMapName, hash)
	if dep := d.obs.Deployment; dep != nil && pointedConfigMap(dep, spec.TargetRef.ContainerName) == legacy {
		return legacy
	}
	for i := range d.obs.ConfigMaps {
		if cm := &d.obs.ConfigMaps[i]; cm.Name == legacy && ownedBy(cm, d.obj) {
			return legacy
		}
	}
	return ManifestConfigMapName(spec.ManifestConfigMapName, hash)
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
		if !ownedBy(read, d.obj) || !sameData(read, want) {
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
	for _, r := range append(slices.Clone(d.old.VerifiedConfigMaps), d.verifiedNow...) {
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

// apply plans the ConfigMap and the Deployment pointer for spec and records
// them in the status. It reports false when a manifest conflict blocks it.
func (d *decider) apply(spec v1alpha1.NormalizedSpec) bool {
	if _, ok := d.ensureManifest(spec); !ok {
		return false
	}
	dep := d.obs.Deployment
	p := d.pointerFor(spec)
	d.plan.ReleaseReplicas = releasesReplicas(dep, spec.Replicas, d.opts.FieldManager)
	if p.takeoverStrategy(dep) {
		d.plan.Takeover = p.intent(map[string]any{"spec.strategy": takeoverStrategy(dep.Spec.Strategy)})
	}
	d.plan.ApplyDeployment = p.intent(nil)
	d.plan.Claim = dep.Annotations[v1alpha1.ModelResourceAnnotation] == ""
	replaced := p.foreignValues(dep, d.opts.FieldManager)
	if len(replaced) > 0 {
		d.plan.Drift = append(d.plan.Drift, replaced...)
		d.correctionEvent(v1alpha1.FieldReplacedReason, EventMsgFieldReplaced, replaced)
	}
	d.plan.LabelsOnly = d.plan.Takeover == nil && !d.plan.ReleaseReplicas && len(replaced) == 0 && p.onlyBookkeeping(dep)
	d.st.AppliedSpecHash = SpecHash(spec)
	d.st.ManifestConfigMapName = p.cmName
	d.st.TargetName = spec.TargetRef.Name
	// Informational: the generation a template change produces. Readiness
	// is judged by the Deployment itself (ControllerObserved), never by this.
	if p.templateChanged(dep) {
		d.st.TargetDeploymentGeneration = dep.Generation + 1
	}
	return true
}

// proven reports whether the desired model version already served from
// this target: then a rollout or failure of the Deployment is not the
// model's (B5, B12), and a replicas-only spec change is no rollout.
func (d *decider) proven() bool {
	if len(d.history) == 0 {
		return false
	}
	h := d.history[0]
	return h.ManifestHash == d.st.ManifestHash && h.Spec.TargetRef == d.desired.TargetRef
}

// rollout drives the desired spec: apply it when the target does not carry
// it, then judge the Deployment until it is Ready, fails or loses
// availability. retry is true for the pass that handles a reset of a failed
// spec.
func (d *decider) rollout(retry bool) {
	dep := d.obs.Deployment
	p := d.pointerFor(d.desired)
	proven := d.proven()
	switch {
	case p.matches(dep):
	case p.onlyBookkeeping(dep):
		// Only the cache's labels are missing (an upgraded install, a
		// shard move, a label somebody removed): they go back on, and the
		// Deployment, whose generation the write does not move, is judged
		// as if they were there.
		if !d.apply(d.desired) {
			return
		}
	default:
		d.applyDesired(p, proven, retry)
		return
	}
	// The spec stopped setting replicas: give them up at their live value
	// (the pointer already matches, so no apply follows).
	d.plan.ReleaseReplicas = releasesReplicas(dep, d.desired.Replicas, d.opts.FieldManager)
	if retry {
		// The failed pointer is still in place (nothing was retained to
		// roll back to): the retry is judged by what the Deployment reports
		// from now on, within the spec's progress deadline; a version that
		// bakes is judged on its pods as soon as they change.
		d.start(v1alpha1.RetryRequestedReason, false)
		d.plan.WatchesPods = d.bakes()
		return
	}
	ours := !proven || d.old.Phase == v1alpha1.PhaseRollingOut
	switch {
	case ours && dep.Spec.Paused && !RolloutComplete(dep) && !d.baking():
		// The owner paused the Deployment: the model's rollout waits for
		// it, whatever the controller has observed (Argo CD calls a paused
		// Deployment Suspended before it looks at anything else). A bake
		// goes on judging its pods: a crash while paused fails it now.
		d.st.Phase = v1alpha1.PhaseRollingOut
		d.conditions(targetPausedTuple, reconciling)
	case !ControllerObserved(dep) && d.baking():
		// A scale-up (an HPA) during the bake: the bake goes on, judged
		// by the pods, once the controller has observed the change.
		d.bake(false)
	case !ControllerObserved(dep):
		d.awaitController(ours)
	case !ours:
		d.serving(dep)
	case d.failedNow(dep):
		d.rolloutFailed()
	case proven && progressDeadlineExceeded(dep):
		d.unavailable(stalled)
	case d.replacingInPlace(d.hash) && RolloutComplete(dep):
		// Every pod was replaced in place: the declared strategy goes
		// back on (recorded first; the next pass applies it).
		d.restoreStrategy()
		d.rolling()
	case d.baking() || (d.bakes() && RolloutComplete(dep)):
		// The rollout completed: the version bakes before it is Ready. A
		// pod that restarts makes the Deployment incomplete for a moment;
		// the bake, not a new rollout, judges that.
		d.bake(RolloutComplete(dep))
	case RolloutComplete(dep):
		d.ready(!proven)
	default:
		d.rolling()
	}
}

// failedNow reports whether the model's own rollout failed: the
// Deployment gave up on it, or, for a retry of a pointer that was already
// in place, it gave up after the retry started or the deadline passed.
func (d *decider) failedNow(dep *appsv1.Deployment) bool {
	if d.proven() {
		return false
	}
	since := d.st.RetryStartedAt
	if since == nil {
		return d.deploymentFailed(dep, time.Time{})
	}
	if d.deploymentFailed(dep, since.Time) {
		return !RolloutComplete(dep)
	}
	if d.baking() {
		// The retried rollout completed and bakes: the retry's deadline
		// was the rollout's; a pod replaced by a drain or an HPA's
		// scale-up during the bake is the bake's to judge.
		return false
	}
	deadline := time.Duration(d.desired.RolloutStrategy.ProgressDeadlineSeconds) * time.Second
	if !d.now.Before(&metav1.Time{Time: since.Add(deadline)}) {
		return !RolloutComplete(dep)
	}
	if !RolloutComplete(dep) {
		d.requeueWithin(since.Add(deadline).Sub(d.now.Time) + time.Second)
	}
	return false
}

// deploymentFailed reports a failure of the model's rollout (or rollback)
// the Deployment controller reports for its current generation, written at
// or after since (zero: any time):
//   - its progress deadline passed (Progressing=False,
//     ProgressDeadlineExceeded);
//   - a ReplicaFailure (a quota, an admission webhook) that is the
//     rollout's: it began no earlier than the operator's last apply to the
//     Deployment (a ReplicaFailure the controller copied from an old
//     ReplicaSet, an HPA's scale-up that hit a quota before the rollout,
//     began earlier; the controller reports the new ReplicaSet's over an
//     old one's) and lasted ReplicaFailureGrace (a surge that waits a
//     moment for an old pod to go is progress). Until then it is progress,
//     as gitops-engine and kstatus read it, and one timer wakes the pass
//     that judges it.
//
// Both times are the cluster's: the ReplicaSet condition's transition
// (kube-controller-manager) and the managedFields time (the API server).
func (d *decider) deploymentFailed(dep *appsv1.Deployment, since time.Time) bool {
	if c := deadlineCondition(dep); c != nil && !c.LastUpdateTime.Time.Before(since) {
		return true
	}
	c := replicaFailureCondition(dep)
	if c == nil {
		return false
	}
	began := c.LastTransitionTime.Time
	if began.Before(since) || began.Before(appliedAt(dep, d.opts.FieldManager)) {
		return false
	}
	if left := began.Add(ReplicaFailureGrace).Sub(d.now.Time); left > 0 {
		d.requeueWithin(left + 100*time.Millisecond)
		return false
	}
	return true
}

// applyDesired writes the desired pointer to a target that does not carry
// it: a new spec, the first rollout, a retry, or the correction of another
// manager's change (drift).
func (d *decider) applyDesired(p pointer, proven, retry bool) {
	dep := d.obs.Deployment
	changed := d.old.DesiredSpecHash != d.hash
	wasApplied := d.old.AppliedSpecHash == d.hash &&
		(d.old.Phase == v1alpha1.PhaseRollingOut || d.old.Phase == v1alpha1.PhaseReady)
	var drift []Drift
	if wasApplied && !changed {
		drift = d.inPlaceIsNoDrift(p.drift(dep, d.opts.FieldManager), d.hash)
		// Nothing differs but values the operator set itself: a pass
		// applied another spec and its status write was lost (a crash, or
		// the edit that changed the spec back won the race for the model).
		// The Deployment carries a spec the model no longer asks for: a
		// change of spec, not another manager's drift.
		changed = len(drift) == 0
	}
	rolls := p.templateChanged(dep)
	if !rolls {
		// Replicas, strategy, deadline or the owner annotation only: no pod
		// rolls, so there is no rollout to watch, and a Ready resource stays
		// Ready.
		if !d.apply(d.desired) {
			return
		}
		d.recordDrift(drift)
		switch {
		case proven && d.old.Phase == v1alpha1.PhaseReady && changed && p.specChanged(dep):
			// The model's own replicas, strategy or deadline change the
			// Deployment's generation: what it reports now describes the
			// spec before this apply, so the new generation of the model is
			// not judged until the Deployment controller has observed it
			// (its status update wakes the resource). A correction of
			// another manager's change keeps the verdict the unchanged
			// model already has (awaitController).
			d.st.Phase = v1alpha1.PhaseReady
			d.conditions(waitingTuple, reconciling)
			d.inFlight()
		case proven && d.old.Phase == v1alpha1.PhaseReady && ControllerObserved(dep):
			// Only the owner annotation: the Deployment's status still
			// describes its current spec.
			d.serving(dep)
		case proven && d.old.Phase == v1alpha1.PhaseReady:
			d.awaitController(false)
		default:
			d.rolling()
		}
		return
	}
	switch {
	case retry:
		d.start(v1alpha1.RetryRequestedReason, true)
	case len(drift) > 0:
		if d.start(v1alpha1.DriftCorrectedReason, true) {
			d.recordDrift(drift)
		}
	case changed:
		d.start(v1alpha1.SpecChangedReason, true)
	default:
		d.start(v1alpha1.InitialRolloutReason, true)
	}
}

// start reports the rollout of the desired spec started and, with apply,
// plans the writes that start it. Without apply (a retry of a pointer that
// is already in place) the retry's start time is recorded instead.
func (d *decider) start(reason string, apply bool) bool {
	if apply && !d.apply(d.desired) {
		return false
	}
	d.st.Phase = v1alpha1.PhaseRollingOut
	d.st.ReplaceInPlace = nil
	d.st.FailedSpecHash = ""
	d.st.RollbackSpec = nil
	d.st.RollbackRequest = ""
	d.st.RetryStartedAt = nil
	d.st.BakeStartedAt = nil
	if !apply {
		now := d.now
		d.st.RetryStartedAt = &now
	}
	d.conditions(startTuple(reason), reconciling)
	d.inFlight()
	if reason != v1alpha1.DriftCorrectedReason {
		d.event(corev1.EventTypeNormal, v1alpha1.RolloutStartedReason, EventMsgRolloutStarted)
	}
	return true
}

// recordDrift reports the drift a pass corrects: the DriftCorrected event,
// the plan's Drift list (the reconciler counts it) and status.corrections.
func (d *decider) recordDrift(drift []Drift) {
	if len(drift) == 0 {
		return
	}
	d.plan.Drift = append(d.plan.Drift, drift...)
	d.correctionEvent(v1alpha1.DriftCorrectedReason, EventMsgDriftCorrected, drift)
}

// correctionEvent emits reason for a correction and counts it in
// status.corrections.
func (d *decider) correctionEvent(reason, message string, drift []Drift) {
	parts := make([]string, len(drift))
	for i, x := range drift {
		parts[i] = x.String()
		d.countCorrection(x)
	}
	d.event(corev1.EventTypeNormal, reason, message+": "+strings.Join(parts, "; ")+".")
}

// awaitController is a pass before the Deployment controller saw the
// target's latest spec: its status still describes an older one, so
// nothing changes until the controller answers (in milliseconds; its
// status update wakes the resource).
func (d *decider) awaitController(ours bool) {
	if ours {
		d.rolling()
		return
	}
	if conditionIs(d.old, v1alpha1.ReadyCondition, metav1.ConditionTrue, "") ||
		conditionIs(d.old, v1alpha1.ReadyCondition, metav1.ConditionFalse, v1alpha1.OwnershipConflictReason) {
		// A settled resource keeps its status while an HPA or another
		// manager changes the Deployment (an ownership conflict is only
		// shown over a Ready one; overlayConflicts).
		return
	}
	d.st.Phase = v1alpha1.PhaseReady
	d.conditions(waitingTuple, reconciling)
	d.inFlight()
}

// rolling reports the model's rollout under way. A status that already
// says so is kept as it is, so a pass writes status during a rollout only
// when the progress in the Reconciling message moved (summarize).
func (d *decider) rolling() {
	d.inFlight()
	pod, msg := d.unschedulable(d.st.ManifestHash)
	switch {
	case d.replacingInPlace(d.hash) || d.restoringStrategy(d.hash) || (pod != "" && d.switchInPlace(d.desired, d.st.ManifestHash)):
		d.rollingAs(replacingInPlaceTuple)
	case pod != "":
		// A new pod waits for a node: progress, said with the scheduler's
		// reason, once per rollout as an event.
		d.eventOnChange(corev1.EventTypeWarning, v1alpha1.UnschedulableReason,
			fmt.Sprintf("Pod %s of %s cannot be scheduled: %s", pod, d.desired.Version, msg), v1alpha1.UnschedulableReason)
		d.rollingAs(unschedulableTuple)
	case d.old.Phase == v1alpha1.PhaseRollingOut && rolloutReported(d.old):
	default:
		d.rollingAs(rollingTuple)
	}
}

// rollingAs reports the desired spec's rollout under way with tp.
func (d *decider) rollingAs(tp tuple) {
	d.st.Phase = v1alpha1.PhaseRollingOut
	d.st.AppliedSpecHash = d.hash
	d.conditions(tp, reconciling)
}

// rolloutReported reports whether st already says the model's rollout is
// under way (a start or its progress), and not a failed step of an earlier
// pass, whose text must not outlive the pass that recovered.
func rolloutReported(st *v1alpha1.OpenMedModelStatus) bool {
	c := apimeta.FindStatusCondition(st.Conditions, v1alpha1.ReconcilingCondition)
	return c != nil && c.Status == metav1.ConditionTrue &&
		(c.Reason == v1alpha1.RolloutStartedReason || c.Reason == v1alpha1.RolloutInProgressReason)
}

// serving judges a target that serves the desired version already, the way
// Kubernetes and Argo CD judge the Deployment itself, never worse: another
// manager's rollout (an image upgrade) is not the model's, a capacity change
// (a scale-up, an HPA, minReadySeconds, a pod replaced) is progress, and
// only a failure the Deployment controller reports (its progress deadline)
// is a failure. Nothing here is rolled back.
func (d *decider) serving(dep *appsv1.Deployment) {
	d.st.Phase = v1alpha1.PhaseReady
	switch {
	case progressDeadlineExceeded(dep):
		d.unavailable(stalled)
	case dep.Spec.Paused && !RolloutComplete(dep):
		// Whatever is under way waits for the owner to resume the
		// Deployment (Argo CD: Suspended).
		d.conditions(targetPausedTuple, reconciling)
	case oldTemplatePods(dep):
		d.conditions(deploymentRollingTuple, reconciling)
	case RolloutComplete(dep):
		d.ready(false)
	case dep.Status.AvailableReplicas == 0 || replicaFailure(dep):
		d.unavailable(reconciling)
	default:
		d.conditions(scalingTuple, reconciling)
		d.inFlight()
	}
}

// ready reports the desired spec serving and retains it. rolledOut is true
// when the model's own rollout just completed: only then is it announced
// (RolloutSucceeded) and counted.
func (d *decider) ready(rolledOut bool) {
	created, ok := d.ensureManifest(d.desired)
	if !ok {
		return
	}
	if created {
		// The ConfigMap the pods read was deleted; recreating it under the
		// same content-addressed name needs no rollout.
		d.recordDrift([]Drift{{Field: "configmap " + d.pointerFor(d.desired).cmName, Removed: true}})
	}
	announce := rolledOut || (d.old.Phase != v1alpha1.PhaseReady && d.old.Phase != v1alpha1.PhaseRollingOut)
	d.st.Phase = v1alpha1.PhaseReady
	d.st.ActiveVersion = d.desired.Version
	d.st.AppliedSpecHash = d.hash
	d.st.ManifestConfigMapName = d.pointerFor(d.desired).cmName
	d.st.TargetName = d.desired.TargetRef.Name
	d.st.FailedSpecHash = ""
	d.st.RollbackSpec = nil
	d.st.RollbackRequest = ""
	d.st.RollbackCount = 0
	d.st.RetryStartedAt = nil
	d.st.BakeStartedAt = nil
	d.st.ReplaceInPlace = nil
	d.history = pushHistory(d.history, d.desired, d.now, d.limit)
	setHistory(d.st, d.history)
	if announce && !conditionIs(d.old, v1alpha1.ReadyCondition, metav1.ConditionTrue, "") {
		d.event(corev1.EventTypeNormal, v1alpha1.RolloutSucceededReason, EventMsgRolloutSucceeded)
	}
	d.conditions(readyTuple, settled)
	d.prune()
}

// unavailable reports a Deployment that lost availability while serving the
// desired spec: nothing is rolled back, and Ready returns with the
// Deployment. A failure reported by Kubernetes stalls; otherwise the
// operator waits.
func (d *decider) unavailable(ks kstatus) {
	d.st.Phase = v1alpha1.PhaseReady
	d.conditions(deploymentUnavailableTuple, ks)
}

// rolloutFailed handles a failed rollout of a new desired spec: roll back to
// the newest retained spec when allowed, else fail. The failed spec is held
// until the spec changes or a reset is requested.
//
// A rollback is only recorded here, not applied: the status that says the
// spec failed must be durable before the pointer moves, or a lost status
// write would let the next pass apply the failed spec again. The next pass
// reads the record and applies the rollback (monitor).
func (d *decider) rolloutFailed() {
	if pod, msg := d.unschedulable(d.st.ManifestHash); pod != "" {
		// The deadline passed while a pod of the version waited for a
		// node: the failure names what the scheduler could not find.
		cause := fmt.Sprintf("pod %s of %s could not be scheduled: %s", pod, d.desired.Version, msg)
		d.rolloutFailedWith(EventMsgRolloutFailedPrefix+cause, v1alpha1.UnschedulableReason, MsgUnschedulableFailedPrefix+cause)
		return
	}
	d.rolloutFailedWith(EventMsgRolloutFailed, "", "")
}

// failureCause keeps, while the failed spec is held, the cause a failed
// rollout recorded in Degraded (a pod that could not be scheduled), in
// place of the tuple's general one: the status says why the version
// failed for as long as it holds it, not only in the pass that saw it.
func (d *decider) failureCause(tp tuple) tuple {
	c := apimeta.FindStatusCondition(d.old.Conditions, v1alpha1.DegradedCondition)
	if c != nil && c.Status == metav1.ConditionTrue && c.Reason == v1alpha1.UnschedulableReason && d.st.FailedSpecHash == d.hash {
		tp.degraded = t(c.Reason, c.Message)
	}
	return tp
}

// rolloutFailedWith is rolloutFailed with the event's message and, when
// degradedReason is set, the Degraded condition's reason and message (a
// failed bake says so).
func (d *decider) rolloutFailedWith(eventMsg, degradedReason, degradedMsg string) {
	d.event(corev1.EventTypeWarning, v1alpha1.RolloutFailedReason, eventMsg)
	d.st.RetryStartedAt = nil
	d.st.BakeStartedAt = nil
	d.st.ReplaceInPlace = nil
	d.st.FailedSpecHash = d.hash
	tp, ks := failedTuple, stalled
	r, rollback := AutomaticRollback(d.desired, d.history)
	if rollback {
		tp, ks = autoRollbackTuple, reconciling
	}
	if degradedReason != "" {
		tp.degraded = t(degradedReason, degradedMsg)
	}
	if rollback {
		d.st.Phase = v1alpha1.PhaseRolledBack
		d.st.ActiveVersion = r.Version
		d.st.RollbackSpec = r.DeepCopy()
		d.st.RollbackRequest = AutomaticRollbackPrefix + r.Version
		d.st.RollbackCount++
		d.conditions(tp, ks)
		d.event(corev1.EventTypeNormal, v1alpha1.RollbackStartedReason, EventMsgAutoRollbackStarted)
		d.plan.Requeue = true
		return
	}
	d.st.Phase = v1alpha1.PhaseFailed
	d.conditions(tp, ks)
	d.prune()
}

// heldAfterFailure is a pass over a desired spec that failed: the rollback
// that holds it is applied or watched, or the failure is reported again.
// Nothing re-applies the failed spec.
func (d *decider) heldAfterFailure() {
	if d.st.RollbackSpec != nil {
		d.monitor(*d.st.RollbackSpec, false)
		return
	}
	tp := d.failureCause(failedTuple)
	if conditionIs(d.old, v1alpha1.DegradedCondition, metav1.ConditionTrue, v1alpha1.BakeFailedReason) {
		// The spec failed its bake: every pass that holds it says so.
		tp.degraded = t(v1alpha1.BakeFailedReason, MsgBakeFailed)
	}
	d.st.Phase = v1alpha1.PhaseFailed
	d.conditions(tp, stalled)
	d.prune()
}

// monitor applies a rollback to r when the target does not carry it yet
// (the recorded decision, or another manager's change), then watches it. It
// reports false when a manifest conflict blocks the rollback.
func (d *decider) monitor(r v1alpha1.NormalizedSpec, manual bool) bool {
	dep := d.obs.Deployment
	inProgress, done, failed := d.failureCause(rollbackMonitorTuple), d.failureCause(rollbackSucceededTuple), d.failureCause(rollbackFailedTuple)
	if manual {
		inProgress, done, failed = manualRollbackTuple, manualHeldTuple, rollbackFailedTuple
	}
	d.st.Phase = v1alpha1.PhaseRolledBack
	p := d.pointerFor(r)
	if !p.matches(dep) && p.onlyBookkeeping(dep) {
		// Only the cache's labels are missing (an upgraded install, a
		// shard move, a label somebody removed): they go back on, and the
		// rollback is judged as before.
		if !d.apply(r) {
			return false
		}
	} else if !p.matches(dep) {
		var drift []Drift
		if d.old.AppliedSpecHash == SpecHash(r) {
			drift = d.inPlaceIsNoDrift(p.drift(dep, d.opts.FieldManager), SpecHash(r))
		}
		if !d.apply(r) {
			return false
		}
		d.recordDrift(drift)
		d.conditions(inProgress, reconciling)
		d.inFlight()
		return true
	}
	d.st.ActiveVersion = r.Version
	d.st.AppliedSpecHash = SpecHash(r)
	switch {
	case !ControllerObserved(dep):
		d.conditions(inProgress, reconciling)
		d.inFlight()
	case d.deploymentFailed(dep, time.Time{}):
		d.st.Phase = v1alpha1.PhaseFailed
		d.eventOnChange(corev1.EventTypeWarning, v1alpha1.RollbackFailedReason, EventMsgRollbackFailed, v1alpha1.RollbackFailedReason)
		d.conditions(failed, stalled)
		d.prune()
	case d.replacingInPlace(SpecHash(r)) && RolloutComplete(dep):
		// The rollback replaced every pod in place: the declared strategy
		// goes back on (recorded first; the next pass applies it).
		d.restoreStrategy()
		d.conditions(inProgress, reconciling)
		d.inFlight()
	case RolloutComplete(dep):
		if !conditionIs(d.old, v1alpha1.RolledBackCondition, metav1.ConditionTrue, "") {
			d.event(corev1.EventTypeNormal, v1alpha1.RollbackSucceededReason, EventMsgRollbackSucceeded)
		}
		d.st.ReplaceInPlace = nil
		d.conditions(done, stalled)
		d.prune()
	default:
		// A rollback needs room for a new pod too: without a node for it,
		// it goes on in place like a rollout (whenUnschedulable).
		if pod, _ := d.unschedulable(ManifestHash(r)); pod != "" && !d.replacingInPlace(SpecHash(r)) && !d.restoringStrategy(SpecHash(r)) {
			d.switchInPlace(r, ManifestHash(r))
		}
		d.conditions(inProgress, reconciling)
		d.inFlight()
	}
	return true
}

// manualRollback serves openmed.ai/rollback-to: any retained version, the
// newest spec with it, on the current target. A rejected request changes
// nothing and clears as soon as the annotation does (B3). An accepted one
// holds the resource at that version while the annotation stays; it does not
// mark the desired spec as failed (B15), and once started it is only watched,
// so a failed manual rollback does not loop (B4). The annotation itself is
// the durable record of the decision, so the rollback is applied at once.
func (d *decider) manualRollback(version string) {
	entry, found := findVersion(d.history, version)
	if !found {
		d.st.Phase = v1alpha1.PhaseFailed
		d.eventOnChange(corev1.EventTypeWarning, v1alpha1.RollbackRejectedReason, EventMsgRollbackRejected, v1alpha1.RollbackTargetUnavailableReason)
		d.conditions(rollbackRejectedTuple, stalled)
		return
	}
	r := onTarget(entry.Spec, d.desired)
	request := ManualRollbackPrefix + entry.Version
	if d.old.RollbackRequest == request && d.old.RollbackSpec != nil && SpecHash(*d.old.RollbackSpec) == SpecHash(r) {
		d.monitor(r, true)
		return
	}
	d.st.RollbackSpec = r.DeepCopy()
	d.st.RollbackRequest = request
	d.st.RollbackCount++
	d.st.RetryStartedAt = nil
	d.st.ActiveVersion = r.Version
	if d.monitor(r, true) {
		d.event(corev1.EventTypeNormal, v1alpha1.RollbackStartedReason, EventMsgManualRollback)
	}
}

// prune plans the deletion of owned manifest ConfigMaps that neither the
// target nor any retained or active spec needs. It runs only once a rollout
// has settled, so a pod of an old ReplicaSet never loses its ConfigMap
// mid-rollout (B7).
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
		if ownedBy(cm, d.obj) && !keep[cm.Name] && !contains(d.plan.PruneConfigMaps, cm.Name) {
			d.plan.PruneConfigMaps = append(d.plan.PruneConfigMaps, cm.Name)
		}
	}
	sort.Strings(d.plan.PruneConfigMaps)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// suspend leaves the cluster alone and only says so: phase Suspended, no
// Reconciling or Stalled. Nothing is applied or observed, so the status
// marks the current generation observed only when it cannot be wrong about
// it: the spec hash is the one the conditions were evaluated for (setting
// suspend, or any field outside the normalized spec, changes nothing the
// conditions say), and kstatus reads the resource as Current. A spec
// edited together with suspend (or before the first pass) is not
// evaluated: observedGeneration keeps the generation it last described,
// kstatus reads InProgress until the resource resumes, and Ready says the
// change waits (Flux's rules forbid Ready=True over an older generation).
func (d *decider) suspend() {
	d.st.Phase = v1alpha1.PhaseSuspended
	removeCondition(&d.st.Conditions, v1alpha1.ReconcilingCondition)
	removeCondition(&d.st.Conditions, v1alpha1.StalledCondition)
	evaluated := apimeta.FindStatusCondition(d.st.Conditions, v1alpha1.ReadyCondition) != nil
	if n, err := Normalize(d.obj); err == nil && evaluated && d.old.DesiredSpecHash == SpecHash(n) {
		d.st.ObservedGeneration = d.gen
		return
	}
	if !evaluated {
		// Nothing was ever evaluated: the one condition there is describes
		// this generation truthfully.
		d.st.ObservedGeneration = d.gen
	}
	apimeta.SetStatusCondition(&d.st.Conditions, metav1.Condition{
		Type:               v1alpha1.ReadyCondition,
		Status:             metav1.ConditionFalse,
		Reason:             v1alpha1.SuspendedReason,
		Message:            MsgSuspended,
		ObservedGeneration: d.st.ObservedGeneration,
		LastTransitionTime: d.now,
	})
}

// finalize gives everything back at deletion: the pointer on each
// Deployment the resource claimed, and every ConfigMap it owns. It needs no
// valid spec and no target (B6), and then lets the finalizer go. A Deployment
// that names another owner is left alone with a warning; one the resource
// never claimed is not mentioned at all (B18). What is left to release is
// read from the Deployments themselves (releaseLeft), so a release that
// stopped after its first request is finished here, and the finalizer goes
// only with a pass that found or finished all of it.
func (d *decider) finalize() {
	released, skipped := false, false
	consider := func(dep *appsv1.Deployment) *Release {
		switch {
		case dep == nil:
			return nil
		case foreign(dep, d.owner):
			skipped = true
			return nil
		case d.releaseLeft(dep):
			// The pointer is removed by this release: announce it once, not
			// again for a pass that only finishes the managedFields step.
			released = released || d.ours(dep)
			return d.release(dep)
		}
		return nil
	}
	d.plan.Release = consider(d.obs.Deployment)
	for _, prev := range d.obs.PreviousTargets {
		if prev != nil && (d.obs.Deployment == nil || prev.Name != d.obs.Deployment.Name) {
			if rel := consider(prev); rel != nil {
				d.plan.ReleasePrevious = append(d.plan.ReleasePrevious, rel)
			}
		}
	}
	for i := range d.obs.ConfigMaps {
		if cm := &d.obs.ConfigMaps[i]; ownedBy(cm, d.obj) {
			d.plan.PruneConfigMaps = append(d.plan.PruneConfigMaps, cm.Name)
		}
	}
	sort.Strings(d.plan.PruneConfigMaps)
	if released {
		d.event(corev1.EventTypeNormal, v1alpha1.ModelRemovedReason, EventMsgModelRemoved)
	}
	if skipped {
		d.event(corev1.EventTypeWarning, v1alpha1.ModelRemovalSkippedReason, EventMsgRemovalSkipped)
	}
	d.plan.RemoveFinalizer = true
}

// releaseLeft reports whether dep still needs a release by this resource:
// it carries this resource's pointer or owner annotation (ours), or the
// status records it as possibly written (ClaimedTargets) and, with no other
// owner named, any managedFields entry of the operator's field manager is
// still on it: the trace of a release interrupted halfway, work left
// whatever the annotations say. (A release keeps the owner annotation until
// its last request, so the annotation alone normally tells; the entry
// covers a Deployment whose annotations someone removed.) Another
// resource's entry on a Deployment this one never wrote is not its to
// remove.
func (d *decider) releaseLeft(dep *appsv1.Deployment) bool {
	if foreign(dep, d.owner) {
		return false
	}
	return d.ours(dep) || (slices.Contains(ClaimedTargets(d.old), dep.Name) && carriesEntry(dep, d.opts.FieldManager))
}

// ours reports whether dep carries this resource's pointer: an owner
// annotation (Deployment or pod template) names it, or, with both removed,
// the preload entry references one of its own manifest ConfigMaps. Another
// resource's pointer is never ours, even when the annotations are gone.
func (d *decider) ours(dep *appsv1.Deployment) bool {
	if foreign(dep, d.owner) {
		return false
	}
	if dep.Annotations[v1alpha1.ModelResourceAnnotation] == d.owner ||
		dep.Spec.Template.Annotations[v1alpha1.ModelResourceAnnotation] == d.owner {
		return true
	}
	for _, c := range dep.Spec.Template.Spec.Containers {
		name := pointedConfigMap(dep, c.Name)
		for i := range d.obs.ConfigMaps {
			if cm := &d.obs.ConfigMaps[i]; name != "" && cm.Name == name && ownedBy(cm, d.obj) {
				return true
			}
		}
	}
	return false
}
