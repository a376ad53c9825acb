// Package controllers holds the controller-runtime reconciler of OpenMedModel.
// It is thin on purpose: each pass reads the cache, asks the pure core
// (pkg/rollout.Decide) what to do, makes the changes and writes the status
// once. Any controller-runtime manager can run it (SetupWithManager, with the
// cache settings of CacheByObject).
package controllers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	runtimectrl "github.com/fluxcd/pkg/runtime/controller"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	kevents "k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/rollout"
)

// ControllerName names the controller in logs, events and the status field
// owner.
const ControllerName = "openmed-operator"

// StatusFieldOwner is the field manager of the status patches. It differs
// from the Deployment field manager so the two never share an entry.
const StatusFieldOwner = "openmed-operator-status"

// kopfFinalizer is the reference operator's finalizer; a migrated resource
// still carries it and must not keep it, or deletion would wait for Kopf.
const kopfFinalizer = "kopf.zalando.org/KopfFinalizerMarker"

// lagRecheck is how long a pass that found the cache behind the operator's
// own write waits at most; the watch event that brings the write normally
// wakes the resource within milliseconds.
const lagRecheck = 2 * time.Second

// +kubebuilder:rbac:groups=openmed.ai,resources=openmedmodels,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=openmed.ai,resources=openmedmodels/status,verbs=get;patch
// +kubebuilder:rbac:groups=openmed.ai,resources=openmedmodels/finalizers,verbs=update
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=apps,resources=replicasets,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;delete;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get
// ServiceAccounts are read (their metadata, impersonate.go) but not
// impersonated with a cluster-wide right, which would reach kube-system's
// controllers too: the bundle's ClusterRole openmed-impersonator grants it
// where a RoleBinding in a tenant namespace binds it to the operator.
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// OpenMedModelReconciler reconciles OpenMedModel objects.
type OpenMedModelReconciler struct {
	// Client reads through the manager's cache and writes to the API server.
	client.Client
	// APIReader reads around the cache: a target Deployment the cache
	// does not hold (not claimed yet), a manifest ConfigMap create that
	// answered AlreadyExists (to tell an object of ours the cache has not
	// seen yet from a foreign one), a sharded model's manifest ConfigMap
	// labelled for another shard, the node of an unready pod, and the
	// managedFields a replicas release rewrites. Default: the manager's API
	// reader.
	APIReader client.Reader
	// Writer makes the writes of a pass to the target Deployment and the
	// manifest ConfigMaps, as the identity the request's context names
	// (spec.serviceAccountName or DefaultServiceAccount; see impersonate.go).
	// Default: a client on the manager's config that impersonates.
	Writer client.Client
	// DefaultServiceAccount is the ServiceAccount, in the model's
	// namespace, the writes for a model without spec.serviceAccountName are
	// made as (Flux's --default-service-account). Empty: such writes are
	// made with the operator's own rights.
	DefaultServiceAccount string
	// EventRecorder records the core's transition events (Flux's
	// events.Recorder satisfies it and can forward to notification-controller).
	EventRecorder kevents.EventRecorder
	// Metrics are the gotk_* reconcile metrics (optional).
	Metrics *runtimectrl.Metrics
	// ModelMetrics are the openmed_* metrics (optional).
	ModelMetrics *Metrics
	// FieldManager is the server-side apply field manager for the target
	// Deployment; default rollout.DefaultFieldManager.
	FieldManager string
	// RequeueInterval is the first interval of the backstop timer of a
	// rollout in flight (it grows with the wait to rollout.BackstopGrowth
	// times it); default rollout.DefaultRequeueInterval.
	RequeueInterval time.Duration
	// RetryBaseDelay and RetryMaxDelay bound the backoff after a failed
	// pass; defaults RetryBaseDelay and RetryMaxDelay.
	RetryBaseDelay, RetryMaxDelay time.Duration
	// Clock returns the time of a pass; default time.Now. The operator
	// binary passes the API server's clock (serverclock.Clock.Now): the
	// times a pass records are compared with the cluster's.
	Clock func() time.Time

	retries   *backoff
	unclaimed *backoff
	wakes     *wakes
	quiet     *quietPasses
	// podWatchers are the models the bake pod store wakes.
	podWatchers *podWatchers
	modelLag    *cacheLag
	targetLag   *cacheLag
	// manifestLag: the manifest ConfigMaps created and not cached yet.
	manifestLag *manifestLag
	// written: the manifest ConfigMaps created and not recorded yet.
	written *writtenManifests
	pods    *podStore
	pending *podStore
	// replicaSets are the ReplicaSets of baking versions, rsVerdicts what
	// a read told of the others (replicasets.go).
	replicaSets *replicaSetStore
	rsVerdicts  *replicaSetVerdicts
	// deployments are the claimed Deployments (deployments.go).
	deployments *deploymentStore
	// configMaps are the manifest ConfigMaps (configmaps.go).
	configMaps *configMapStore
	// shardLabels are the label keys of the shard's selector
	// (Options.Models): carried from a model onto what it writes.
	shardLabels []string
	// cachesPod reports whether the bake pod store selects a pod of these
	// labels (bakePodSelector).
	cachesPod func(labels map[string]string) bool
	// cachesDeployment says whether the Deployment store selects a
	// Deployment with these labels, cachesConfigMap whether the ConfigMap
	// store selects a ConfigMap with these.
	cachesDeployment, cachesConfigMap func(map[string]string) bool

	mu          sync.Mutex
	rolloutFrom map[types.NamespacedName]time.Time
	unanswered  map[types.NamespacedName]unanswered
}

