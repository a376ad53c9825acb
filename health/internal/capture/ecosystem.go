package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// The ecosystem corpus: pairs of a Deployment and its model, both as the API
// server held them at one moment, for every Deployment state the property
// test in health/argocd judges (the model is never worse in Argo CD or
// kstatus than the Deployment itself, unless its own rollout failed).
const (
	ecosystemNamespace = "openmed-ecosystem"
	// minReady is the minReadySeconds of the charts that set it: every new
	// pod is Ready at once (kwok) and available that long after.
	minReady = 5
)

// ecosystemScenario is one model and its Deployment driven through one
// change of the Deployment's state.
type ecosystemScenario struct {
	name string
	// namespace defaults to ecosystemNamespace; a scenario with a quota
	// has one of its own.
	namespace string
	// minReadySeconds of the chart.
	minReadySeconds int32
	// replicas of the model; 0 leaves them to the chart (2) and an HPA.
	replicas int64
	// deadline is the model's progressDeadlineSeconds (default 600).
	deadline int64
	// act drives the change once the model is Ready at v1, and waits until
	// the pair has gone through it.
	act func(ctx context.Context, r *rig, k types.NamespacedName) error
}

// pairRecorder keeps the newest Deployment and model of each scenario and
// every distinct pair of their states.
type pairRecorder struct {
	mu     sync.Mutex
	deps   map[types.NamespacedName]*unstructured.Unstructured
	models map[types.NamespacedName]*unstructured.Unstructured
	seen   map[string]bool
	pairs  map[types.NamespacedName][]pair
	ws     []watch.Interface
	wg     sync.WaitGroup
}

type pair struct{ deployment, model *unstructured.Unstructured }

func (r *rig) ecosystem(ctx context.Context) ([]ecosystemFile, error) {
	rec := &pairRecorder{deps: map[types.NamespacedName]*unstructured.Unstructured{}, models: map[types.NamespacedName]*unstructured.Unstructured{},
		seen: map[string]bool{}, pairs: map[types.NamespacedName][]pair{}}
	scenarios := r.ecosystemScenarios()
	namespaces := map[string]bool{}
	for _, s := range scenarios {
		namespaces[s.ns()] = true
	}
	for ns := range namespaces {
		if err := r.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return nil, err
		}
		if err := rec.watch(ctx, r.c, ns); err != nil {
			return nil, err
		}
	}
	defer rec.stop()

	errs := make(chan error, len(scenarios))
	for _, s := range scenarios {
		go func() { errs <- r.playScenario(ctx, s) }()
	}
	for range scenarios {
		if err := <-errs; err != nil {
			return nil, err
		}
	}
	time.Sleep(time.Second) // the last events of every scenario
	return rec.files(scenarios), nil
}

func (s ecosystemScenario) ns() string {
	if s.namespace != "" {
		return s.namespace
	}
	return ecosystemNamespace
}

func (r *rig) playScenario(ctx context.Context, s ecosystemScenario) error {
	k := types.NamespacedName{Namespace: s.ns(), Name: s.name}
	if err := r.createTarget(ctx, k, func(d *appsv1.Deployment) { d.Spec.MinReadySeconds = s.minReadySeconds }); err != nil {
		return err
	}
	spec, err := exampleSpec(k.Name)
	if err != nil {
		return err
	}
	delete(spec, "replicas")
	if s.replicas > 0 {
		spec["replicas"] = s.replicas
	}
	if s.deadline > 0 {
		spec["rolloutStrategy"].(map[string]any)["progressDeadlineSeconds"] = s.deadline
	}
	if _, err := r.applyModel(ctx, k, spec); err != nil {
		return err
	}
	if _, err := r.history.await(ctx, k, "Ready at "+r.v1, readyAt(r.v1)); err != nil {
		return fmt.Errorf("%s: %w", s.name, err)
	}
	if err := r.awaitDeployment(ctx, k, "settled", settledDeployment); err != nil {
		return err
	}
	if err := s.act(ctx, r, k); err != nil {
		return fmt.Errorf("%s: %w", s.name, err)
	}
	return nil
}

func settledDeployment(d *appsv1.Deployment) bool {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	s := d.Status
	return s.ObservedGeneration == d.Generation && s.Replicas == want && s.UpdatedReplicas == want && s.AvailableReplicas == want
}

