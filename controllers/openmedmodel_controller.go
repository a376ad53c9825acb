// Package controllers holds the controller-runtime reconciler of OpenMedModel.
// It is thin on purpose: each pass reads the cluster, asks the pure core
// (pkg/rollout.Decide) what to do, applies the plan and writes the status
// once. Any controller-runtime manager can run it (SetupWithManager).
package controllers

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	runtimectrl "github.com/fluxcd/pkg/runtime/controller"
	"github.com/fluxcd/pkg/runtime/patch"
	"github.com/fluxcd/pkg/ssa"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kevents "k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/rollout"
)

// ControllerName names the controller in logs, events and the status field
// owner ("gotk-" style: the status patches use StatusFieldOwner).
const ControllerName = "openmed-operator"

// StatusFieldOwner is the field manager of the status patches. It differs
// from the Deployment field manager so the two never share an entry.
const StatusFieldOwner = "openmed-operator-status"

// kopfFinalizer is the reference operator's finalizer; a migrated resource
// still carries it and must not keep it, or deletion would wait for Kopf.
const kopfFinalizer = "kopf.zalando.org/KopfFinalizerMarker"

// targetIndexKey indexes OpenMedModels by the Deployment they target.
const targetIndexKey = ".openmed.targetName"

// +kubebuilder:rbac:groups=openmed.ai,resources=openmedmodels,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=openmed.ai,resources=openmedmodels/status,verbs=get;patch
// +kubebuilder:rbac:groups=openmed.ai,resources=openmedmodels/finalizers,verbs=update
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// OpenMedModelReconciler reconciles OpenMedModel objects.
type OpenMedModelReconciler struct {
	// Client reads through the manager's cache and writes to the API server.
	client.Client
	// APIReader reads around the cache: the resource and its target at the
	// start of each pass (so decisions never rest on a stale status), and
	// objects the cache does not hold (a ConfigMap of someone else that
	// occupies a name we need). Default: the manager's API reader.
	APIReader client.Reader
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
	// RequeueInterval is how often a pass repeats while a rollout is in
	// flight; default rollout.DefaultRequeueInterval.
	RequeueInterval time.Duration
	// Clock returns the time of a pass; default time.Now.
	Clock func() time.Time

	resources *ssa.ResourceManager
}

// Options configure SetupWithManager.
type Options struct {
	// MaxConcurrentReconciles is how many resources reconcile at once.
	MaxConcurrentReconciles int
	// RateLimiter overrides controller-runtime's default backoff.
	RateLimiter workqueue.TypedRateLimiter[reconcile.Request]
}

// SetupWithManager registers the reconciler, its index and its watches:
// OpenMedModels (spec changes and the requestedAt, resetAt and rollback-to
// annotations), owned manifest ConfigMaps, and Deployments mapped to the
// resources that target them. Nothing is polled: a timed requeue happens
// only while a rollout is in flight.
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
	r.resources = ssa.NewResourceManager(r.Client, nil, ssa.Owner{Field: r.FieldManager, Group: v1alpha1.GroupVersion.Group})

	if err := mgr.GetFieldIndexer().IndexField(ctx, &v1alpha1.OpenMedModel{}, targetIndexKey, func(o client.Object) []string {
		obj := o.(*v1alpha1.OpenMedModel)
		desired, previous := rollout.TargetNames(obj)
		if previous != "" {
			return []string{desired, previous}
		}
		return []string{desired}
	}); err != nil {
		return fmt.Errorf("index OpenMedModels by target: %w", err)
	}

	copts := controller.Options{MaxConcurrentReconciles: opts.MaxConcurrentReconciles}
	if opts.RateLimiter != nil {
		copts.RateLimiter = opts.RateLimiter
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("openmedmodel").
		For(&v1alpha1.OpenMedModel{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{},
			predicate.AnnotationChangedPredicate{},
		))).
		Owns(&corev1.ConfigMap{}).
		Watches(&appsv1.Deployment{}, handler.EnqueueRequestsFromMapFunc(r.requestsForDeployment)).
		WithOptions(copts).
		Complete(r)
}