// Options configure SetupWithManager.
type Options struct {
	// MaxConcurrentReconciles is how many resources reconcile at once.
	MaxConcurrentReconciles int
	// RateLimiter overrides the queue's backoff for passes that end in a
	// conflict; failed passes use the reconciler's own capped backoff.
	RateLimiter workqueue.TypedRateLimiter[reconcile.Request]
	// Namespace is the one namespace the manager's cache watches, "" for
	// all: the reconciler's own stores (claimed Deployments, pods of
	// baking versions, pods waiting for a node) watch the same. A cache of
	// several namespaces is not supported: the stores would watch all.
	Namespace string
	// Models is the shard's selector of OpenMedModels (the operator's
	// --watch-label-selector), the one passed to CacheByObject; nil for
	// all. The model's values of its keys are carried onto the Deployment
	// and ConfigMaps it writes, so the shard's caches hold only its own.
	Models labels.Selector
}

// A target the cache does not hold and that a pass did not claim is read
// again after unclaimedRecheck, doubling up to unclaimedRecheckMax: no watch
// event announces a Deployment no model claimed.
const (
	unclaimedRecheck    = time.Second
	unclaimedRecheckMax = time.Minute
)

// SetupWithManager registers the reconciler, its indexes and its watches:
// OpenMedModels (spec changes and the requestedAt, resetAt and rollback-to
// annotations, plus the status update a pass waits for), owned manifest
// ConfigMaps, and Deployments mapped to the resources that target them.
// A timed requeue happens while a rollout is in flight, and while a
// model's target is outside the cache and not claimed (missing, or without
// the container): no watch event announces a Deployment nobody claimed.
func (r *OpenMedModelReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	if r.FieldManager == "" {
		r.FieldManager = rollout.DefaultFieldManager
	}
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	if r.Clock == nil {
		r.Clock = time.Now
	}
	mapper := RememberMappings(mgr.GetRESTMapper())
	if r.Writer == nil {
		w, err := newWriter(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme(), Mapper: mapper})
		if err != nil {
			return err
		}
		r.Writer = w
	}
	r.retries = newBackoff(r.RetryBaseDelay, r.RetryMaxDelay)
	r.unclaimed = newBackoff(unclaimedRecheck, unclaimedRecheckMax)
	r.wakes, r.quiet, r.podWatchers = newWakes(), newQuietPasses(), newPodWatchers()
	r.shardLabels = ShardLabels(opts.Models)
	deployments := shardSelector(opts.Models, v1alpha1.ClaimedLabel, "true")
	r.cachesDeployment = func(l map[string]string) bool { return deployments.Matches(labels.Set(l)) }
	configMaps := shardSelector(opts.Models, v1alpha1.ManagedByLabel, v1alpha1.ManagedByValue)
	r.cachesConfigMap = func(l map[string]string) bool { return configMaps.Matches(labels.Set(l)) }
	r.modelLag, r.targetLag, r.manifestLag, r.written = newCacheLag(), newCacheLag(), newManifestLag(), newWrittenManifests()

	if err := addIndex(ctx, mgr.GetCache(), &v1alpha1.OpenMedModel{}, targetIndexKey, indexModelsByTarget); err != nil {
		return fmt.Errorf("index OpenMedModels by target: %w", err)
	}

	// The stores of the reconciler's own watch with this client.
	watcher, err := client.NewWithWatch(mgr.GetConfig(), client.Options{HTTPClient: mgr.GetHTTPClient(), Scheme: mgr.GetScheme(), Mapper: mapper})
	if err != nil {
		return fmt.Errorf("store client: %w", err)
	}
	// The claimed Deployments, in a store of their own (see deployments.go).
	if r.deployments, err = newDeploymentStore(watcher, opts.Namespace, deployments, r.shardLabels, r.FieldManager, r.requestsForDeployment); err != nil {
		return fmt.Errorf("Deployment store: %w", err)
	}
	// The manifest ConfigMaps, in another (see configmaps.go), waking their
	// controller model as Owns would.
	if r.configMaps, err = newConfigMapStore(watcher, opts.Namespace, configMaps, r.shardLabels); err != nil {
		return fmt.Errorf("ConfigMap store: %w", err)
	}
	// The pods of baking versions, in another (see pods.go).
	bakePods := bakePodSelector(opts.Models)
	r.cachesPod = func(l map[string]string) bool { return bakePods.Matches(labels.Set(l)) }
	if r.pods, err = newBakePodStore(watcher, opts.Namespace, bakePods); err != nil {
		return fmt.Errorf("pod store: %w", err)
	}
	// Their ReplicaSets, which carry the same labels (see replicasets.go).
	if r.replicaSets, err = newReplicaSetStore(watcher, opts.Namespace, bakePods); err != nil {
		return fmt.Errorf("ReplicaSet store: %w", err)
	}
	r.rsVerdicts = newReplicaSetVerdicts()
	// The pods waiting for a node, in another (see pending.go).
	if r.pending, err = newPendingPodStore(watcher, opts.Namespace); err != nil {
		return fmt.Errorf("pending pod store: %w", err)
	}

	if len(r.shardLabels) > 0 {
		cache := mgr.GetCache()
		inShard := func(key types.NamespacedName) bool {
			return cache.Get(ctx, key, &v1alpha1.OpenMedModel{}, client.UnsafeDisableDeepCopy) == nil
		}
		r.pods.models, r.pending.models = inShard, inShard
	}
	r.deployments.wakeCounter, r.configMaps.wakeCounter = wakeCounter{r.ModelMetrics, wakeDeployment}, wakeCounter{r.ModelMetrics, wakeConfigMap}
	r.pods.wakeCounter, r.pending.wakeCounter = wakeCounter{r.ModelMetrics, wakeBakePod}, wakeCounter{r.ModelMetrics, wakePendingPod}
	r.pods.watched = r.podWatchers.watched

	copts := controller.Options{MaxConcurrentReconciles: opts.MaxConcurrentReconciles}
	if opts.RateLimiter != nil {
		copts.RateLimiter = opts.RateLimiter
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("openmedmodel").
		For(&v1alpha1.OpenMedModel{}, builder.WithPredicates(countedPredicate(wakeCounter{r.ModelMetrics, wakeModel}, predicate.Or(
			predicate.GenerationChangedPredicate{},
			predicate.AnnotationChangedPredicate{},
			predicate.Funcs{UpdateFunc: r.awaitedUpdate},
		)))).
		WatchesRawSource(r.configMaps).
		WatchesRawSource(r.deployments).
		WatchesRawSource(r.pods).
		WatchesRawSource(r.pending).
		WatchesRawSource(r.replicaSets).
		WithOptions(copts).
		Complete(r)
}