// ecosystemScenarios are the Deployment states of the issue: scale-up and
// scale-down with and without minReadySeconds (by the model and by an HPA),
// a rollout by another manager, a paused target, the progress deadline of
// the model's own rollout and of another manager's, ReplicaFailure, and a
// pod lost while serving.
func (r *rig) ecosystemScenarios() []ecosystemScenario {
	ready := func(ctx context.Context, r *rig, k types.NamespacedName, version string) error {
		return r.awaitLive(ctx, k, "Ready at "+version+" with the Deployment settled", func(m *unstructured.Unstructured, d *appsv1.Deployment) bool {
			return readyAt(version)(m) && settledDeployment(d)
		})
	}
	setReplicas := func(n int64) func(context.Context, *rig, types.NamespacedName) error {
		return func(ctx context.Context, r *rig, k types.NamespacedName) error {
			spec, err := r.modelSpec(ctx, k)
			if err != nil {
				return err
			}
			spec["replicas"] = n
			if _, err := r.applyModel(ctx, k, spec); err != nil {
				return err
			}
			return ready(ctx, r, k, r.v1)
		}
	}
	hpa := func(n int32) func(context.Context, *rig, types.NamespacedName) error {
		return func(ctx context.Context, r *rig, k types.NamespacedName) error {
			if err := r.scale(ctx, k, n); err != nil {
				return err
			}
			return ready(ctx, r, k, r.v1)
		}
	}
	return []ecosystemScenario{
		{name: "scale-up-model", minReadySeconds: minReady, replicas: 2, act: setReplicas(4)},
		{name: "scale-up-hpa", minReadySeconds: minReady, act: hpa(4)},
		{name: "scale-up-plain", replicas: 2, act: setReplicas(4)},
		{name: "scale-down-model", minReadySeconds: minReady, replicas: 4, act: setReplicas(2)},
		{name: "scale-down-hpa", act: hpa(1)},
		{name: "foreign-rollout", minReadySeconds: minReady, replicas: 2, act: func(ctx context.Context, r *rig, k types.NamespacedName) error {
			if err := r.helmImage(ctx, k, "ghcr.io/maziyarpanahi/openmed:2.3.0"); err != nil {
				return err
			}
			return ready(ctx, r, k, r.v1)
		}},
		{name: "paused", replicas: 2, act: func(ctx context.Context, r *rig, k types.NamespacedName) error {
			if err := r.helmPause(ctx, k, true); err != nil {
				return err
			}
			if err := r.setModelVersion(ctx, k, r.v2); err != nil {
				return err
			}
			if _, err := r.history.await(ctx, k, "TargetPaused", reconciling(v1alpha1.TargetPausedReason)); err != nil {
				return err
			}
			time.Sleep(time.Second)
			if err := r.helmPause(ctx, k, false); err != nil {
				return err
			}
			return ready(ctx, r, k, r.v2)
		}},
		{name: "deadline-own-rollout", replicas: 2, deadline: failDeadline, act: func(ctx context.Context, r *rig, k types.NamespacedName) error {
			if err := r.setModelVersion(ctx, k, r.broken); err != nil {
				return err
			}
			_, err := r.history.await(ctx, k, "rolled back", stalledWith(v1alpha1.RolledBackReason))
			return err
		}},
		{name: "deadline-foreign-rollout", namespace: ecosystemNamespace + "-quota", replicas: 2, deadline: failDeadline,
			act: func(ctx context.Context, r *rig, k types.NamespacedName) error {
				// Room for exactly the pods that serve: the new template's
				// ReplicaSet cannot create its first pod, and the rollout
				// passes its deadline.
				if err := r.quota(ctx, k.Namespace, 2); err != nil {
					return err
				}
				if err := r.helmImage(ctx, k, "ghcr.io/maziyarpanahi/openmed:2.3.0"); err != nil {
					return err
				}
				_, err := r.history.await(ctx, k, "the Deployment's own failure", stalledWith(v1alpha1.DeploymentUnavailableReason))
				return err
			}},
		{name: "replica-failure-scale-up", namespace: ecosystemNamespace + "-quota2",
			act: func(ctx context.Context, r *rig, k types.NamespacedName) error {
				// An HPA scales past what the namespace's quota admits.
				if err := r.quota(ctx, k.Namespace, 3); err != nil {
					return err
				}
				if err := r.scale(ctx, k, 4); err != nil {
					return err
				}
				if err := r.awaitDeployment(ctx, k, "ReplicaFailure", func(d *appsv1.Deployment) bool {
					for _, c := range d.Status.Conditions {
						if c.Type == appsv1.DeploymentReplicaFailure && c.Status == corev1.ConditionTrue {
							return true
						}
					}
					return false
				}); err != nil {
					return err
				}
				time.Sleep(2 * time.Second)
				if err := r.scale(ctx, k, 2); err != nil {
					return err
				}
				return ready(ctx, r, k, r.v1)
			}},
		{name: "pod-lost", minReadySeconds: minReady, replicas: 2, act: func(ctx context.Context, r *rig, k types.NamespacedName) error {
			if err := r.deleteOnePod(ctx, k); err != nil {
				return err
			}
			if err := r.awaitDeployment(ctx, k, "a pod short", func(d *appsv1.Deployment) bool { return d.Status.AvailableReplicas < 2 }); err != nil {
				return err
			}
			return ready(ctx, r, k, r.v1)
		}},
	}
}

