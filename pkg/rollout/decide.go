package rollout

import (
	"sort"
	"strings"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// DefaultRequeueInterval is how often a pass is repeated while a rollout or
// rollback is in flight.
const DefaultRequeueInterval = 15 * time.Second

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
	// RequeueInterval is Plan.RequeueAfter while a rollout is in flight.
	// Default DefaultRequeueInterval.
	RequeueInterval time.Duration
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

// RecordApplied stores the target Deployment's metadata.generation returned
// by applying p.ApplyDeployment when that apply changed the pod template,
// that is, started a rollout: the next passes judge readiness and failure by
// the Deployment status of that generation or later, never an older one.
// Decide predicts the value (the observed generation plus one); the
// reconciler replaces the prediction with the server's answer. It does
// nothing for a plan whose apply starts no rollout, or without an apply.
func (p *Plan) RecordApplied(generation int64) {
	if p.ApplyDeployment != nil && p.recordGeneration {
		p.Status.TargetDeploymentGeneration = generation
	}
}

// Decide is the whole rollout state machine: from the resource (spec,
// annotations, status, deletion state) and the cluster state observed for
// one pass it returns the new status and the changes to make. It reads no
// clock, calls no API and does not modify obj or observed, so the same
// inputs always give the same plan.
//
// A pass, in order: deletion releases the target; a suspended resource is
// left alone; an invalid spec stalls; the target is resolved (missing
// Deployment, missing container, another owner: each re-evaluated on every
// pass); a manual rollback request is served; a failed desired spec stays
// held; otherwise the desired spec is applied, observed, and either reaches
// Ready, is rolled back, or is reported unavailable. When nothing needs to
// change the plan holds no change and its Status equals obj.Status.
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
	case obj.DeletionTimestamp != nil:
		d.finalize()
	case obj.Spec.Suspend:
		d.suspend()
	default:
		d.reconcile()
	}
	d.plan.Status = *d.st
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
	if ks == reconciling {
		d.plan.RequeueAfter = d.opts.RequeueInterval
	}
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

	// A new resetAt value lifts the failed-spec block once (helm-controller's
	// convention): the desired spec is tried again.
	if v := d.obj.Annotations[v1alpha1.ResetRequestAnnotation]; v != "" && v != d.old.LastHandledResetAt {
		d.st.LastHandledResetAt = v
		d.st.FailedSpecHash = ""
	}

	if !d.resolveTarget() {
		return
	}
	if v := strings.TrimSpace(d.obj.Annotations[v1alpha1.RollbackToAnnotation]); v != "" {
		d.manualRollback(v)
		return
	}
	if d.st.FailedSpecHash == d.hash {
		d.heldAfterFailure()
		return
	}
	d.rollout()
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
	if prev := d.obs.PreviousTarget; prev != nil && prev.Name != dep.Name {
		if d.ours(prev) {
			d.plan.ReleasePrevious = d.release(prev)
		}
		d.st.TargetName = dep.Name
	}
	return true
}

// blocked reports a blocker. It changes no rollout bookkeeping, so the pass
// after the cause goes away continues where the resource was (B2).
func (d *decider) blocked(tp tuple, phase v1alpha1.Phase, ks kstatus, reason, message string) {
	d.st.Phase = phase
	d.conditions(tp, ks)
	if reason != "" {
		d.eventOnChange(corev1.EventTypeWarning, reason, message, tp.ready.reason)
	}
}

// foreign reports whether the Deployment names another owner.
func foreign(dep *appsv1.Deployment, owner string) bool {
	v := dep.Annotations[v1alpha1.ModelResourceAnnotation]
	return v != "" && v != owner
}

// pointerFor is the operator's intent for spec on the desired target.
func (d *decider) pointerFor(spec v1alpha1.NormalizedSpec) pointer {
	hash := ManifestHash(spec)
	return pointer{spec: spec, owner: d.owner, cmName: ManifestConfigMapName(spec.ManifestConfigMapName, hash), manifestHash: hash}
}

// ensureManifest plans the ConfigMap of spec when it does not exist. It
// reports false, with a ManifestConflict blocker, when the name is taken by
// an object the resource does not own, or by an owned one with other
// content (immutable, so it is deleted and recreated on the next pass).
func (d *decider) ensureManifest(spec v1alpha1.NormalizedSpec) (created, ok bool) {
	want := ManifestConfigMap(d.obj, spec)
	for i := range d.obs.ConfigMaps {
		cm := &d.obs.ConfigMaps[i]
		if cm.Name != want.Name {
			continue
		}
		if configMapMatches(cm, want, d.obj) {
			return false, true
		}
		if ownedBy(cm, d.obj) {
			d.plan.PruneConfigMaps = append(d.plan.PruneConfigMaps, cm.Name)
		}
		d.blocked(manifestConflictTuple, v1alpha1.PhasePending, reconciling, "", "")
		return false, false
	}
	d.plan.EnsureConfigMaps = append(d.plan.EnsureConfigMaps, want)
	return true, true
}