// awaitedUpdate lets through the status update a pass is waiting for (see
// cacheLag); other status-only updates are the operator's own and wake
// nothing.
func (r *OpenMedModelReconciler) awaitedUpdate(e event.UpdateEvent) bool {
	key := client.ObjectKeyFromObject(e.ObjectNew)
	if !r.modelLag.waiting(key) {
		return false
	}
	// The awaited write has arrived when the new version is not one the
	// record lists; the record goes, and the pass it woke decides.
	r.modelLag.behind(key, e.ObjectNew.GetUID(), e.ObjectNew.GetResourceVersion(), 0)
	return true
}

// requestsForDeployment maps a Deployment to the OpenMedModels that target it
// or name it in their owner annotation.
func (r *OpenMedModelReconciler) requestsForDeployment(ctx context.Context, o client.Object) []reconcile.Request {
	// A version the operator did not write ends the wait for its own.
	r.targetLag.behind(client.ObjectKeyFromObject(o), o.GetUID(), o.GetResourceVersion(), o.GetGeneration())
	var list v1alpha1.OpenMedModelList
	// Only the models' names are read: the cache hands out its own objects
	// instead of a deep copy of each (a wave of Deployment events would
	// copy every model it touches).
	if err := r.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingFields{targetIndexKey: o.GetName()}, client.UnsafeDisableDeepCopy); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "list OpenMedModels for Deployment", "Deployment", klogRef(o))
		return nil
	}
	seen := map[types.NamespacedName]bool{}
	var reqs []reconcile.Request
	add := func(key types.NamespacedName) {
		if !seen[key] {
			seen[key] = true
			reqs = append(reqs, reconcile.Request{NamespacedName: key})
		}
	}
	for i := range list.Items {
		add(client.ObjectKeyFromObject(&list.Items[i]))
	}
	if owner := o.GetAnnotations()[v1alpha1.ModelResourceAnnotation]; owner != "" {
		if ns, name, ok := strings.Cut(owner, "/"); ok && ns == o.GetNamespace() {
			add(types.NamespacedName{Namespace: ns, Name: name})
		}
	}
	return reqs
}

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
	p.plan = r.decide(p)
	if len(p.plan.ReadConfigMaps) > 0 {
		// The target may point at a manifest ConfigMap only once its
		// content is known: read it and decide again.
		if err := r.readConfigMaps(ctx, p); err != nil {
			return r.report(ctx, p, &rollout.Failure{Step: rollout.StepInternal, Kind: classify(err), Detail: err.Error()}, version), nil
		}
		p.plan = r.decide(p)
	}
	if p.plan.ReadPods {
		// The bake ends in this pass unless the pods, as the API server
		// has them, show a failure the pod store has not received yet.
		if err := r.readBakePods(ctx, p); err != nil {
			return r.report(ctx, p, &rollout.Failure{Step: rollout.StepInternal, Kind: classify(err), Detail: err.Error()}, version), nil
		}
		p.plan = r.decide(p)
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
		r.unclaimed.forget(p.key)
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
		r.retries.forget(p.key)
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

// unanswered is a pass whose status write got no answer (a reset
// connection, a timeout, a 5xx): the write may have taken effect. Its
// events and metrics are recorded by the first later pass that reads that
// very status, and dropped by one that reads another.
type unanswered struct {
	pass *pass
	// base is the resourceVersion the write was conditional on.
	base string
}

// holdUnanswered keeps a pass whose status write may have taken effect
// without an answer. A 409 or another 4xx answer says it did not.
func (r *OpenMedModelReconciler) holdUnanswered(p *pass, err error) {
	if apierrors.IsConflict(err) || classify(err) != rollout.Transient || apierrors.IsNotFound(err) || apierrors.IsTooManyRequests(err) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.unanswered == nil {
		r.unanswered = map[types.NamespacedName]unanswered{}
	}
	r.unanswered[p.key] = unanswered{pass: p, base: p.obj.ResourceVersion}
}

func (r *OpenMedModelReconciler) dropUnanswered(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.unanswered, key)
}