// awaitLive polls the model k and its Deployment until pred holds for both.
func (r *rig) awaitLive(ctx context.Context, k types.NamespacedName, what string, pred func(*unstructured.Unstructured, *appsv1.Deployment) bool) error {
	for {
		m := &unstructured.Unstructured{}
		m.SetGroupVersionKind(modelGVK)
		d := &appsv1.Deployment{}
		if r.c.Get(ctx, k, m) == nil && r.c.Get(ctx, k, d) == nil && pred(m, d) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %s: %w", k, what, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (r *rig) modelSpec(ctx context.Context, k types.NamespacedName) (map[string]any, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(modelGVK)
	if err := r.c.Get(ctx, k, u); err != nil {
		return nil, err
	}
	spec, _ := u.Object["spec"].(map[string]any)
	return spec, nil
}

func (r *rig) setModelVersion(ctx context.Context, k types.NamespacedName, version string) error {
	spec, err := r.modelSpec(ctx, k)
	if err != nil {
		return err
	}
	spec["version"] = version
	_, err = r.applyModel(ctx, k, spec)
	return err
}

// scale writes the scale subresource as an HPA does.
func (r *rig) scale(ctx context.Context, k types.NamespacedName, n int32) error {
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: k.Name}}
	body := &autoscalingv1.Scale{Spec: autoscalingv1.ScaleSpec{Replicas: n}}
	return r.c.SubResource("scale").Update(ctx, dep, client.WithSubResourceBody(body), client.FieldOwner("kube-controller-manager"))
}

// helmEdit changes the Deployment as `helm upgrade` does (an Update).
func (r *rig) helmEdit(ctx context.Context, k types.NamespacedName, mutate func(*appsv1.Deployment)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d := &appsv1.Deployment{}
		if err := r.c.Get(ctx, k, d); err != nil {
			return err
		}
		mutate(d)
		return r.c.Update(ctx, d, client.FieldOwner(helmManager))
	})
}

func (r *rig) helmImage(ctx context.Context, k types.NamespacedName, image string) error {
	return r.helmEdit(ctx, k, func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = image })
}

func (r *rig) helmPause(ctx context.Context, k types.NamespacedName, paused bool) error {
	return r.helmEdit(ctx, k, func(d *appsv1.Deployment) { d.Spec.Paused = paused })
}

func (r *rig) quota(ctx context.Context, ns string, pods int) error {
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pods"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse(fmt.Sprint(pods))}}}
	if err := r.c.Create(ctx, q); err != nil {
		return err
	}
	// The quota admits pods only once its controller has counted the
	// namespace's.
	for {
		got := &corev1.ResourceQuota{}
		if err := r.c.Get(ctx, client.ObjectKeyFromObject(q), got); err == nil && got.Status.Used != nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (r *rig) deleteOnePod(ctx context.Context, k types.NamespacedName) error {
	var pods corev1.PodList
	if err := r.c.List(ctx, &pods, client.InNamespace(k.Namespace), client.MatchingLabels{"app.kubernetes.io/instance": k.Name}); err != nil {
		return err
	}
	if len(pods.Items) == 0 {
		return fmt.Errorf("no pods of %s", k)
	}
	return r.c.Delete(ctx, &pods.Items[0], client.GracePeriodSeconds(0))
}

func (rec *pairRecorder) watch(ctx context.Context, c client.WithWatch, ns string) error {
	for _, list := range []client.ObjectList{&appsv1.DeploymentList{}, modelList()} {
		w, err := c.Watch(ctx, list, client.InNamespace(ns))
		if err != nil {
			return err
		}
		rec.ws = append(rec.ws, w)
		rec.wg.Add(1)
		go func() {
			defer rec.wg.Done()
			for ev := range w.ResultChan() {
				if ev.Type == watch.Deleted || ev.Type == watch.Error {
					continue
				}
				rec.observe(ev.Object)
			}
		}()
	}
	return nil
}

func modelList() *unstructured.UnstructuredList {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("OpenMedModelList"))
	return list
}

// observe records obj as the newest of its kind and, when both objects of
// its scenario are known, their pair if it is new.
func (rec *pairRecorder) observe(obj k8sruntime.Object) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var k types.NamespacedName
	switch o := obj.(type) {
	case *appsv1.Deployment:
		content, err := k8sruntime.DefaultUnstructuredConverter.ToUnstructured(o)
		if err != nil {
			return
		}
		u := &unstructured.Unstructured{Object: content}
		u.SetAPIVersion("apps/v1")
		u.SetKind("Deployment")
		k = types.NamespacedName{Namespace: o.Namespace, Name: o.Name}
		rec.deps[k] = u
	case *unstructured.Unstructured:
		k = types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}
		rec.models[k] = o.DeepCopy()
	default:
		return
	}
	d, m := rec.deps[k], rec.models[k]
	if d == nil || m == nil {
		return
	}
	key := k.String() + "|" + deploymentState(d) + "|" + modelState(m)
	if rec.seen[key] {
		return
	}
	rec.seen[key] = true
	rec.pairs[k] = append(rec.pairs[k], pair{deployment: d.DeepCopy(), model: m.DeepCopy()})
}