// apply plans the ConfigMap and the Deployment pointer for spec and records
// them in the status. It reports false when a manifest conflict blocks it.
func (d *decider) apply(spec v1alpha1.NormalizedSpec) bool {
	if _, ok := d.ensureManifest(spec); !ok {
		return false
	}
	dep := d.obs.Deployment
	p := d.pointerFor(spec)
	d.plan.ApplyDeployment = DeploymentIntent(spec, d.owner, p.cmName, p.manifestHash)
	d.plan.Claim = dep.Annotations[v1alpha1.ModelResourceAnnotation] == ""
	d.st.AppliedSpecHash = SpecHash(spec)
	d.st.ManifestConfigMapName = p.cmName
	d.st.TargetName = spec.TargetRef.Name
	// A new pod template starts a rollout (a new ReplicaSet): from then on
	// only a Deployment status of that generation or later counts. Changes
	// to replicas, strategy or deadline alone start none, and keep the
	// generation a settled resource is judged by, so correcting them never
	// flips Ready while the Deployment controller catches up.
	if p.templateChanged(dep) {
		d.st.TargetDeploymentGeneration = dep.Generation + 1
		d.plan.recordGeneration = true
	}
	return true
}

// rollout drives the desired spec: apply it when it changed or the target
// does not carry it, then watch the Deployment until it is Ready, fails or
// loses availability.
func (d *decider) rollout() {
	dep := d.obs.Deployment
	p := d.pointerFor(d.desired)
	matches := p.matches(dep)
	changed := d.old.DesiredSpecHash != d.hash
	active := d.old.Phase == v1alpha1.PhaseRollingOut || d.old.Phase == v1alpha1.PhaseReady
	g := d.old.TargetDeploymentGeneration
	// The desired spec already served from this target: a failure now is
	// the Deployment's, not the model's (B5, B12).
	proven := len(d.history) > 0 && d.history[0].SpecHash == d.hash

	switch {
	case changed && matches && DeploymentReady(dep, desiredReplicas(d.desired.Replicas, dep), g):
		// The new desired spec is the one the target already serves (a
		// revert to the version a rollback restored): there is nothing to
		// roll, and no Deployment event would ever come to say so.
		d.ready()
	case changed:
		d.start(v1alpha1.SpecChangedReason, nil)
	case !matches && !active:
		d.start(v1alpha1.InitialRolloutReason, nil)
	case DeploymentFailed(dep, g) && proven:
		d.unavailable(stalled)
	case DeploymentFailed(dep, g):
		d.rolloutFailed()
	case !matches:
		d.correctDrift(p)
	case DeploymentReady(dep, desiredReplicas(d.desired.Replicas, dep), g):
		d.ready()
	case proven && d.old.Phase != v1alpha1.PhaseRollingOut:
		d.unavailable(reconciling)
	default:
		d.st.Phase = v1alpha1.PhaseRollingOut
		d.st.AppliedSpecHash = d.hash
		d.conditions(rollingTuple, reconciling)
	}
}

// start applies the desired spec and reports the rollout started.
func (d *decider) start(reason string, drift []Drift) {
	if !d.apply(d.desired) {
		return
	}
	d.st.Phase = v1alpha1.PhaseRollingOut
	d.st.FailedSpecHash = ""
	d.st.RollbackSpec = nil
	d.st.RollbackRequest = ""
	d.conditions(startTuple(reason), reconciling)
	if reason == v1alpha1.DriftCorrectedReason {
		d.driftEvent(drift)
		return
	}
	d.event(corev1.EventTypeNormal, v1alpha1.RolloutStartedReason, EventMsgRolloutStarted)
}

// correctDrift re-applies the desired spec after another field manager
// changed fields the operator owns. A change that rolls the pods is a new
// rollout; one that does not (replicas, strategy, deadline, the Deployment
// annotation) is corrected without leaving Ready.
func (d *decider) correctDrift(p pointer) {
	dep := d.obs.Deployment
	drift := DetectDrift(dep, d.desired, p.owner, p.cmName, p.manifestHash, d.opts.FieldManager)
	d.plan.Drift = drift
	if p.templateChanged(dep) || d.old.Phase != v1alpha1.PhaseReady {
		d.start(v1alpha1.DriftCorrectedReason, drift)
		return
	}
	if d.apply(d.desired) {
		d.driftEvent(drift)
	}
}