// recordUnanswered settles the unanswered write of key against obj, the
// resource as this pass read it: a status equal to the one the write sent
// means it took effect, and its events and metrics are recorded now; any
// other newer version means it did not. The same version as the write's
// precondition settles nothing yet.
func (r *OpenMedModelReconciler) recordUnanswered(key types.NamespacedName, obj *v1alpha1.OpenMedModel) {
	r.mu.Lock()
	u, ok := r.unanswered[key]
	if ok && obj.ResourceVersion != u.base {
		delete(r.unanswered, key)
	}
	r.mu.Unlock()
	if ok && obj.ResourceVersion != u.base && apiequality.Semantic.DeepEqual(obj.Status, u.pass.plan.Status) {
		r.record(u.pass)
	}
}

// observe reads what Decide needs from the cache: the target Deployment,
// every other Deployment the status records as possibly written (a
// retarget's previous targets), and the manifest ConfigMaps the
// resource owns (through the owner index, so a pass costs the same however
// many other resources there are); a target outside the cache is read
// from the API server (targetDeployment). It reports targetWaiting when the
// cache has not caught up with the operator's last write to a target, or
// with a manifest ConfigMap the operator created for the model: the pass
// then waits for that watch event.
//
// readAround is set when a pod's ReplicaSet was read from the API server
// (targetReplicaSets).
func (r *OpenMedModelReconciler) observe(ctx context.Context, obj *v1alpha1.OpenMedModel, readAround *bool) (rollout.Observed, targetRead, error) {
	observed := rollout.Observed{Now: metav1.NewTime(r.Clock())}
	var read targetRead
	if obj.UID != "" {
		cms := r.configMaps.owned(obj.Namespace, obj.UID)
		// A ConfigMap this operator created for the model and the store
		// does not show yet is waited for, before any read around the
		// cache, not created again.
		if r.manifestLag.missing(types.NamespacedName{Namespace: obj.Namespace, Name: obj.Name}, obj.UID, cms) {
			return observed, targetWaiting, nil
		}
		observed.ConfigMaps = cms
		observed.WrittenConfigMaps = r.written.unrecorded(types.NamespacedName{Namespace: obj.Namespace, Name: obj.Name}, obj.Status.VerifiedConfigMaps)
	}
	desired, previous := rollout.TargetNames(obj)
	var err error
	observed.Deployment, read, err = r.targetDeployment(ctx, obj.Namespace, desired)
	if err != nil {
		return observed, read, err
	}
	for _, name := range previous {
		if read == targetWaiting {
			break
		}
		prev, prevRead, err := r.targetDeployment(ctx, obj.Namespace, name)
		if err != nil {
			return observed, read, err
		}
		if prevRead == targetWaiting {
			read = targetWaiting
		}
		if prev != nil {
			observed.PreviousTargets = append(observed.PreviousTargets, prev)
		}
	}
	if observed.Deployment != nil && bakes(obj) {
		observed.Pods = r.pods.pods(rollout.OwnerKey(obj))
		observed.PodsHidden = r.podsHidden(observed.Deployment)
		observed.NotReadyNodes = r.notReadyNodes(ctx, observed.Pods)
	}
	if observed.Deployment != nil {
		observed.PendingPods = r.pending.pods(rollout.OwnerKey(obj))
	}
	if observed.Deployment != nil {
		observed.ReplicaSets, *readAround, err = r.targetReplicaSets(ctx, client.ObjectKeyFromObject(obj), observed.Deployment, judgedPods(observed.Pods, observed.PendingPods)...)
		if err != nil {
			return observed, read, err
		}
	}
	if obj.UID != "" {
		// A claimed target in the cache says its model's ConfigMaps carry
		// the same labels; one outside it may not.
		if read == targetDirect {
			cm, err := r.unlabelledManifest(ctx, obj, observed.ConfigMaps)
			if err != nil {
				return observed, read, err
			}
			if cm != nil {
				observed.ConfigMaps = append(observed.ConfigMaps, *cm)
				observed.ConfigMapContents = append(observed.ConfigMapContents, *cm)
			}
		}
		sort.Slice(observed.ConfigMaps, func(i, j int) bool { return observed.ConfigMaps[i].Name < observed.ConfigMaps[j].Name })
	}
	return observed, read, nil
}

