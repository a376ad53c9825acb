package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/kustomize"
	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/localrun"
	"github.com/openmed/openmed-operator/pkg/minicluster"
)

const (
	namespace      = "openmed"
	quotaNamespace = "openmed-quota"
	// gitManager applies the models, as Flux's kustomize-controller does.
	gitManager = "kustomize-controller"
	// helmManager creates the Deployments, as `helm install` does.
	helmManager = "helm"
	// failDeadline is the progress deadline of the versions meant to fail.
	failDeadline = int64(10)
)

var modelGVK = v1alpha1.GroupVersion.WithKind("OpenMedModel")

func moduleRoot() string {
	_, file, _, _ := goruntime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// rig is the live cluster, the operator and what the capture recorded.
type rig struct {
	c       client.WithWatch
	history *history
	v1, v2  string
	broken  string
	// crashes is a version whose pods restart a few seconds after they
	// became Ready (kwok's crash-after-ready stage).
	crashes string

	fixtures []fixture
	// eco is the ecosystem corpus: Deployment and model pairs.
	eco []ecosystemFile
}

// fixture is one file to write.
type fixture struct {
	dir, name string
	header    string
	obj       *unstructured.Unstructured
}

// captureBakeSeconds is the bake of the baking models: longer than the
// capture runs, so the baking state holds.
const captureBakeSeconds = 600

func run(ctx context.Context, dir, ecoDir string) (n int, err error) {
	example, err := localrun.ReadModel(filepath.Join(localrun.ExamplesDir(), localrun.ModelExample))
	if err != nil {
		return 0, err
	}
	r := &rig{v1: example.Spec.Version, v2: strings.TrimSuffix(example.Spec.Version, "-v1") + "-v2",
		broken:  strings.TrimSuffix(example.Spec.Version, "-v1") + "-never-ready",
		crashes: strings.TrimSuffix(example.Spec.Version, "-v1") + "-crashes"}
	brokenHash, err := localrun.ManifestHashOf(example, r.broken)
	if err != nil {
		return 0, err
	}
	crashHash, err := localrun.ManifestHashOf(example, r.crashes)
	if err != nil {
		return 0, err
	}

	work, err := os.MkdirTemp("", "openmed-capture-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(work)
	fmt.Println("starting the local control plane and building the operator")
	cluster, err := minicluster.Start(ctx, minicluster.Config{
		// The ecosystem scenarios count pods against a ResourceQuota.
		Controllers:     append(slices.Clone(minicluster.DefaultControllers), "resourcequota-controller"),
		NeverReady:      minicluster.NeverReady{Annotation: v1alpha1.ManifestHashAnnotation, Values: []string{brokenHash}},
		CrashAfterReady: minicluster.CrashAfterReady{Annotation: v1alpha1.ManifestHashAnnotation, Values: []string{crashHash}, After: 2 * time.Second},
	})
	if err != nil {
		return 0, fmt.Errorf("start the local control plane (make clusterbin builds it): %w", err)
	}
	defer func() { err = errors.Join(err, cluster.Stop()) }()

	scheme := k8sruntime.NewScheme()
	for _, add := range []func(*k8sruntime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			return 0, err
		}
	}
	if r.c, err = client.NewWithWatch(cluster.RESTConfig(), client.Options{Scheme: scheme}); err != nil {
		return 0, err
	}
	bundle, err := localrun.InstallBundle(ctx, r.c, filepath.Join(kustomize.Dir(), kustomize.DefaultOverlay))
	if err != nil {
		return 0, err
	}
	kubeconfig := filepath.Join(work, "operator.kubeconfig")
	if err := localrun.WriteImpersonatingKubeconfig(cluster.KubeconfigPath(), kubeconfig, bundle.ServiceAccount.Namespace, bundle.ServiceAccount.Name); err != nil {
		return 0, err
	}
	bin, err := localrun.BuildOperator(ctx, work)
	if err != nil {
		return 0, err
	}
	op, err := localrun.StartOperator(localrun.OperatorConfig{Binary: bin, Kubeconfig: kubeconfig, LogPath: filepath.Join(work, "operator.log"),
		Args: []string{"--log-encoding=console"}})
	if err != nil {
		return 0, err
	}
	defer func() {
		if err != nil {
			fmt.Fprintf(os.Stderr, "operator log:\n%s\n", localrun.Tail(op.LogPath(), 30))
		}
		err = errors.Join(err, op.Stop(10*time.Second))
	}()
	if err := op.WaitReady(ctx); err != nil {
		return 0, err
	}
	for _, ns := range []string{namespace, quotaNamespace} {
		if err := r.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return 0, err
		}
	}
	if r.history, err = watchModels(ctx, r.c); err != nil {
		return 0, err
	}
	defer r.history.stop()

	fmt.Println("playing the scenarios")
	if err := r.scenarios(ctx); err != nil {
		return 0, err
	}
	if err := r.derive(); err != nil {
		return 0, err
	}
	if err := writeEcosystem(ecoDir, r.eco); err != nil {
		return 0, err
	}
	fmt.Printf("wrote %d Deployment and model pairs to %s\n", len(r.eco), ecoDir)
	return r.write(dir)
}

