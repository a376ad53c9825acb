// Package hostile_test measures the operator against a hostile tenant: one
// who may create objects in a namespace of its own and dresses them as the
// operator's (the managed-by label on ConfigMaps, the claimed label on
// Deployments, a model's owner annotation on pods), sized to the API
// server's limits. The operator's memory must not follow what that tenant
// creates, and another tenant's rollout must go on meanwhile.
//
//	go test ./e2e/hostile -v
package hostile_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/openmed/openmed-operator/e2e/internal/harness"
	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/localrun"
	"github.com/openmed/openmed-operator/pkg/rollout"
	"github.com/openmed/openmed-operator/pkg/testenv"
)

const (
	victim, hostile = "victim", "hostile"
	// models is the victim tenant's number of models.
	models = 20
	// What the hostile tenant creates.
	configMaps, configMapBytes  = 300, 1 << 20
	deployments, annotationSize = 50, 200 << 10
	pendingPods                 = 1000
	// budget is how much more the operator may hold at its peak with all
	// of that than the same run without it.
	budget  = 20 << 20
	timeout = 3 * time.Minute
)

// TestHostileTenantMemory runs the operator twice on one API server, each
// time a fresh process that rolls the victim tenant's 20 models to a new
// version: first alone, then with a hostile tenant's 300 ConfigMaps of
// 1 MiB labelled as the operator's (created before the process starts, so
// its first list meets them), and, created while it rolls out, 50
// Deployments labelled as claimed with 200 KiB in an openmed.ai
// annotation and 1,000 pods waiting for a node that carry a victim
// model's owner annotation and the bake label. The second run's peak
// resident set stays within 20 MiB of the first's, and the victim's
// rollout completes.
func TestHostileTenantMemory(t *testing.T) {
	ctrllog.SetLogger(logr.Discard())
	ctx := context.Background()
	dir := t.TempDir()
	cl := harness.Start(t, dir, "Metadata")
	defer cl.Stop(t)
	c := cl.Client
	for _, ns := range []string{victim, hostile} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	standIn := harness.NewStandIn(t, c, victim, 2, 0).WithPods()
	defer standIn.Stop()
	bin, err := localrun.BuildOperator(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for i := range models {
		createDeployment(t, c, victim, name(i))
		createModel(t, c, victim, name(i))
	}

	// run starts a fresh operator, rolls every victim model to version
	// while during runs, and returns the process's peak resident set.
	run := func(label, version string, during func()) int64 {
		t.Helper()
		op, err := localrun.StartOperator(localrun.OperatorConfig{Binary: bin, Kubeconfig: cl.Kubeconfig,
			LogPath: filepath.Join(dir, "operator-"+label+".log"), Args: append([]string{"--log-level=info"}, cl.OperatorArgs...)})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = op.Stop(10 * time.Second) }()
		readyCtx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		if err := op.WaitReady(readyCtx); err != nil {
			t.Fatalf("%s: %v\n%s", label, err, localrun.Tail(op.LogPath(), 40))
		}
		for i := range models {
			setVersion(t, c, name(i), version)
		}
		var wg sync.WaitGroup
		if during != nil {
			wg.Add(1)
			go func() { defer wg.Done(); during() }()
		}
		for i := range models {
			waitReady(t, c, name(i), version)
		}
		wg.Wait()
		// What the process met, all of it: its stores have seen every
		// object (their watches are a second behind at most).
		time.Sleep(2 * time.Second)
		select {
		case <-op.Done():
			t.Fatalf("%s: the operator exited\n%s", label, localrun.Tail(op.LogPath(), 40))
		default:
		}
		return harness.PeakRSS(t, op.PID())
	}

	alone := run("alone", "OpenMed/pii-v1", nil)
	owner := getModel(t, c, name(0))
	createConfigMaps(t, c, owner)
	beside := run("beside-a-hostile-tenant", "OpenMed/pii-v2", func() {
		createDeployments(t, c)
		createPendingPods(t, c, owner)
	})
	t.Logf("peak RSS: %.1f MiB alone, %.1f MiB beside a hostile tenant (%d ConfigMaps of %d KiB, %d Deployments with %d KiB annotations, %d pending pods): %+.1f MiB",
		mib(alone), mib(beside), configMaps, configMapBytes>>10, deployments, annotationSize>>10, pendingPods, mib(beside-alone))
	if beside-alone > budget {
		t.Errorf("peak RSS %.1f MiB beside a hostile tenant, %.1f MiB alone: %+.1f MiB, more than %d MiB", mib(beside), mib(alone), mib(beside-alone), budget>>20)
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func name(i int) string { return fmt.Sprintf("model-%02d", i) }

// createConfigMaps creates the hostile tenant's ConfigMaps: labelled as
// the operator's, controlled by owner (a victim's model, by UID: an owner
// reference across namespaces that the garbage collector ignores), with 1
// MiB of data each.
func createConfigMaps(t *testing.T, c client.Client, owner *v1alpha1.OpenMedModel) {
	t.Helper()
	data := strings.Repeat("x", configMapBytes-1024)
	ref := metav1.OwnerReference{APIVersion: v1alpha1.GroupVersion.String(), Kind: "OpenMedModel", Name: owner.Name, UID: owner.UID, Controller: ptr.To(true)}
	parallel(t, configMaps, func(i int) error {
		return c.Create(context.Background(), &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: hostile, Name: fmt.Sprintf("fake-manifest-%03d", i),
				Labels:          map[string]string{v1alpha1.ManagedByLabel: v1alpha1.ManagedByValue},
				OwnerReferences: []metav1.OwnerReference{ref}},
			Data: map[string]string{v1alpha1.ManifestKey: data}})
	})
}