// readConfigMaps reads from the API server the manifest ConfigMaps the
// plan must know the content of (rollout.Plan.ReadConfigMaps), whole, into
// the observed contents. One that is gone leaves the observed ConfigMaps
// (the store has not caught up with its deletion): the pass decides
// without it.
func (r *OpenMedModelReconciler) readConfigMaps(ctx context.Context, p *pass) error {
	p.readAround = true
	for _, name := range p.plan.ReadConfigMaps {
		cm := &corev1.ConfigMap{}
		err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: p.obj.Namespace, Name: name}, cm)
		switch {
		case apierrors.IsNotFound(err):
			p.observed.ConfigMaps = slices.DeleteFunc(p.observed.ConfigMaps, func(cm corev1.ConfigMap) bool { return cm.Name == name })
		case err != nil:
			return fmt.Errorf("read the manifest ConfigMap %s/%s of OpenMedModel %s: %w", p.obj.Namespace, name, p.key, err)
		default:
			p.observed.ConfigMapContents = append(p.observed.ConfigMapContents, *cm)
		}
	}
	return nil
}

// readBakePods reads from the API server, for the pass that ends a bake
// (rollout.Plan.ReadPods), the pods of the baking version: one list, by the
// target's own pod selector, the bake label and the pod template hashes of
// the version's ReplicaSets (rollout.BakePodSelector), kept as the pod
// store keeps them. The pass then judges these instead of the store's.
func (r *OpenMedModelReconciler) readBakePods(ctx context.Context, p *pass) error {
	var pods []corev1.Pod
	target := p.observed.Deployment
	var sel labels.Selector
	if p.observed.PodsHidden {
		// The store holds none of them: all the target's pods that bake.
		sel = rollout.TargetBakePodSelector(r.targetSelector(target))
	} else {
		sel = rollout.BakePodSelector(r.targetSelector(target), p.observed.Pods, target.Namespace, p.observed.ReplicaSets, p.plan.Status.ManifestHash)
	}
	if sel != nil {
		list := &corev1.PodList{}
		if err := r.APIReader.List(ctx, list, client.InNamespace(target.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
			return fmt.Errorf("read the pods of the baking version of OpenMedModel %s: %w", p.key, err)
		}
		owner := rollout.OwnerKey(p.obj)
		for i := range list.Items {
			kept, _ := compactPod(&list.Items[i])
			if b, ok := kept.(*bakePod); ok && b.owner == owner {
				pods = append(pods, b.pod())
			}
		}
	}
	p.observed.Pods, p.observed.PodsRead = pods, true
	p.observed.NotReadyNodes = r.notReadyNodes(ctx, pods)
	rs, _, err := r.targetReplicaSets(ctx, p.key, target, judgedPods(pods, p.observed.PendingPods)...)
	if err != nil {
		return err
	}
	p.observed.ReplicaSets = rs
	return nil
}

// podsHidden reports whether the pod store cannot see the pods of the
// Deployment d (rollout.Observed.PodsHidden): in a shard, its template
// carries the bake label without the shard's labels (the model moved here,
// or its pods were made before the operator carried the labels; the next
// version's template carries them).
func (r *OpenMedModelReconciler) podsHidden(d *appsv1.Deployment) bool {
	l := d.Spec.Template.Labels
	return len(r.shardLabels) > 0 && l[v1alpha1.BakeLabel] == "true" && !r.cachesPod(l)
}

// targetSelector is the target's spec.selector: as read around the cache,
// or as the Deployment store keeps it (its Deployments are rebuilt
// without it). Nil when neither has it.
func (r *OpenMedModelReconciler) targetSelector(d *appsv1.Deployment) labels.Selector {
	if d.Spec.Selector != nil {
		if sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector); err == nil && !sel.Empty() {
			return sel
		}
		return nil
	}
	return r.deployments.podSelector(types.NamespacedName{Namespace: d.Namespace, Name: d.Name})
}