// capture records obj as the fixture name.
func (r *rig) capture(name string, obj *unstructured.Unstructured, how string) {
	header := "# Captured from a live cluster by `go run ./health/internal/capture` (kube-apiserver,\n" +
		"# kube-controller-manager, kwok, the openmed-operator): " + how + ".\n"
	r.fixtures = append(r.fixtures, fixture{dir: "testdata", name: name, header: header, obj: obj.DeepCopy()})
	fmt.Printf("  captured %-34s %s\n", name, summary(obj))
}

// scenarios drives the models. Every object a watch event carried is in the
// history, so transient states are found after the fact.
func (r *rig) scenarios(ctx context.Context) error {
	type model struct {
		name, ns string
		mutate   func(spec map[string]any)
		target   func(d *appsv1.Deployment)
		noTarget bool
	}
	deadline := func(spec map[string]any) {
		spec["rolloutStrategy"].(map[string]any)["progressDeadlineSeconds"] = failDeadline
	}
	models := []model{
		{name: "pii-ready"},
		{name: "pii-manual"},
		{name: "pii-rolling"},
		{name: "pii-rollback", mutate: deadline},
		{name: "pii-no-rollback", mutate: func(spec map[string]any) {
			deadline(spec)
			spec["rolloutStrategy"].(map[string]any)["rollbackOnFailure"] = false
		}},
		{name: "pii-suspended"},
		{name: "pii-stale"},
		{name: "pii-deleted"},
		{name: "pii-unavailable", mutate: func(spec map[string]any) { delete(spec, "replicas") }},
		{name: "pii-failed-rollback", ns: quotaNamespace, mutate: func(spec map[string]any) {
			deadline(spec)
			spec["replicas"] = int64(1)
			spec["rolloutStrategy"] = map[string]any{"type": "Recreate", "rollbackOnFailure": true, "progressDeadlineSeconds": failDeadline}
		}},
		{name: "pii-failed", mutate: func(spec map[string]any) { deadline(spec) }},
		{name: "pii-paused"},
		{name: "pii-waiting", noTarget: true},
		{name: "pii-baking"},
		{name: "pii-bake-failed"},
	}
	specs := map[string]map[string]any{}
	key := func(name string) types.NamespacedName {
		for _, m := range models {
			if m.name == name && m.ns != "" {
				return types.NamespacedName{Namespace: m.ns, Name: name}
			}
		}
		return types.NamespacedName{Namespace: namespace, Name: name}
	}
	apply := func(name string, change func(spec map[string]any)) (*unstructured.Unstructured, error) {
		spec := specs[name]
		if change != nil {
			change(spec)
		}
		return r.applyModel(ctx, key(name), spec)
	}
	version := func(v string) func(map[string]any) { return func(s map[string]any) { s["version"] = v } }
	// baked is a new version that bakes for bakeSeconds before it is Ready.
	baked := func(v string) func(map[string]any) {
		return func(s map[string]any) {
			s["version"] = v
			s["rolloutStrategy"].(map[string]any)["bakeSeconds"] = int64(captureBakeSeconds)
		}
	}

	// Everything starts at once: the first rollouts run in parallel.
	for _, m := range models {
		k := key(m.name)
		if !m.noTarget {
			if err := r.createTarget(ctx, k, m.target); err != nil {
				return err
			}
		}
		spec, err := exampleSpec(k.Name)
		if err != nil {
			return err
		}
		if m.mutate != nil {
			m.mutate(spec)
		}
		if m.name == "pii-failed" {
			spec["version"] = r.broken
		}
		specs[m.name] = spec
		created, err := apply(m.name, nil)
		if err != nil {
			return err
		}
		if m.name == "pii-ready" {
			r.capture("not_observed_default.yaml", created, "the answer to the model's server-side apply by Flux's field manager, before the operator saw it")
		}
	}
	for _, m := range models {
		if m.noTarget || m.name == "pii-failed" {
			continue
		}
		if _, err := r.history.await(ctx, key(m.name), "Ready at "+r.v1, readyAt(r.v1)); err != nil {
			return err
		}
	}
	fmt.Println("  every first rollout is Ready")

	// The failed rollback first: its quota has to land after the failed
	// version's pod exists and before the rollback creates one.
	fr := key("pii-failed-rollback")
	if _, err := apply(fr.Name, version(r.broken)); err != nil {
		return err
	}
	if err := r.awaitDeployment(ctx, fr, "the failing version's pod alone", func(d *appsv1.Deployment) bool {
		return d.Status.ObservedGeneration == d.Generation && d.Status.UpdatedReplicas == 1 && d.Status.Replicas == 1
	}); err != nil {
		return err
	}
	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: quotaNamespace, Name: "pods"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}}}
	if err := r.c.Create(ctx, quota); err != nil {
		return err
	}

	// The other changes, all at once.
	for _, step := range []struct {
		name   string
		change func(map[string]any)
	}{
		{"pii-ready", version(r.v2)},
		{"pii-manual", version(r.v2)},
		{"pii-rolling", version(r.broken)},
		{"pii-rollback", version(r.broken)},
		{"pii-no-rollback", version(r.broken)},
		{"pii-baking", baked(r.v2)},
		{"pii-bake-failed", baked(r.crashes)},
	} {
		if _, err := apply(step.name, step.change); err != nil {
			return err
		}
	}
	// The chart's owner pauses the Deployment; the model's next version
	// waits for it.
	if err := r.helmPause(ctx, key("pii-paused"), true); err != nil {
		return err
	}
	if _, err := apply("pii-paused", version(r.v2)); err != nil {
		return err
	}
	suspended, err := apply("pii-suspended", func(s map[string]any) { s["suspend"] = true })
	if err != nil {
		return err
	}
	r.capture("suspend_not_observed.yaml", suspended, "the answer to the apply that set spec.suspend, before the operator saw it")
	stale, err := apply("pii-stale", func(s map[string]any) { s["replicas"] = int64(3) })
	if err != nil {
		return err
	}
	r.capture("stale_generation.yaml", stale, "the answer to a spec change of a Ready model, before the operator saw it")
	if err := r.c.Delete(ctx, &v1alpha1.OpenMedModel{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "pii-deleted"}}); err != nil {
		return err
	}

	awaits := []struct {
		fixture, model, what string
		pred                 func(*unstructured.Unstructured) bool
		// how describes the capture; "" only waits.
		how string
	}{
		{"target_not_found.yaml", "pii-waiting", "TargetNotFound", reconciling(v1alpha1.TargetNotFoundReason),
			"a model whose Deployment does not exist"},
		{"terminating.yaml", "pii-deleted", "deletionTimestamp", func(u *unstructured.Unstructured) bool { return u.GetDeletionTimestamp() != nil },
			"a Ready model just deleted, its finalizer not yet removed"},
		{"rollout_started.yaml", "pii-rolling", "RollingOut " + r.broken, func(u *unstructured.Unstructured) bool {
			return observed(u) && desired(u) == r.broken && phase(u) == v1alpha1.PhaseRollingOut && !strings.Contains(kstatusMessage(u), ":")
		}, "the pass that applied a new version"},
		{"rolling_out.yaml", "pii-rolling", "one new pod updated", func(u *unstructured.Unstructured) bool {
			return observed(u) && desired(u) == r.broken && phase(u) == v1alpha1.PhaseRollingOut &&
				strings.Contains(kstatusMessage(u), "1/2 pods updated, 2 available")
		}, "a rollout whose new pod is not ready yet (the Deployment keeps both old pods)"},
		{"ready.yaml", "pii-ready", "Ready at " + r.v2, readyAt(r.v2), "a Ready model after an upgrade (two retained versions)"},
		{"", "pii-manual", "Ready at " + r.v2, readyAt(r.v2), ""},
		{"rollback_in_progress.yaml", "pii-rollback", "rollback in progress", reconciling(v1alpha1.RolledBackReason),
			"the pass that applied the automatic rollback after the new version missed its progress deadline"},
		{"rolled_back.yaml", "pii-rollback", "rolled back", stalledWith(v1alpha1.RolledBackReason),
			"the automatic rollback completed: the retained version serves, the desired spec failed"},
		{"failed_no_rollback.yaml", "pii-no-rollback", "failed", stalledWith(v1alpha1.RolloutFailedReason),
			"a new version that missed its progress deadline with rollbackOnFailure false"},
		{"failed_rollout.yaml", "pii-failed", "failed", stalledWith(v1alpha1.RolloutFailedReason),
			"a first rollout whose pods never became ready: nothing retained to roll back to"},
		{"suspended.yaml", "pii-suspended", "Suspended", func(u *unstructured.Unstructured) bool {
			return observed(u) && phase(u) == v1alpha1.PhaseSuspended
		}, "a Ready model suspended"},
		{"failed_rollback.yaml", fr.Name, "rollback failed", stalledWith(v1alpha1.RollbackFailedReason),
			"the rollback of a failed version could not create its pod (a ResourceQuota of 0 pods)"},
		{"target_paused.yaml", "pii-paused", "TargetPaused", reconciling(v1alpha1.TargetPausedReason),
			"a new version applied to a Deployment its owner paused: the rollout waits for the owner"},
		{"baking.yaml", "pii-baking", "Baking", reconciling(v1alpha1.BakingReason),
			fmt.Sprintf("a new version whose rollout completed, baking for its bakeSeconds (%d) before it is Ready and retained", captureBakeSeconds)},
		{"bake_rollback_in_progress.yaml", "pii-bake-failed", "rollback after a failed bake", func(u *unstructured.Unstructured) bool {
			return reconciling(v1alpha1.RolledBackReason)(u) && desired(u) == r.crashes
		}, "the pass that applied the automatic rollback after a container of the baking version restarted (Degraded says BakeFailed)"},
		{"bake_failed.yaml", "pii-bake-failed", "rolled back after a failed bake", func(u *unstructured.Unstructured) bool {
			return stalledWith(v1alpha1.RolledBackReason)(u) && desired(u) == r.crashes
		}, "a new version whose containers restarted 2 s after they became Ready, during its bake: rolled back automatically to the retained version"},
	}
	for _, a := range awaits {
		got, err := r.history.await(ctx, key(a.model), a.what, a.pred)
		if err != nil {
			return err
		}
		if a.how != "" {
			r.capture(a.fixture, got, a.how)
		}
		if a.fixture == "rolling_out.yaml" {
			// The watch may have seen the same state once more; take the
			// newest object in that state.
			time.Sleep(time.Second)
			if latest := r.history.latest(key(a.model)); a.pred(latest) {
				r.fixtures[len(r.fixtures)-1].obj = latest.DeepCopy()
			}
		}
	}

	// A manual rollback of the upgraded model, and a failed model
	// suspended.
	if err := r.annotate(ctx, key("pii-manual"), v1alpha1.RollbackToAnnotation, r.v1); err != nil {
		return err
	}
	held, err := r.history.await(ctx, key("pii-manual"), "held by the manual rollback", func(u *unstructured.Unstructured) bool {
		return stalledWith(v1alpha1.RolledBackReason)(u) && reasonOf(u, v1alpha1.DegradedCondition) == v1alpha1.ManualRollbackReason
	})
	if err != nil {
		return err
	}
	r.capture("manual_rollback_held.yaml", held, "a model held at its older retained version by the openmed.ai/rollback-to annotation")
	if _, err := apply("pii-failed", func(s map[string]any) { s["suspend"] = true }); err != nil {
		return err
	}
	failedSuspended, err := r.history.await(ctx, key("pii-failed"), "Suspended", func(u *unstructured.Unstructured) bool {
		return observed(u) && phase(u) == v1alpha1.PhaseSuspended
	})
	if err != nil {
		return err
	}
	r.capture("suspended_while_failed.yaml", failedSuspended, "a failed model suspended")
	if _, err := apply("pii-suspended", version(r.v2)); err != nil {
		return err
	}
	edited, err := r.history.await(ctx, key("pii-suspended"), "suspended with a spec change", func(u *unstructured.Unstructured) bool {
		return !observed(u) && phase(u) == v1alpha1.PhaseSuspended && reasonOf(u, v1alpha1.ReadyCondition) == v1alpha1.SuspendedReason
	})
	if err != nil {
		return err
	}
	r.capture("suspended_spec_changed.yaml", edited, "a new version committed while the model is suspended: the operator says so and leaves the generation unobserved")

	fmt.Println("  the Deployment states of the ecosystem corpus")
	if r.eco, err = r.ecosystem(ctx); err != nil {
		return err
	}

	// Last, as it stops scheduling: a Ready model's Deployment scaled up
	// (as an HPA does) while the node takes no pods, then its pods lost.
	return r.unavailable(ctx, key("pii-unavailable"))
}