// requestsForDeployment maps a Deployment to the OpenMedModels that target it
// or name it in their owner annotation.
func (r *OpenMedModelReconciler) requestsForDeployment(ctx context.Context, o client.Object) []reconcile.Request {
	var list v1alpha1.OpenMedModelList
	if err := r.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingFields{targetIndexKey: o.GetName()}); err != nil {
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

// Reconcile runs one pass for one OpenMedModel.
func (r *OpenMedModelReconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, retErr error) {
	start := time.Now()
	log := ctrl.LoggerFrom(ctx)

	// The cache decides whether the resource is ours at all: it holds only
	// the namespaces and the shard (label selector) this manager watches.
	obj := &v1alpha1.OpenMedModel{}
	if err := r.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			r.ModelMetrics.deleteModel(req.Namespace, req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	// Its content, and the target's, are read from the API server: a pass
	// is often triggered by the watch event of our own Deployment apply,
	// before the cache has seen the status we wrote with it, and a decision
	// on a stale status would repeat or undo it.
	if err := r.APIReader.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			r.ModelMetrics.deleteModel(req.Namespace, req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if r.Metrics != nil {
		defer func() {
			r.Metrics.RecordDuration(ctx, obj, start)
			r.Metrics.RecordSuspend(ctx, obj, obj.Spec.Suspend)
			r.Metrics.RecordReadiness(ctx, obj)
		}()
	}

	// A resource being deleted without our finalizer is not ours to hold.
	if !obj.DeletionTimestamp.IsZero() && !controllerutil.ContainsFinalizer(obj, v1alpha1.Finalizer) {
		return ctrl.Result{}, r.dropKopfFinalizer(ctx, obj)
	}
	// The finalizer goes on first, in its own write, so a deletion can never
	// race past a pointer we are about to set.
	if obj.DeletionTimestamp.IsZero() && !controllerutil.ContainsFinalizer(obj, v1alpha1.Finalizer) {
		base := obj.DeepCopy()
		controllerutil.AddFinalizer(obj, v1alpha1.Finalizer)
		controllerutil.RemoveFinalizer(obj, kopfFinalizer)
		if err := r.Patch(ctx, obj, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
			return ctrl.Result{}, fmt.Errorf("add finalizer to OpenMedModel %s: %w", req, err)
		}
	}

	observed, err := r.observe(ctx, obj)
	if err != nil {
		return ctrl.Result{}, err
	}
	plan := rollout.Decide(obj, observed, rollout.Options{FieldManager: r.FieldManager, RequeueInterval: r.RequeueInterval})

	if err := r.execute(ctx, obj, observed, &plan); err != nil {
		// The planned status claims the changes happened; it is not written.
		// The next pass observes what did happen and decides again.
		if apierrors.IsConflict(err) {
			log.V(1).Info("conflict while applying the plan; retrying", "error", err.Error())
			return ctrl.Result{Requeue: true}, nil
		}
		return ctrl.Result{}, err
	}

	// A rollout's duration runs from the Reconciling transition it started.
	var rolloutStart *metav1.Time
	if c := apimeta.FindStatusCondition(obj.Status.Conditions, meta.ReconcilingCondition); c != nil {
		rolloutStart = &c.LastTransitionTime
	}
	if err := r.patchStatus(ctx, obj, plan.Status); err != nil {
		return ctrl.Result{}, err
	}
	r.record(obj, &plan, rolloutStart)

	if plan.RemoveFinalizer {
		base := obj.DeepCopy()
		controllerutil.RemoveFinalizer(obj, v1alpha1.Finalizer)
		controllerutil.RemoveFinalizer(obj, kopfFinalizer)
		if err := r.Patch(ctx, obj, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
		r.ModelMetrics.deleteModel(obj.Namespace, obj.Name)
		return ctrl.Result{}, nil
	}
	r.ModelMetrics.setModelInfo(obj.Namespace, obj.Name, obj.Status.ActiveVersion, string(obj.Status.Phase))
	return ctrl.Result{RequeueAfter: plan.RequeueAfter}, nil
}

// observe reads what Decide needs: the target Deployment, the previous
// target after a retarget, and the manifest ConfigMaps of the resource plus
// any object occupying the name the desired manifest needs.
func (r *OpenMedModelReconciler) observe(ctx context.Context, obj *v1alpha1.OpenMedModel) (rollout.Observed, error) {
	observed := rollout.Observed{Now: metav1.NewTime(r.Clock())}
	desired, previous := rollout.TargetNames(obj)
	var err error
	if observed.Deployment, err = r.getDeployment(ctx, obj.Namespace, desired); err != nil {
		return observed, err
	}
	if previous != "" {
		if observed.PreviousTarget, err = r.getDeployment(ctx, obj.Namespace, previous); err != nil {
			return observed, err
		}
	}

	var cms corev1.ConfigMapList
	if err := r.List(ctx, &cms, client.InNamespace(obj.Namespace), client.MatchingLabels{v1alpha1.ManagedByLabel: v1alpha1.ManagedByValue}); err != nil {
		return observed, fmt.Errorf("list manifest ConfigMaps of OpenMedModel %s/%s: %w", obj.Namespace, obj.Name, err)
	}
	owner := rollout.OwnerKey(obj)
	have := map[string]bool{}
	for _, cm := range cms.Items {
		if cm.Annotations[v1alpha1.ModelResourceAnnotation] == owner || metav1.IsControlledBy(&cm, obj) {
			observed.ConfigMaps = append(observed.ConfigMaps, cm)
			have[cm.Name] = true
		}
	}
	// The cache may hold only our labelled ConfigMaps; a foreign object that
	// took the desired name is read directly so the core can report it.
	if spec, err := rollout.Normalize(obj); err == nil {
		name := rollout.ManifestConfigMapName(spec.ManifestConfigMapName, rollout.ManifestHash(spec))
		if !have[name] {
			cm := &corev1.ConfigMap{}
			switch err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: obj.Namespace, Name: name}, cm); {
			case err == nil:
				observed.ConfigMaps = append(observed.ConfigMaps, *cm)
			case !apierrors.IsNotFound(err):
				return observed, fmt.Errorf("get ConfigMap %s/%s: %w", obj.Namespace, name, err)
			}
		}
	}
	return observed, nil
}

func (r *OpenMedModelReconciler) getDeployment(ctx context.Context, namespace, name string) (*appsv1.Deployment, error) {
	dep := &appsv1.Deployment{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, dep); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("get Deployment %s/%s: %w", namespace, name, err)
	}
	return dep, nil
}

// execute makes the plan's changes in the order that keeps every pod able
// to start: manifest ConfigMaps first, then the Deployment pointer, then the
// releases, and pruning last.
func (r *OpenMedModelReconciler) execute(ctx context.Context, obj *v1alpha1.OpenMedModel, observed rollout.Observed, plan *rollout.Plan) error {
	for _, cm := range plan.EnsureConfigMaps {
		if err := r.ensureConfigMap(ctx, cm); err != nil {
			return err
		}
	}
	if plan.ApplyDeployment != nil {
		intent := plan.ApplyDeployment.DeepCopy()
		if plan.Claim {
			// Claiming an unclaimed target is conditional on the version we
			// saw: of two resources racing for it, the second apply fails
			// with a conflict and its next pass sees the other's claim.
			intent.SetResourceVersion(observed.Deployment.ResourceVersion)
		}
		entry, err := r.resources.Apply(ctx, intent, ssa.ApplyOptions{})
		if err != nil {
			return fmt.Errorf("apply model pointer to Deployment %s/%s: %w", intent.GetNamespace(), intent.GetName(), err)
		}
		// The next passes judge the rollout by the generation the apply
		// produced; an unchanged Deployment keeps the one we observed.
		generation := observed.Deployment.Generation
		if entry.Action != ssa.UnchangedAction {
			live := &appsv1.Deployment{}
			if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: intent.GetNamespace(), Name: intent.GetName()}, live); err != nil {
				return fmt.Errorf("read Deployment %s/%s after apply: %w", intent.GetNamespace(), intent.GetName(), err)
			}
			generation = live.Generation
		}
		plan.RecordApplied(generation)
		for _, d := range plan.Drift {
			for _, m := range d.Managers {
				r.ModelMetrics.countDrift(m)
			}
		}
	}
	for _, rel := range []*rollout.Release{plan.ReleasePrevious, plan.Release} {
		if rel != nil {
			if err := r.release(ctx, obj.Namespace, rel); err != nil {
				return err
			}
		}
	}
	for _, name := range plan.PruneConfigMaps {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: obj.Namespace, Name: name}}
		// Preconditioned on nothing but the name: the core only prunes
		// ConfigMaps it observed as ours.
		if err := r.Delete(ctx, cm); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("prune ConfigMap %s/%s: %w", obj.Namespace, name, err)
		}
	}
	return nil
}

