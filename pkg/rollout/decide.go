package rollout

import (
	"slices"
	"strings"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	corev1 "k8s.io/api/core/v1"
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
	if observed.Failure == nil && obj.DeletionTimestamp == nil {
		d.verifications()
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
// that persists over passes is reported once (the Kopf operator re-posted it
// every 15 s).
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
// hash). Then the Reconciling or Stalled message is written with the
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
	if !d.resolveTarget() || !d.verifyPointed() {
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
	d.clearFailure()
	return true
}

// clearFailure lifts the failed-spec block and the rollback it started:
// the desired spec may be applied again.
func (d *decider) clearFailure() {
	d.st.FailedSpecHash = ""
	d.st.RollbackSpec = nil
	d.st.RollbackRequest = ""
}

// clearAttempt forgets what one attempt at the desired spec recorded — a
// retry's start, a bake's start, an in-place switch —: the next attempt
// (another spec, or this one retried) starts afresh.
func (d *decider) clearAttempt() {
	d.st.RetryStartedAt = nil
	d.st.BakeStartedAt = nil
	d.st.ReplaceInPlace = nil
}

// blocked reports a blocker. It changes no rollout bookkeeping, so the pass
// after the cause goes away continues where the resource was. The
// watch on a claimed target wakes the resource when the cause goes away;
// the reconciler looks again at a target it has not claimed.
func (d *decider) blocked(tp tuple, phase v1alpha1.Phase, ks kstatus, reason, message string) {
	d.st.Phase = phase
	d.conditions(tp, ks)
	if reason != "" {
		d.eventOnChange(corev1.EventTypeWarning, reason, message, tp.ready.reason)
	}
}