// createDeployments creates the hostile tenant's Deployments: labelled as
// claimed, with 200 KiB in an owner annotation and in an openmed.ai
// annotation of its own.
func createDeployments(t *testing.T, c client.Client) {
	t.Helper()
	big := strings.Repeat("y", annotationSize/2)
	parallel(t, deployments, func(i int) error {
		n := fmt.Sprintf("fake-target-%02d", i)
		labels := map[string]string{"app": n}
		return c.Create(context.Background(), &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: hostile, Name: n, Labels: map[string]string{v1alpha1.ClaimedLabel: "true"},
				Annotations: map[string]string{v1alpha1.ModelResourceAnnotation: victim + "/" + big, "openmed.ai/anything": big}},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](0), Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "openmed-service", Image: "ghcr.io/maziyarpanahi/openmed:2.2.0"}}}}}})
	})
}

// createPendingPods creates the hostile tenant's pods: no node will run
// them (this API server has no scheduler), each with owner's owner
// annotation and manifest hash, the bake label, and 8 KiB of annotation.
func createPendingPods(t *testing.T, c client.Client, owner *v1alpha1.OpenMedModel) {
	t.Helper()
	pad := strings.Repeat("z", 8<<10)
	parallel(t, pendingPods, func(i int) error {
		return c.Create(context.Background(), &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: hostile, Name: fmt.Sprintf("fake-pod-%04d", i),
				Labels: map[string]string{v1alpha1.BakeLabel: "true"},
				Annotations: map[string]string{v1alpha1.ModelResourceAnnotation: rollout.OwnerKey(owner),
					v1alpha1.ManifestHashAnnotation: owner.Status.ManifestHash, "openmed.ai/padding": pad}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "openmed-service", Image: "ghcr.io/maziyarpanahi/openmed:2.2.0"}}}})
	})
}

// parallel runs create for 0..n-1 on 8 workers and fails t on the first
// error.
func parallel(t *testing.T, n int, create func(i int) error) {
	t.Helper()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	next := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := create(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if first != nil {
		t.Fatal(first)
	}
}

func createDeployment(t *testing.T, c client.Client, ns, name string) {
	t.Helper()
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "openmed-service", Image: "ghcr.io/maziyarpanahi/openmed:2.2.0"}}},
			},
		},
	}
	if err := client.WithFieldOwner(c, "helm").Create(context.Background(), d); err != nil {
		t.Fatal(err)
	}
}

func createModel(t *testing.T, c client.Client, ns, name string) {
	t.Helper()
	m := &v1alpha1.OpenMedModel{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.OpenMedModelSpec{
			Family: "PII", Version: "OpenMed/pii-v0", Tier: v1alpha1.TierSmall, Replicas: ptr.To[int32](2),
			RolloutStrategy: v1alpha1.RolloutStrategy{Type: v1alpha1.RollingUpdateRolloutStrategyType},
		},
	}
	if err := c.Create(context.Background(), m); err != nil {
		t.Fatal(err)
	}
}

func getModel(t *testing.T, c client.Client, name string) *v1alpha1.OpenMedModel {
	t.Helper()
	m := &v1alpha1.OpenMedModel{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: victim, Name: name}, m); err != nil {
		t.Fatal(err)
	}
	return m
}

func setVersion(t *testing.T, c client.Client, name, version string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		m := getModel(t, c, name)
		m.Spec.Version = version
		return c.Update(context.Background(), m)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func waitReady(t *testing.T, c client.Client, name, version string) {
	t.Helper()
	testenv.Eventually(t, timeout, fmt.Sprintf("%s Ready on %s", name, version), func() (bool, string) {
		m := getModel(t, c, name)
		ready := apimeta.FindStatusCondition(m.Status.Conditions, v1alpha1.ReadyCondition)
		return ready != nil && ready.Status == metav1.ConditionTrue && m.Status.ActiveVersion == version &&
			m.Status.ObservedGeneration == m.Generation, fmt.Sprintf("%+v active=%s", ready, m.Status.ActiveVersion)
	})
}