// ensureConfigMap creates an immutable manifest ConfigMap. Its name is its
// content's hash, so an existing object of ours with that name is already
// right and is never updated.
func (r *OpenMedModelReconciler) ensureConfigMap(ctx context.Context, cm *corev1.ConfigMap) error {
	err := r.Create(ctx, cm.DeepCopy())
	if err == nil || apierrors.IsAlreadyExists(err) {
		return nil
	}
	return fmt.Errorf("create ConfigMap %s/%s: %w", cm.Namespace, cm.Name, err)
}

// release gives a Deployment back without resetting anything (ssa-facts.md):
// apply only the values to keep, then drop our managedFields entry with a
// JSON patch guarded by a test of the entry's manager.
func (r *OpenMedModelReconciler) release(ctx context.Context, namespace string, rel *rollout.Release) error {
	keep := rel.Keep.DeepCopy()
	if _, err := r.resources.Apply(ctx, keep, ssa.ApplyOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("release Deployment %s/%s: %w", namespace, rel.DeploymentName, err)
	}
	live := &appsv1.Deployment{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: rel.DeploymentName}, live); err != nil {
		return client.IgnoreNotFound(err)
	}
	var ops []string
	// Remove from the end so earlier indices stay valid.
	for i := len(live.ManagedFields) - 1; i >= 0; i-- {
		e := live.ManagedFields[i]
		if e.Manager == r.FieldManager && e.Operation == metav1.ManagedFieldsOperationApply && e.Subresource == "" {
			ops = append(ops,
				fmt.Sprintf(`{"op":"test","path":"/metadata/managedFields/%d/manager","value":%q}`, i, r.FieldManager),
				fmt.Sprintf(`{"op":"remove","path":"/metadata/managedFields/%d"}`, i))
		}
	}
	if len(ops) == 0 {
		return nil
	}
	body := []byte("[" + strings.Join(ops, ",") + "]")
	if err := r.Patch(ctx, live, client.RawPatch(types.JSONPatchType, body)); err != nil {
		return fmt.Errorf("drop field manager %q from Deployment %s/%s: %w", r.FieldManager, namespace, rel.DeploymentName, err)
	}
	return nil
}