// unlabelledManifest reads, in a sharded operator whose pass found the
// target outside the cache (the model just moved to this shard, or the
// install was upgraded), the manifest ConfigMap the model's status names
// when the shard's cache does not hold it: one created before the shard
// labels were carried, or labelled for the shard the model moved from. The core then sees it exists (no create, no
// "removed" drift) and plans its labels. Nil when there is nothing to read,
// or it is not the model's.
func (r *OpenMedModelReconciler) unlabelledManifest(ctx context.Context, obj *v1alpha1.OpenMedModel, cached []corev1.ConfigMap) (*corev1.ConfigMap, error) {
	name := obj.Status.ManifestConfigMapName
	if len(r.shardLabels) == 0 || name == "" || slices.ContainsFunc(cached, func(cm corev1.ConfigMap) bool { return cm.Name == name }) {
		return nil, nil
	}
	cm := &corev1.ConfigMap{}
	if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: obj.Namespace, Name: name}, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("read ConfigMap %s/%s: %w", obj.Namespace, name, err)
	}
	if ref := metav1.GetControllerOfNoCopy(cm); ref == nil || ref.UID != obj.UID {
		return nil, nil
	}
	return cm, nil
}

// targetRead says where a pass found its target Deployment.
type targetRead int

const (
	// targetCached: in the cache (claimed by the operator).
	targetCached targetRead = iota
	// targetDirect: read from the API server (found or not); the cache does not hold it
	// (no model claimed it yet, or it was claimed before ClaimedLabel).
	targetDirect
	// targetWaiting: the cache has not caught up with the operator's own
	// write to it (or to a manifest ConfigMap of the model); the pass
	// waits for the watch event.
	targetWaiting
)

// notReadyNodes reads, around the cache, the nodes of the pods that are
// unready, and returns those whose Ready condition is not True (a node
// that stopped heartbeating reads Unknown) or that are gone. Nodes are not
// cached: a bake reads one only while a pod on it is unready, so a cluster
// of healthy pods costs no request. A node the operator may not read is
// taken as Ready (the pod is judged as before) and logged.
func (r *OpenMedModelReconciler) notReadyNodes(ctx context.Context, pods []corev1.Pod) []string {
	var out, seen []string
	for i := range pods {
		p := &pods[i]
		node := p.Spec.NodeName
		if !readsNode(p) || slices.Contains(seen, node) {
			continue
		}
		seen = append(seen, node)
		n := &corev1.Node{}
		err := r.APIReader.Get(ctx, types.NamespacedName{Name: node}, n)
		switch {
		case apierrors.IsNotFound(err):
			out = append(out, node)
		case err != nil:
			ctrl.LoggerFrom(ctx).Error(err, "read the node of an unready pod; judging the pod as on a Ready node", "Node", node)
		case !nodeReady(n):
			out = append(out, node)
		}
	}
	return out
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// targetDeployment reads a Deployment the model targets, or targeted. The
// Deployment store holds the Deployments the operator claimed
// (ClaimedLabel, and the shard's labels); one it does not hold is read from
// the API server, once per pass: a target no model claimed yet (the first rollout's one extra
// request), a Deployment claimed before the label existed (labelled by the
// pass's apply, without a roll), or one whose label somebody removed. One
// the operator just wrote and the cache does not show yet is waited for.
func (r *OpenMedModelReconciler) targetDeployment(ctx context.Context, namespace, name string) (*appsv1.Deployment, targetRead, error) {
	key := types.NamespacedName{Namespace: namespace, Name: name}
	if dep := r.deployments.get(key); dep != nil {
		if r.targetLag.behind(key, dep.UID, dep.ResourceVersion, dep.Generation) {
			return nil, targetWaiting, nil
		}
		return dep, targetCached, nil
	}
	if r.targetLag.expecting(key) {
		// Written by the operator: the watch event that brings the claim
		// (or takes a finished release out) has not arrived yet.
		return nil, targetWaiting, nil
	}
	dep := &appsv1.Deployment{}
	if err := r.APIReader.Get(ctx, key, dep); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, targetDirect, nil
		}
		return nil, targetDirect, fmt.Errorf("read Deployment %s: %w", key, err)
	}
	return dep, targetDirect, nil
}

