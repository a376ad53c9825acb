// Package controllers holds the controller-runtime reconciler of OpenMedModel.
// Each pass reads the caches (observe.go), asks the pure core
// (pkg/rollout.Decide) what to do, makes the changes (execute.go) and writes
// the status once (status.go); pass.go names the steps. The informers of
// other people's objects it reads are in internal/store; what it keeps of
// each model between passes is one record (memory.go). Any
// controller-runtime manager can run it (SetupWithManager, with the cache
// settings of CacheByObject). docs/architecture.md draws the rooms.
package controllers

import (
	"context"
	"fmt"
	"strings"
	"time"

	runtimectrl "github.com/fluxcd/pkg/runtime/controller"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	kevents "k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/openmed/openmed-operator/controllers/internal/store"
	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/rollout"
)

// ControllerName names the controller in logs, events and the status field
// owner.
const ControllerName = "openmed-operator"

// StatusFieldOwner is the field manager of the status patches. It differs
// from the Deployment field manager so the two never share an entry.
const StatusFieldOwner = "openmed-operator-status"

// kopfFinalizer is the finalizer of the Python (Kopf) operator this one
// replaces; a migrated resource
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

	// memory is what the reconciler keeps of each model between passes,
	// one record per model (memory.go); the helpers below are views of it.
	memory      *memory
	retries     *backoff
	unclaimed   *backoff
	wakes       wakes
	quiet       quietPasses
	podWatchers podWatchers
	modelLag    *cacheLag
	manifestLag manifestLag
	written     writtenManifests
	rsVerdicts  replicaSetVerdicts
	// targetLag is the operator's writes to the targets the Deployment
	// store has not shown yet, per Deployment (lag.go).
	targetLag *cacheLag
	// stores are the reconciler's own informers: the claimed Deployments,
	// the manifest ConfigMaps, the pods of baking versions and waiting for
	// a node, the ReplicaSets of baking versions (internal/store).
	stores *store.Stores
	// verifier sends the golden requests (verify.go).
	verifier *verifier
	// shardLabels are the label keys of the shard's selector
	// (Options.Models): carried from a model onto what it writes.
	shardLabels []string
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
	r.memory = newMemory()
	r.retries = newBackoff(r.memory, func(m *modelRecord) **backoffItem { return &m.retries }, r.RetryBaseDelay, r.RetryMaxDelay)
	r.unclaimed = newBackoff(r.memory, func(m *modelRecord) **backoffItem { return &m.unclaimed }, unclaimedRecheck, unclaimedRecheckMax)
	r.wakes, r.quiet, r.podWatchers = wakes{r.memory}, quietPasses{r.memory}, podWatchers{r.memory}
	r.modelLag, r.manifestLag, r.written, r.rsVerdicts = modelCacheLag(r.memory), manifestLag{r.memory}, writtenManifests{r.memory}, replicaSetVerdicts{r.memory}
	r.targetLag = newCacheLag()
	r.shardLabels = ShardLabels(opts.Models)
	r.verifier = newVerifier(r.Writer, r.EventRecorder, r.FieldManager, r.ModelMetrics, r.Clock)
	if err := mgr.Add(r.verifier); err != nil {
		return fmt.Errorf("verifier: %w", err)
	}

	if err := store.AddIndex(ctx, mgr.GetCache(), &v1alpha1.OpenMedModel{}, store.TargetIndexKey, store.IndexModelsByTarget); err != nil {
		return fmt.Errorf("index OpenMedModels by target: %w", err)
	}

	// The stores of the reconciler's own watch with this client.
	watcher, err := client.NewWithWatch(mgr.GetConfig(), client.Options{HTTPClient: mgr.GetHTTPClient(), Scheme: mgr.GetScheme(), Mapper: mapper})
	if err != nil {
		return fmt.Errorf("store client: %w", err)
	}
	cache := mgr.GetCache()
	r.stores, err = store.New(store.Config{
		Client:           watcher,
		Namespace:        opts.Namespace,
		Models:           opts.Models,
		FieldManager:     r.FieldManager,
		DeploymentModels: r.requestsForDeployment,
		InShard: func(key types.NamespacedName) bool {
			return cache.Get(ctx, key, &v1alpha1.OpenMedModel{}, client.UnsafeDisableDeepCopy) == nil
		},
		PodsWatched: r.podWatchers.watched,
		Woke:        func(kind string) { wakeCounter{r.ModelMetrics, kind}.woke() },
	})
	if err != nil {
		return fmt.Errorf("stores: %w", err)
	}

	copts := controller.Options{MaxConcurrentReconciles: opts.MaxConcurrentReconciles}
	if opts.RateLimiter != nil {
		copts.RateLimiter = opts.RateLimiter
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named("openmedmodel").
		For(&v1alpha1.OpenMedModel{}, builder.WithPredicates(countedPredicate(wakeCounter{r.ModelMetrics, wakeModel}, predicate.Or(
			predicate.GenerationChangedPredicate{},
			predicate.AnnotationChangedPredicate{},
			predicate.Funcs{UpdateFunc: r.awaitedUpdate},
		)))).
		WithOptions(copts)
	for _, src := range r.stores.Sources() {
		b = b.WatchesRawSource(src)
	}
	return b.Complete(r)
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
	if err := r.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingFields{store.TargetIndexKey: o.GetName()}, client.UnsafeDisableDeepCopy); err != nil {
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