// deploymentState is what the ecosystem's verdicts on a Deployment read.
func deploymentState(u *unstructured.Unstructured) string {
	d := &appsv1.Deployment{}
	_ = k8sruntime.DefaultUnstructuredConverter.FromUnstructured(u.Object, d)
	var conds []string
	for _, c := range d.Status.Conditions {
		conds = append(conds, string(c.Type)+"="+string(c.Status)+"/"+c.Reason)
	}
	sort.Strings(conds)
	replicas := int32(1)
	if d.Spec.Replicas != nil {
		replicas = *d.Spec.Replicas
	}
	return fmt.Sprintf("observed=%v paused=%v r%d s%d u%d rd%d a%d %s", d.Status.ObservedGeneration >= d.Generation, d.Spec.Paused, replicas,
		d.Status.Replicas, d.Status.UpdatedReplicas, d.Status.ReadyReplicas, d.Status.AvailableReplicas, strings.Join(conds, ","))
}

// modelState is what the health faces of a model decide by (messages,
// which carry pod counts, aside).
func modelState(u *unstructured.Unstructured) string {
	conditions, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	var conds []string
	for _, item := range conditions {
		if c, ok := item.(map[string]any); ok {
			cog, _ := c["observedGeneration"].(int64)
			conds = append(conds, fmt.Sprintf("%v=%v/%v current=%v", c["type"], c["status"], c["reason"], cog == u.GetGeneration()))
		}
	}
	sort.Strings(conds)
	return fmt.Sprintf("observed=%v %s %s", observed(u), phase(u), strings.Join(conds, ","))
}

func (rec *pairRecorder) stop() {
	for _, w := range rec.ws {
		w.Stop()
	}
	rec.wg.Wait()
}

// ecosystemFile is one pair as the property test reads it.
type ecosystemFile struct {
	name string
	// Scenario names the change the pair is part of.
	Scenario string `json:"scenario"`
	// OwnRolloutFailed marks a pair whose model failed its own rollout
	// (status.failedSpecHash is set): the property does not bind it.
	OwnRolloutFailed bool                       `json:"ownRolloutFailed"`
	Deployment       *unstructured.Unstructured `json:"deployment"`
	Model            *unstructured.Unstructured `json:"model"`
}

func (rec *pairRecorder) files(scenarios []ecosystemScenario) []ecosystemFile {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var out []ecosystemFile
	for _, s := range scenarios {
		k := types.NamespacedName{Namespace: s.ns(), Name: s.name}
		for i, p := range rec.pairs[k] {
			failed, _, _ := unstructured.NestedString(p.model.Object, "status", "failedSpecHash")
			for _, u := range []*unstructured.Unstructured{p.deployment, p.model} {
				u.SetManagedFields(nil)
				a := u.GetAnnotations()
				delete(a, "kubectl.kubernetes.io/last-applied-configuration")
				u.SetAnnotations(a)
			}
			out = append(out, ecosystemFile{name: fmt.Sprintf("%s-%02d.yaml", s.name, i+1), Scenario: s.name,
				OwnRolloutFailed: failed != "", Deployment: p.deployment, Model: p.model})
		}
	}
	return out
}

// writeEcosystem replaces the corpus in dir with files.
func writeEcosystem(dir string, files []ecosystemFile) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, f := range files {
		data, err := yaml.Marshal(map[string]any{"scenario": f.Scenario, "ownRolloutFailed": f.OwnRolloutFailed,
			"deployment": f.Deployment.Object, "model": f.Model.Object})
		if err != nil {
			return err
		}
		header := "# Captured from a live cluster by `go run ./health/internal/capture` (kube-apiserver,\n" +
			"# kube-controller-manager's Deployment controller, kwok pods, the openmed-operator): the\n" +
			"# Deployment and its model as the API server held them at one moment of scenario " + f.Scenario + ".\n" +
			"# managedFields are left out.\n"
		if err := os.WriteFile(filepath.Join(dir, f.name), append([]byte(header), data...), 0o644); err != nil {
			return err
		}
	}
	return nil
}