// patchStatus writes the planned status in one merge patch guarded by the
// resourceVersion the pass read, and nothing when it is unchanged: a steady
// pass makes no write at all. The patch is the merge diff of the status
// alone (metadata.resourceVersion is the precondition), so a write costs
// what changed, not two encodings of the whole object.
func (r *OpenMedModelReconciler) patchStatus(ctx context.Context, p *pass) error {
	if apiequality.Semantic.DeepEqual(p.obj.Status, p.plan.Status) {
		return nil
	}
	rv := p.obj.ResourceVersion
	diff, err := statusMergePatch(p.obj.Status, p.plan.Status)
	if err != nil {
		return err
	}
	body := fmt.Appendf(nil, `{"metadata":{"resourceVersion":%q},"status":%s}`, rv, diff)
	answer, err := r.patchModelStatus(ctx, p.obj, body)
	if err != nil {
		if !p.obj.DeletionTimestamp.IsZero() && apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("patch status of OpenMedModel %s/%s: %w", p.obj.Namespace, p.obj.Name, err)
	}
	// The patch applied to exactly the status the pass read (the
	// resourceVersion precondition): the model now holds the plan's status.
	p.obj.ResourceVersion, p.obj.Status = answer, p.plan.Status
	p.modelRVs = append(p.modelRVs, rv)
	return nil
}

// patchModelStatus sends a JSON merge patch of obj's status subresource and
// returns the resourceVersion the API server stored it as. The answer is
// asked for as metadata only (PartialObjectMetadata, in protobuf): the pass
// already holds the status it sent, and decoding the whole model from JSON
// once per status write was a tenth of what the operator allocated.
func (r *OpenMedModelReconciler) patchModelStatus(ctx context.Context, obj *v1alpha1.OpenMedModel, body []byte) (string, error) {
	answer := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: obj.Namespace, Name: obj.Name}}
	answer.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("OpenMedModel"))
	if err := r.Status().Patch(ctx, answer, client.RawPatch(types.MergePatchType, body), client.FieldOwner(StatusFieldOwner)); err != nil {
		return "", err
	}
	return answer.ResourceVersion, nil
}

// recordClaims writes the plan's write-ahead record before any of its
// writes: the Deployments it writes to that the status does not list yet
// join status.claimedTargets, in one status patch guarded by the
// resourceVersion the pass read. Should the pass's own status write be lost
// afterwards (a conflict with a spec edit, a crash), the next pass still
// finds every Deployment the operator may have written and releases it on
// a retarget or at deletion. Nothing is written when the plan claims no
// new Deployment (an upgrade, a steady pass).
func (r *OpenMedModelReconciler) recordClaims(ctx context.Context, p *pass) error {
	if len(p.plan.ClaimTargets) == 0 {
		return nil
	}
	claimed := rollout.ClaimedTargets(&p.obj.Status)
	for _, name := range p.plan.ClaimTargets {
		if !slices.Contains(claimed, name) {
			claimed = append(claimed, name)
		}
	}
	slices.Sort(claimed)
	list, err := json.Marshal(claimed)
	if err != nil {
		return err
	}
	rv := p.obj.ResourceVersion
	body := fmt.Appendf(nil, `{"metadata":{"resourceVersion":%q},"status":{"claimedTargets":%s}}`, rv, list)
	answer, err := r.patchModelStatus(ctx, p.obj, body)
	if err != nil {
		return fmt.Errorf("record the claimed targets of OpenMedModel %s/%s: %w", p.obj.Namespace, p.obj.Name, err)
	}
	// p.obj now holds what the server stored: the pass's status write is
	// guarded by its resourceVersion and diffs against its status.
	p.obj.ResourceVersion, p.obj.Status.ClaimedTargets = answer, claimed
	p.modelRVs = append(p.modelRVs, rv)
	return nil
}

// statusMergePatch is the JSON merge patch from one status to another.
func statusMergePatch(from, to v1alpha1.OpenMedModelStatus) ([]byte, error) {
	a, err := json.Marshal(from)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(to)
	if err != nil {
		return nil, err
	}
	return mergePatch(a, b)
}

// mergePatch returns the JSON merge patch (RFC 7386) from the JSON object
// from to the JSON object to, as json-patch's CreateMergePatch does: a key
// to lacks is null, a key whose value differs gets to's value, and where
// both values are objects the patch holds their merge patch instead. It
// decodes one level of each object at a time into raw values, not the whole
// documents into maps of interfaces: a status write made the operator
// allocate several times the status's size in json-patch.
func mergePatch(from, to []byte) ([]byte, error) {
	var a, b map[string]json.RawMessage
	if err := json.Unmarshal(from, &a); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(to, &b); err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(a)+len(b))
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	out := append(make([]byte, 0, len(to)), '{')
	for _, k := range keys {
		av, inA := a[k]
		bv, inB := b[k]
		var v []byte
		switch {
		case !inB:
			v = []byte("null")
		case !inA:
			v = bv
		case bytes.Equal(av, bv):
			continue
		case isJSONObject(av) && isJSONObject(bv):
			sub, err := mergePatch(av, bv)
			if err != nil {
				return nil, err
			}
			v = sub
		default:
			v = bv
		}
		key, err := json.Marshal(k)
		if err != nil {
			return nil, err
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(append(append(out, key...), ':'), v...)
	}
	return append(out, '}'), nil
}