// patchStatus writes the planned status, and nothing when it is unchanged:
// a steady pass makes no write at all.
func (r *OpenMedModelReconciler) patchStatus(ctx context.Context, obj *v1alpha1.OpenMedModel, status v1alpha1.OpenMedModelStatus) error {
	if apiequality.Semantic.DeepEqual(obj.Status, status) {
		return nil
	}
	patcher := patch.NewSerialPatcher(obj, r.Client)
	obj.Status = status
	owned := []string{
		v1alpha1.ReadyCondition, v1alpha1.ReconcilingCondition, v1alpha1.StalledCondition,
		v1alpha1.ProgressingCondition, v1alpha1.DegradedCondition, v1alpha1.RolledBackCondition,
	}
	if err := patcher.Patch(ctx, obj,
		patch.WithOwnedConditions{Conditions: owned},
		patch.WithForceOverwriteConditions{},
		patch.WithFieldOwner(StatusFieldOwner),
	); err != nil {
		if !obj.DeletionTimestamp.IsZero() && apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("patch status of OpenMedModel %s/%s: %w", obj.Namespace, obj.Name, err)
	}
	return nil
}

// record emits the plan's events and counts rollbacks and finished rollouts.
func (r *OpenMedModelReconciler) record(obj *v1alpha1.OpenMedModel, plan *rollout.Plan, rolloutStart *metav1.Time) {
	for _, e := range plan.Events {
		if r.EventRecorder != nil {
			r.EventRecorder.Eventf(obj, nil, e.Type, e.Reason, e.Reason, "%s", e.Message)
		}
		switch e.Reason {
		case v1alpha1.RollbackStartedReason:
			trigger := "automatic"
			if strings.HasPrefix(plan.Status.RollbackRequest, rollout.ManualRollbackPrefix) {
				trigger = "manual"
			}
			r.ModelMetrics.countRollback(obj.Namespace, obj.Name, trigger)
		case v1alpha1.RolloutSucceededReason:
			if rolloutStart != nil {
				r.ModelMetrics.observeRollout(obj.Namespace, obj.Name, r.Clock().Sub(rolloutStart.Time))
			}
		}
	}
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

func klogRef(o client.Object) string { return o.GetNamespace() + "/" + o.GetName() }
