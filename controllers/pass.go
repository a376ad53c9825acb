// pass.go: one reconcile pass: observe, ask rollout.Decide, act, write the
// status once. The steps are named methods of the reconciler.

package controllers

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/rollout"
)

// pass is one reconcile of one resource: what it read, decided and did.
type pass struct {
	key      types.NamespacedName
	obj      *v1alpha1.OpenMedModel
	observed rollout.Observed
	plan     rollout.Plan
	// modelRVs are the resourceVersions of obj this pass moved on from.
	modelRVs []string
	// releaseLeft: a release of this pass met a newer Deployment and is
	// decided again by the next pass; the finalizer stays.
	releaseLeft bool
	// wake is what the timer the pass asks for is for (wokeBackstop, ...):
	// the next pass counts it in openmed_passes_total when the timer, not
	// a watch event, wakes it.
	wake string
	// quiet is what the pass leaves for the next backstop pass (quietAfter).
	quiet *quiet
	// readAround: the pass read a pod's ReplicaSet from the API server.
	readAround bool
}

// requeue asks for the next pass after d, for cause.
func (p *pass) requeue(cause string, d time.Duration) ctrl.Result {
	p.wake = cause
	return ctrl.Result{RequeueAfter: d}
}

// Reconcile runs one pass for one OpenMedModel: read the cache, decide,
// act, and write the status in one request on every path (a failed step,
// even a recovered panic, is reported in the same pass).
func (r *OpenMedModelReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	p := &pass{key: req.NamespacedName, obj: &v1alpha1.OpenMedModel{}}
	cause := r.wakes.woken(p.key, time.Now())
	r.ModelMetrics.countPass(cause)
	if last, ok := r.quiet.take(p.key); ok && cause == wokeBackstop {
		if result, same := r.unchanged(ctx, p, last); same {
			r.ModelMetrics.countUnchanged()
			r.quiet.keep(p.key, last)
			r.wakes.scheduled(p.key, time.Now(), result, nil, p.wake)
			return result, nil
		}
	}
	result, err := r.reconcile(ctx, req, p)
	if p.quiet != nil {
		r.quiet.keep(p.key, *p.quiet)
	}
	r.wakes.scheduled(p.key, time.Now(), result, err, p.wake)
	return result, err
}