// isJSONObject reports whether a raw JSON value is an object.
func isJSONObject(v []byte) bool {
	v = bytes.TrimLeft(v, " \t\r\n")
	return len(v) > 0 && v[0] == '{'
}

// record emits the plan's events and updates the metrics after the status
// that carries them was written.
func (r *OpenMedModelReconciler) record(p *pass) {
	obj, plan := p.obj, &p.plan
	now := r.Clock()
	for _, e := range plan.Events {
		if r.EventRecorder != nil {
			r.EventRecorder.Eventf(obj, nil, e.Type, e.Reason, e.Reason, "%s", e.Message)
		}
		switch e.Reason {
		case v1alpha1.RolloutStartedReason:
			r.rolloutStarted(p.key, now)
		case v1alpha1.RollbackStartedReason:
			trigger := rollbackAutomatic
			if strings.HasPrefix(plan.Status.RollbackRequest, rollout.ManualRollbackPrefix) {
				trigger = rollbackManual
			}
			r.ModelMetrics.countRollback(obj.Namespace, trigger)
		case v1alpha1.RolloutSucceededReason:
			r.ModelMetrics.rolloutEnded(obj.Namespace, rolloutSucceeded, r.rolloutDuration(p.key, now))
		case v1alpha1.RolloutFailedReason:
			r.ModelMetrics.rolloutEnded(obj.Namespace, rolloutFailed, r.rolloutDuration(p.key, now))
		}
	}
	for _, d := range plan.Drift {
		managers := d.Managers
		if len(managers) == 0 {
			managers = []string{""}
		}
		for _, m := range managers {
			r.ModelMetrics.countDrift(m)
		}
	}
	for _, c := range plan.Conflicts {
		r.ModelMetrics.countConflict(c.Manager, c.Field)
	}
	if plan.BakeFailure != "" {
		r.ModelMetrics.countBakeFailure(obj.Namespace, plan.BakeFailure)
	}
	if plan.RemoveFinalizer {
		r.ModelMetrics.deleteModel(obj.Namespace, obj.Name)
		return
	}
	ready := apimeta.FindStatusCondition(plan.Status.Conditions, v1alpha1.ReadyCondition)
	s := modelState{version: plan.Status.ActiveVersion, phase: string(plan.Status.Phase), ready: string(metav1.ConditionUnknown),
		stalled: apimeta.IsStatusConditionTrue(plan.Status.Conditions, v1alpha1.StalledCondition)}
	if ready != nil {
		s.ready, s.reason = string(ready.Status), ready.Reason
	}
	r.ModelMetrics.setModelInfo(obj.Namespace, obj.Name, s)
}

// recordGotk records Flux's per-object gauges (Ready and suspend, four
// series per model); once the finalizer is gone it deletes them.
func (r *OpenMedModelReconciler) recordGotk(ctx context.Context, obj *v1alpha1.OpenMedModel) {
	if r.Metrics != nil {
		r.Metrics.RecordSuspend(ctx, obj, obj.Spec.Suspend)
		r.Metrics.RecordReadiness(ctx, obj)
	}
}

// rolloutStarted and rolloutDuration time a model rollout from the pass
// that started it, in memory: the duration metric is an observation, not a
// record, so a restart mid-rollout only loses one sample.
func (r *OpenMedModelReconciler) rolloutStarted(key types.NamespacedName, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rolloutFrom == nil {
		r.rolloutFrom = map[types.NamespacedName]time.Time{}
	}
	r.rolloutFrom[key] = now
}

func (r *OpenMedModelReconciler) rolloutDuration(key types.NamespacedName, now time.Time) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	start, ok := r.rolloutFrom[key]
	if !ok {
		return -1
	}
	delete(r.rolloutFrom, key)
	return now.Sub(start)
}

// forget drops what the reconciler remembers of a resource that is gone.
func (r *OpenMedModelReconciler) forget(key types.NamespacedName) {
	r.ModelMetrics.deleteModel(key.Namespace, key.Name)
	r.retries.forget(key)
	r.unclaimed.forget(key)
	r.wakes.forget(key)
	r.podWatchers.forget(key)
	r.quiet.forget(key)
	r.modelLag.forget(key)
	r.manifestLag.forget(key)
	r.rsVerdicts.forget(key)
	r.written.forget(key)
	r.mu.Lock()
	delete(r.rolloutFrom, key)
	delete(r.unanswered, key)
	r.mu.Unlock()
}

// dropKopfFinalizer removes the reference operator's finalizer from a
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

func klogRef(o client.Object) string { return o.GetNamespace() + "/" + o.GetName() }