func (d *decider) driftEvent(drift []Drift) {
	parts := make([]string, len(drift))
	for i, x := range drift {
		parts[i] = x.String()
	}
	msg := EventMsgDriftCorrected + "."
	if len(parts) > 0 {
		msg = EventMsgDriftCorrected + ": " + strings.Join(parts, "; ") + "."
	}
	d.event(corev1.EventTypeNormal, v1alpha1.DriftCorrectedReason, msg)
}

// ready reports the desired spec serving and retains it.
func (d *decider) ready() {
	created, ok := d.ensureManifest(d.desired)
	if !ok {
		return
	}
	if created {
		// The ConfigMap the pods read was deleted; recreating it under the
		// same content-addressed name needs no rollout.
		d.driftEvent([]Drift{{Field: "configmap " + d.pointerFor(d.desired).cmName}})
	}
	d.st.Phase = v1alpha1.PhaseReady
	d.st.ActiveVersion = d.desired.Version
	d.st.AppliedSpecHash = d.hash
	d.st.ManifestConfigMapName = d.pointerFor(d.desired).cmName
	d.st.TargetName = d.desired.TargetRef.Name
	d.st.FailedSpecHash = ""
	d.st.RollbackSpec = nil
	d.st.RollbackRequest = ""
	d.st.RollbackCount = 0
	d.history = pushHistory(d.history, d.desired, d.now, d.limit)
	setHistory(d.st, d.history)
	if !conditionIs(d.old, v1alpha1.ReadyCondition, metav1.ConditionTrue, "") {
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
func (d *decider) rolloutFailed() {
	d.event(corev1.EventTypeWarning, v1alpha1.RolloutFailedReason, EventMsgRolloutFailed)
	if d.desired.RolloutStrategy.RollbackOnFailure && len(d.history) > 0 {
		r := onTarget(d.history[0].Spec, d.desired)
		if !d.apply(r) {
			return
		}
		d.st.Phase = v1alpha1.PhaseRolledBack
		d.st.ActiveVersion = r.Version
		d.st.FailedSpecHash = d.hash
		d.st.RollbackSpec = r.DeepCopy()
		d.st.RollbackRequest = AutomaticRollbackPrefix + r.Version
		d.st.RollbackCount++
		d.conditions(autoRollbackTuple, reconciling)
		d.event(corev1.EventTypeNormal, v1alpha1.RollbackStartedReason, EventMsgAutoRollbackStarted)
		return
	}
	d.st.Phase = v1alpha1.PhaseFailed
	d.st.FailedSpecHash = d.hash
	d.conditions(failedTuple, stalled)
	d.prune()
}

// heldAfterFailure is a pass over a desired spec that failed: the rollback
// that holds it is watched, or the failure is reported again. Nothing
// re-applies the failed spec.
func (d *decider) heldAfterFailure() {
	if d.st.RollbackSpec != nil {
		d.monitor(*d.st.RollbackSpec, false)
		return
	}
	d.st.Phase = v1alpha1.PhaseFailed
	d.conditions(failedTuple, stalled)
	d.prune()
}

// monitor watches a rollback to r without applying it again, except to
// correct drift of the fields the operator owns.
func (d *decider) monitor(r v1alpha1.NormalizedSpec, manual bool) {
	dep := d.obs.Deployment
	g := d.old.TargetDeploymentGeneration
	inProgress, done := rollbackMonitorTuple, rollbackSucceededTuple
	if manual {
		inProgress, done = manualRollbackTuple, manualHeldTuple
	}
	if DeploymentFailed(dep, g) {
		d.st.Phase = v1alpha1.PhaseFailed
		d.eventOnChange(corev1.EventTypeWarning, v1alpha1.RollbackFailedReason, EventMsgRollbackFailed, v1alpha1.RollbackFailedReason)
		d.conditions(rollbackFailedTuple, stalled)
		d.prune()
		return
	}
	p := d.pointerFor(r)
	if !p.matches(dep) {
		drift := DetectDrift(dep, r, p.owner, p.cmName, p.manifestHash, d.opts.FieldManager)
		if !d.apply(r) {
			return
		}
		d.plan.Drift = drift
		d.driftEvent(drift)
		d.st.Phase = v1alpha1.PhaseRolledBack
		d.conditions(inProgress, reconciling)
		return
	}
	d.st.Phase = v1alpha1.PhaseRolledBack
	d.st.ActiveVersion = r.Version
	d.st.AppliedSpecHash = SpecHash(r)
	if !DeploymentReady(dep, desiredReplicas(r.Replicas, dep), g) {
		d.conditions(inProgress, reconciling)
		return
	}
	if !conditionIs(d.old, v1alpha1.RolledBackCondition, metav1.ConditionTrue, "") {
		d.event(corev1.EventTypeNormal, v1alpha1.RollbackSucceededReason, EventMsgRollbackSucceeded)
	}
	d.conditions(done, stalled)
	d.prune()
}

// manualRollback serves openmed.ai/rollback-to: any retained version, the
// newest spec with it, on the current target. A rejected request changes
// nothing and clears as soon as the annotation does (B3). An accepted one
// holds the resource at that version while the annotation stays; it does not
// mark the desired spec as failed (B15), and once started it is only watched,
// so a failed manual rollback does not loop (B4).
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
	if !d.apply(r) {
		return
	}
	d.st.Phase = v1alpha1.PhaseRolledBack
	d.st.ActiveVersion = r.Version
	d.st.RollbackSpec = r.DeepCopy()
	d.st.RollbackRequest = request
	d.st.RollbackCount++
	d.conditions(manualRollbackTuple, reconciling)
	d.event(corev1.EventTypeNormal, v1alpha1.RollbackStartedReason, EventMsgManualRollback)
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
		keep[ManifestConfigMapName(e.Spec.ManifestConfigMapName, e.ManifestHash)] = true
		keep[ManifestConfigMapName(d.desired.ManifestConfigMapName, e.ManifestHash)] = true
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
// Reconciling or Stalled, every other condition as it was. The generation is
// marked observed (kstatus reads a suspended resource as Current), so the
// kept conditions are re-stamped with it; a resource suspended before its
// first pass gets Ready=Unknown, since Flux requires a Ready condition.
func (d *decider) suspend() {
	d.st.Phase = v1alpha1.PhaseSuspended
	d.st.ObservedGeneration = d.gen
	apimeta.RemoveStatusCondition(&d.st.Conditions, v1alpha1.ReconcilingCondition)
	apimeta.RemoveStatusCondition(&d.st.Conditions, v1alpha1.StalledCondition)
	for i := range d.st.Conditions {
		d.st.Conditions[i].ObservedGeneration = d.gen
	}
	if apimeta.FindStatusCondition(d.st.Conditions, v1alpha1.ReadyCondition) == nil {
		apimeta.SetStatusCondition(&d.st.Conditions, metav1.Condition{
			Type:               v1alpha1.ReadyCondition,
			Status:             metav1.ConditionUnknown,
			Reason:             v1alpha1.SuspendedReason,
			Message:            MsgSuspended,
			ObservedGeneration: d.gen,
			LastTransitionTime: d.now,
		})
	}
}

// finalize gives everything back at deletion: the pointer on each
// Deployment the resource claimed, and every ConfigMap it owns. It needs no
// valid spec and no target (B6), and then lets the finalizer go. A Deployment
// that names another owner is left alone with a warning; one the resource
// never claimed is not mentioned at all (B18).
func (d *decider) finalize() {
	released, skipped := false, false
	consider := func(dep *appsv1.Deployment) *Release {
		switch {
		case dep == nil:
			return nil
		case foreign(dep, d.owner):
			skipped = true
			return nil
		case d.ours(dep):
			released = true
			return d.release(dep)
		}
		return nil
	}
	d.plan.Release = consider(d.obs.Deployment)
	if prev := d.obs.PreviousTarget; prev != nil && (d.obs.Deployment == nil || prev.Name != d.obs.Deployment.Name) {
		d.plan.ReleasePrevious = consider(prev)
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

// ours reports whether the operator wrote its pointer to dep for this
// resource: the owner annotation (Deployment or pod template) names it, or,
// with no owner named, the operator's field manager holds fields there.
func (d *decider) ours(dep *appsv1.Deployment) bool {
	if foreign(dep, d.owner) {
		return false
	}
	if dep.Annotations[v1alpha1.ModelResourceAnnotation] == d.owner ||
		dep.Spec.Template.Annotations[v1alpha1.ModelResourceAnnotation] == d.owner {
		return true
	}
	for _, e := range dep.ManagedFields {
		if e.Manager == d.opts.FieldManager && e.Operation == metav1.ManagedFieldsOperationApply {
			return true
		}
	}
	return false
}