// reconcile is Reconcile's pass; p.wake says why it asks for the next one.
func (r *OpenMedModelReconciler) reconcile(ctx context.Context, req ctrl.Request, p *pass) (result ctrl.Result, retErr error) {
	log := ctrl.LoggerFrom(ctx)
	if err := r.Get(ctx, req.NamespacedName, p.obj); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if r.modelLag.behind(p.key, p.obj.UID, p.obj.ResourceVersion, 0) {
		return p.requeue(wokeCacheLag, lagRecheck), nil
	}
	r.recordUnanswered(p.key, p.obj)
	version := retryVersion(p.obj)
	defer func() {
		if v := recover(); v != nil {
			log.Error(fmt.Errorf("%v", v), "pass panicked; reporting it")
			result, retErr = r.report(ctx, p, &rollout.Failure{Step: rollout.StepInternal, Kind: rollout.Transient}, version), nil
		}
	}()

	// A resource being deleted without our finalizer is not ours to hold.
	if !p.obj.DeletionTimestamp.IsZero() && !controllerutil.ContainsFinalizer(p.obj, v1alpha1.Finalizer) {
		return ctrl.Result{}, r.dropKopfFinalizer(ctx, p.obj)
	}
	// The finalizer goes on first, so a deletion can never race past a
	// pointer we are about to set. The pass goes on with the answer.
	if p.obj.DeletionTimestamp.IsZero() && !controllerutil.ContainsFinalizer(p.obj, v1alpha1.Finalizer) {
		base := p.obj.DeepCopy()
		controllerutil.AddFinalizer(p.obj, v1alpha1.Finalizer)
		controllerutil.RemoveFinalizer(p.obj, kopfFinalizer)
		if err := r.Patch(ctx, p.obj, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
			return r.retry(ctx, p, reasonFinalizerWriteFailed, fmt.Errorf("add finalizer to OpenMedModel %s: %w", req, err))
		}
		p.modelRVs = append(p.modelRVs, base.ResourceVersion)
	}

	// The pass reads the bake pod store: their events wake the model until
	// the pass decided it judges no bake (podWatchers).
	r.podWatchers.watch(p.key)
	observed, read, err := r.observe(ctx, p.obj, &p.readAround)
	p.observed = observed
	switch {
	case err != nil:
		return r.report(ctx, p, &rollout.Failure{Step: rollout.StepInternal, Kind: classify(err), Detail: err.Error()}, version), nil
	case read == targetWaiting:
		r.modelLag.wrote(p.key, p.obj.UID, 0, p.modelRVs...)
		return p.requeue(wokeCacheLag, lagRecheck), nil
	}
	if err := r.decideReading(ctx, p); err != nil {
		return r.report(ctx, p, &rollout.Failure{Step: rollout.StepInternal, Kind: classify(err), Detail: err.Error()}, version), nil
	}
	if p.plan.ReadPods {
		// The bake ends in this pass unless the pods, as the API server
		// has them, show a failure the pod store has not received yet.
		err := r.readBakePods(ctx, p)
		if err == nil {
			err = r.decideReading(ctx, p)
		}
		if err != nil {
			return r.report(ctx, p, &rollout.Failure{Step: rollout.StepInternal, Kind: classify(err), Detail: err.Error()}, version), nil
		}
	}
	if !p.plan.WatchesPods {
		r.podWatchers.unwatch(p.key)
	}
	if err := r.recordClaims(ctx, p); err != nil {
		if apierrors.IsConflict(err) {
			// The resource changed since the pass read it: nothing was
			// written, decide again on the newer version.
			r.modelLag.wrote(p.key, p.obj.UID, 0, p.modelRVs...)
			return p.requeue(wokeCacheLag, lagRecheck), nil
		}
		return r.retry(ctx, p, reasonStatusWriteFailed, err)
	}
	out := r.execute(ctx, p)
	switch {
	case out.stale:
		// Decided on an old view of the target: decide again once the
		// cache shows the newer version (its watch event wakes the pass).
		r.modelLag.wrote(p.key, p.obj.UID, 0, p.modelRVs...)
		return p.requeue(wokeCacheLag, lagRecheck), nil
	case out.failure != nil:
		return r.report(ctx, p, out.failure, version), nil
	}
	p.releaseLeft = out.releaseLeft
	result, err = r.finish(ctx, p)
	if err == nil && read == targetDirect && p.plan.ApplyDeployment == nil && p.obj.DeletionTimestamp.IsZero() {
		// A target outside the cache that this pass did not claim (missing,
		// without the container, ...): nothing wakes the model when it
		// changes, so the pass is repeated, from 1 s doubling to a minute.
		if after := r.unclaimed.next(p.key, version); result.RequeueAfter == 0 || after < result.RequeueAfter {
			result = p.requeue(wokeUnclaimed, after)
		}
	} else if read == targetCached {
		r.unclaimed.reset(p.key)
	}
	if err == nil {
		p.quiet = quietAfter(p, read)
	}
	return result, err
}

// decide runs the core on what the pass observed.
func (r *OpenMedModelReconciler) decide(p *pass) rollout.Plan {
	return rollout.Decide(p.obj, p.observed, rollout.Options{FieldManager: r.FieldManager, RequeueInterval: r.RequeueInterval,
		DefaultServiceAccount: r.DefaultServiceAccount, ShardLabels: r.shardLabels})
}

// report decides again with the failed step as an input and writes the
// status that says so.
func (r *OpenMedModelReconciler) report(ctx context.Context, p *pass, failure *rollout.Failure, version string) ctrl.Result {
	p.observed.Failure = failure
	if p.observed.Now.IsZero() {
		p.observed.Now = metav1.NewTime(r.Clock())
	}
	p.plan = r.decide(p)
	reason := readyReason(&p.plan.Status)
	r.ModelMetrics.countError(reason)
	result, err := r.finish(ctx, p)
	delay := r.retries.next(p.key, version)
	if err != nil || result.RequeueAfter == 0 || result.RequeueAfter > delay {
		result = p.requeue(wokeRetry, delay)
	}
	return result
}

// retry ends a pass whose failure cannot be reported in status (the status
// write itself, or the finalizer): it is logged, counted and retried with
// the capped backoff.
func (r *OpenMedModelReconciler) retry(ctx context.Context, p *pass, reason string, err error) (ctrl.Result, error) {
	if apierrors.IsConflict(err) {
		// Somebody else wrote first; decide again on their version.
		return ctrl.Result{Requeue: true}, nil
	}
	ctrl.LoggerFrom(ctx).Error(err, "pass failed; retrying", "reason", reason)
	r.ModelMetrics.countError(reason)
	return p.requeue(wokeRetry, r.retries.next(p.key, retryVersion(p.obj))), nil
}