// unavailable cordons the node, scales the Deployment up through its scale
// subresource and captures the model reporting Scaling, then deletes its
// pods and captures DeploymentUnavailable.
func (r *rig) unavailable(ctx context.Context, k types.NamespacedName) error {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: minicluster.NodeName}}
	cordon := func(on bool) error {
		return r.c.Patch(ctx, node, client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"unschedulable":%t}}`, on)), client.FieldOwner("kubectl-cordon"))
	}
	if err := cordon(true); err != nil {
		return err
	}
	defer func() { _ = cordon(false) }()
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: k.Name}}
	scale := &autoscalingv1.Scale{Spec: autoscalingv1.ScaleSpec{Replicas: 3}}
	if err := r.c.SubResource("scale").Update(ctx, dep, client.WithSubResourceBody(scale), client.FieldOwner("kube-controller-manager")); err != nil {
		return err
	}
	got, err := r.history.await(ctx, k, "Scaling", reconciling(v1alpha1.ScalingReason))
	if err != nil {
		return err
	}
	r.capture("scaling.yaml", got, "a Ready model whose Deployment was scaled up (its scale subresource, as an HPA does) while the node took no pods")
	if err := r.c.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(k.Namespace), client.MatchingLabels{"app.kubernetes.io/instance": k.Name},
		client.GracePeriodSeconds(0)); err != nil {
		return err
	}
	got, err = r.history.await(ctx, k, "DeploymentUnavailable", reconciling(v1alpha1.DeploymentUnavailableReason))
	if err != nil {
		return err
	}
	r.capture("deployment_unavailable.yaml", got, "the same model after its pods were deleted: none is available, none can be scheduled")
	return nil
}

// applyModel server-side applies the model with spec as Flux would and
// returns the API server's answer.
func (r *rig) applyModel(ctx context.Context, k types.NamespacedName, spec map[string]any) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(modelGVK)
	u.SetNamespace(k.Namespace)
	u.SetName(k.Name)
	u.SetLabels(map[string]string{"kustomize.toolkit.fluxcd.io/name": "openmed-models", "kustomize.toolkit.fluxcd.io/namespace": "flux-system"})
	if err := r.c.Patch(ctx, u, client.Apply, client.FieldOwner(gitManager), client.ForceOwnership); err != nil {
		return nil, fmt.Errorf("apply %s: %w", k, err)
	}
	return u, nil
}

func (r *rig) annotate(ctx context.Context, k types.NamespacedName, key, value string) error {
	m := &v1alpha1.OpenMedModel{ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: k.Name}}
	return r.c.Patch(ctx, m, client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, key, value)),
		client.FieldOwner("kubectl-annotate"))
}

// createTarget creates examples/target-deployment.yaml as name, with its
// own selector, as field manager helm (client-side, as Helm 3 writes).
func (r *rig) createTarget(ctx context.Context, k types.NamespacedName, mutate func(*appsv1.Deployment)) error {
	objs, err := localrun.ReadObjects(filepath.Join(localrun.ExamplesDir(), localrun.TargetExample))
	if err != nil {
		return err
	}
	for _, u := range objs {
		u.SetNamespace(k.Namespace)
		var obj client.Object = u
		switch u.GetKind() {
		case "Deployment":
			d := &appsv1.Deployment{}
			if err := k8sruntime.DefaultUnstructuredConverter.FromUnstructured(u.Object, d); err != nil {
				return err
			}
			d.Name = k.Name
			d.Spec.Selector.MatchLabels["app.kubernetes.io/instance"] = k.Name
			d.Spec.Template.Labels["app.kubernetes.io/instance"] = k.Name
			d.Labels["app.kubernetes.io/instance"] = k.Name
			if mutate != nil {
				mutate(d)
			}
			obj = d
		case "ConfigMap":
			// One chart ConfigMap per namespace is enough.
			existing := &corev1.ConfigMap{}
			if err := r.c.Get(ctx, client.ObjectKey{Namespace: k.Namespace, Name: u.GetName()}, existing); err == nil {
				continue
			}
		}
		if err := r.c.Create(ctx, obj, client.FieldOwner(helmManager)); err != nil {
			if u.GetKind() == "ConfigMap" && apierrors.IsAlreadyExists(err) {
				continue // created for another model of the namespace meanwhile
			}
			return fmt.Errorf("create %s %s: %w", u.GetKind(), k, err)
		}
	}
	return nil
}

func (r *rig) awaitDeployment(ctx context.Context, k types.NamespacedName, what string, pred func(*appsv1.Deployment) bool) error {
	for {
		d := &appsv1.Deployment{}
		if err := r.c.Get(ctx, k, d); err == nil && pred(d) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for Deployment %s: %s: %w", k, what, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// exampleSpec is examples/openmedmodel.yaml's spec pointed at Deployment
// name.
func exampleSpec(name string) (map[string]any, error) {
	objs, err := localrun.ReadObjects(filepath.Join(localrun.ExamplesDir(), localrun.ModelExample))
	if err != nil {
		return nil, err
	}
	spec := objs[0].Object["spec"].(map[string]any)
	spec["targetRef"] = map[string]any{"name": name, "containerName": "openmed-service"}
	return spec, nil
}