// retryVersion identifies what a user can change about a resource: its
// generation and annotations. A change starts the retry backoff afresh.
func retryVersion(obj *v1alpha1.OpenMedModel) string {
	keys := make([]string, 0, len(obj.Annotations))
	for k, v := range obj.Annotations {
		keys = append(keys, k+"="+v)
	}
	sort.Strings(keys)
	return fmt.Sprint(obj.Generation) + "|" + strings.Join(keys, "|")
}

// finish writes the status, records the events and metrics, and lets the
// finalizer go once deletion is done.
func (r *OpenMedModelReconciler) finish(ctx context.Context, p *pass) (ctrl.Result, error) {
	if err := r.patchStatus(ctx, p); err != nil {
		r.holdUnanswered(p, err)
		return r.retry(ctx, p, reasonStatusWriteFailed, err)
	}
	r.dropUnanswered(p.key)
	if len(p.plan.Verify) > 0 && r.verifier != nil &&
		!r.verifier.enqueue(p.key, p.obj.UID, rollout.WritesAs(p.obj, r.DefaultServiceAccount), p.obj.Spec.Verification, p.plan.Verify) {
		// The verifier's queue is full: the pass asks again shortly.
		if p.plan.RequeueAfter == 0 || p.plan.RequeueAfter > verifyQueueFull {
			p.plan.RequeueAfter, p.plan.Backstop = verifyQueueFull, false
		}
	}
	deleting := !p.obj.DeletionTimestamp.IsZero()
	if !deleting || !p.releaseLeft {
		// A deletion pass whose release is decided again announces it
		// with the pass that finishes it.
		r.record(p)
	}
	if p.plan.RemoveFinalizer && p.observed.Failure == nil && !p.releaseLeft {
		base := p.obj.DeepCopy()
		controllerutil.RemoveFinalizer(p.obj, v1alpha1.Finalizer)
		controllerutil.RemoveFinalizer(p.obj, kopfFinalizer)
		if err := r.Patch(ctx, p.obj, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
			return r.retry(ctx, p, reasonFinalizerWriteFailed, client.IgnoreNotFound(err))
		}
		r.recordGotk(ctx, p.obj)
		r.forget(p.key)
		return ctrl.Result{}, nil
	}
	r.recordGotk(ctx, p.obj)
	r.modelLag.wrote(p.key, p.obj.UID, 0, p.modelRVs...)
	if p.observed.Failure == nil {
		r.retries.reset(p.key)
	}
	switch {
	case p.plan.Requeue, p.releaseLeft:
		// The status just written records a decision the next pass acts
		// on, or a release met a newer Deployment; the next pass runs once
		// the cache shows the writes.
		return p.requeue(wokeFollowUp, time.Millisecond), nil
	case p.plan.Backstop:
		return p.requeue(wokeBackstop, p.plan.RequeueAfter), nil
	default:
		return p.requeue(wokeTimer, p.plan.RequeueAfter), nil
	}
}

// decideReading runs the core on what the pass observed, and reads what
// its plan asks to know of manifest ConfigMaps (rollout.Plan.ReadConfigMaps)
// before deciding again: the target may point at one only once its content
// is known. A read copy decides for its name, so each round asks for other
// names; the ConfigMaps a decision consults (the one the target points at,
// the desired version's, a rollback's) are read in three rounds at most.
func (r *OpenMedModelReconciler) decideReading(ctx context.Context, p *pass) error {
	p.plan = r.decide(p)
	for round := 0; len(p.plan.ReadConfigMaps) > 0; round++ {
		if round == 3 {
			return errManifestsMoving
		}
		if err := r.readConfigMaps(ctx, p); err != nil {
			return err
		}
		p.plan = r.decide(p)
	}
	return nil
}

// errManifestsMoving fails a pass whose decisions kept asking to read
// manifest ConfigMaps of new names (see decideReading).
var errManifestsMoving = errors.New("the pass kept asking to read manifest ConfigMaps")

// dropKopfFinalizer removes the finalizer of the Python (Kopf) operator this one replaces from a
// resource we no longer hold, so a migrated resource can be deleted.
func (r *OpenMedModelReconciler) dropKopfFinalizer(ctx context.Context, obj *v1alpha1.OpenMedModel) error {
	if !controllerutil.ContainsFinalizer(obj, kopfFinalizer) {
		return nil
	}
	base := obj.DeepCopy()
	controllerutil.RemoveFinalizer(obj, kopfFinalizer)
	return client.IgnoreNotFound(r.Patch(ctx, obj, client.MergeFrom(base)))
}

func readyReason(st *v1alpha1.OpenMedModelStatus) string {
	if c := apimeta.FindStatusCondition(st.Conditions, v1alpha1.ReadyCondition); c != nil {
		return c.Reason
	}
	return ""
}
