// Package tenancy_test runs the operator as the lockdown overlay installs it
// (kustomize/lockdown): a real kube-apiserver and etcd with RBAC, the
// operator process authenticated as the bundle's ServiceAccount with only
// the overlay's rights, two tenant namespaces with the tenant Role and the
// impersonator binding of examples/tenancy, and a stand-in for the Deployment controller. The API
// server's audit log of the operator's requests is the evidence: every
// write to a Deployment or a ConfigMap is made as a ServiceAccount of the
// object's own namespace, none with the operator's own identity.
//
//	go test ./e2e/tenancy -v
package tenancy_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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
	tenantSA = harness.TenantServiceAccount
	// unbound is a tenant namespace without the impersonator binding.
	unbound = "team-c"
	v1      = "OpenMed/pii-v1"
	v2      = "OpenMed/pii-v2"
	timeout = 2 * time.Minute
)

// TestLockdown: the lockdown install, two tenants. Each tenant's models roll
// out, upgrade and are deleted with the tenant Role; a model without a
// ServiceAccount is refused (it writes as the namespace's "default"
// ServiceAccount, which may do nothing); a model naming a ServiceAccount
// of another namespace reaches nothing; a model of a namespace with the
// tenant Role but without the impersonator binding is refused, naming the
// binding. The audit log shows every write to
// a Deployment or ConfigMap under a ServiceAccount of the object's own
// namespace.
func TestLockdown(t *testing.T) {
	ctrllog.SetLogger(logr.Discard())
	ctx := context.Background()
	dir := t.TempDir()
	cl := harness.StartLockdown(t, dir, "Metadata")
	defer cl.Stop(t)
	c := cl.Client

	tenants := []string{"team-a", "team-b"}
	for _, ns := range tenants {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
		// kube-controller-manager gives every namespace a "default"
		// ServiceAccount; this API server runs without it.
		if err := c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "default"}}); err != nil {
			t.Fatal(err)
		}
		harness.ApplyTenantRole(t, c, ns)
		harness.ApplyImpersonatorBinding(t, c, ns)
		sc := harness.NewStandIn(t, c, ns, 2, 0)
		defer sc.Stop()
	}
	// team-b has no openmed-deployer: team-a's is not team-b's to use.
	if err := c.Delete(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: tenantSA}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "team-b-deployer"}}); err != nil {
		t.Fatal(err)
	}
	bind(t, c, "team-b", "team-b-deployer")
	// team-c has the tenant Role but not the impersonator binding: the
	// operator may not impersonate its ServiceAccounts.
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: unbound}}); err != nil {
		t.Fatal(err)
	}
	harness.ApplyTenantRole(t, c, unbound)

	bin, err := localrun.BuildOperator(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	op, err := localrun.StartOperator(localrun.OperatorConfig{Binary: bin, Kubeconfig: cl.Kubeconfig, LogPath: filepath.Join(dir, "operator.log"),
		Args: append([]string{"--log-level=info"}, cl.OperatorArgs...)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = op.Stop(10 * time.Second) }()
	readyCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := op.WaitReady(readyCtx); err != nil {
		t.Fatalf("%v\n%s", err, localrun.Tail(op.LogPath(), 40))
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(localrun.Tail(op.LogPath(), 60))
		}
	})

	models := []struct{ ns, name, sa string }{
		{"team-a", "pii", tenantSA},
		{"team-b", "pii", "team-b-deployer"},
	}
	for _, m := range models {
		createDeployment(t, c, m.ns, m.name)
		createModel(t, c, m.ns, m.name, m.sa)
	}
	// Refused: no ServiceAccount (the default one may do nothing), and a
	// ServiceAccount that exists only in another namespace.
	createDeployment(t, c, "team-a", "bare")
	createModel(t, c, "team-a", "bare", "")
	createDeployment(t, c, "team-b", "borrowed")
	createModel(t, c, "team-b", "borrowed", tenantSA)
	createDeployment(t, c, unbound, "pii")
	createModel(t, c, unbound, "pii", tenantSA)

	for _, m := range models {
		waitReady(t, c, m.ns, m.name, v1)
	}
	bare := waitDenied(t, c, "team-a", "bare")
	for _, want := range []string{"as ServiceAccount team-a/default: ", `User "system:serviceaccount:team-a:default" cannot create resource "configmaps"`} {
		if !strings.Contains(bare, want) {
			t.Errorf("model without a ServiceAccount: message %q does not say %q", bare, want)
		}
	}
	borrowed := waitDenied(t, c, "team-b", "borrowed")
	if want := "as ServiceAccount team-b/" + tenantSA + ": " + rollout.MsgServiceAccountMissing; !strings.Contains(borrowed, want) {
		t.Errorf("model naming another namespace's ServiceAccount: message %q does not say %q", borrowed, want)
	}
	notBound := waitDenied(t, c, unbound, "pii")
	if want := "as ServiceAccount " + unbound + "/" + tenantSA + ": " + rollout.ImpersonationDenied(unbound); !strings.Contains(notBound, want) {
		t.Errorf("model of a namespace without the impersonator binding: message %q does not say %q", notBound, want)
	}
	t.Logf("refused without a ServiceAccount: %s", bare)
	t.Logf("refused with another namespace's ServiceAccount: %s", borrowed)
	t.Logf("refused without the impersonator binding: %s", notBound)

	for _, m := range models {
		// Read again on a conflict with a status write of the operator.
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var obj v1alpha1.OpenMedModel
			if err := c.Get(ctx, client.ObjectKey{Namespace: m.ns, Name: m.name}, &obj); err != nil {
				return err
			}
			obj.Spec.Version = v2
			return c.Update(ctx, &obj)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range models {
		waitReady(t, c, m.ns, m.name, v2)
	}
	for _, m := range append(models, struct{ ns, name, sa string }{"team-a", "bare", ""}, struct{ ns, name, sa string }{"team-b", "borrowed", ""},
		struct{ ns, name, sa string }{unbound, "pii", ""}) {
		if err := c.Delete(ctx, &v1alpha1.OpenMedModel{ObjectMeta: metav1.ObjectMeta{Namespace: m.ns, Name: m.name}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, ns := range append(slices.Clone(tenants), unbound) {
		testenv.Eventually(t, timeout, "every model of "+ns+" gone", func() (bool, string) {
			var list v1alpha1.OpenMedModelList
			if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
				return false, err.Error()
			}
			return len(list.Items) == 0, fmt.Sprintf("%d left", len(list.Items))
		})
		var deps appsv1.DeploymentList
		if err := c.List(ctx, &deps, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		for _, d := range deps.Items {
			for _, e := range d.ManagedFields {
				if e.Manager == rollout.DefaultFieldManager {
					t.Errorf("Deployment %s/%s keeps an entry of %s after the deletion", ns, d.Name, e.Manager)
				}
			}
			if rollout.PreloadEnv(&d, "openmed-service") != nil {
				t.Errorf("Deployment %s/%s keeps the preload pointer", ns, d.Name)
			}
		}
		var cms corev1.ConfigMapList
		if err := c.List(ctx, &cms, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		for _, cm := range cms.Items {
			if strings.Contains(cm.Name, "model-manifest") {
				t.Errorf("ConfigMap %s/%s left after the deletion", ns, cm.Name)
			}
		}
	}

	// The audit log: every write of the operator to a Deployment or a
	// ConfigMap is made as a ServiceAccount of that object's namespace.
	reqs := cl.Requests(t, started, time.Now().Add(time.Second))
	writes := map[string]int{}
	for _, r := range reqs {
		if !r.Mutating() || (r.Resource != "deployments" && r.Resource != "configmaps") {
			continue
		}
		if r.Namespace == unbound {
			// Refused before it is made as anyone: the impersonation.
			if r.Code != 403 || r.ImpersonatedUser != "" {
				t.Errorf("%s %s/%s in the namespace without the impersonator binding: code %d as %q, want refused", r.Kind(), r.Namespace, r.Name, r.Code, r.ImpersonatedUser)
			}
			writes[fmt.Sprintf("%s in %s, code %d", r.Kind(), r.Namespace, r.Code)]++
			continue
		}
		if r.ImpersonatedUser == "" || !strings.HasPrefix(r.ImpersonatedUser, "system:serviceaccount:"+r.Namespace+":") {
			t.Errorf("%s %s/%s (code %d) made as %q, want a ServiceAccount of %s", r.Kind(), r.Namespace, r.Name, r.Code, r.ImpersonatedUser, r.Namespace)
		}
		key := fmt.Sprintf("%s as %s, code %d", r.Kind(), r.ImpersonatedUser, r.Code)
		writes[key]++
	}
	var lines []string
	for k, n := range writes {
		lines = append(lines, fmt.Sprintf("%3d × %s", n, k))
	}
	slices.Sort(lines)
	t.Logf("the operator's writes to Deployments and ConfigMaps in the audit log:\n%s", strings.Join(lines, "\n"))
	for _, want := range []string{
		"patch deployments as system:serviceaccount:team-a:" + tenantSA + ", code 200",
		"create configmaps as system:serviceaccount:team-b:team-b-deployer, code 201",
		"delete configmaps as system:serviceaccount:team-a:" + tenantSA + ", code 200",
		"create configmaps as system:serviceaccount:team-a:default, code 403",
		"create configmaps in " + unbound + ", code 403",
	} {
		if writes[want] == 0 {
			t.Errorf("the audit log has no %q", want)
		}
	}
	for k := range writes {
		if strings.Contains(k, "team-a:default") && !strings.HasSuffix(k, "code 403") {
			t.Errorf("a write as the default ServiceAccount went through: %s", k)
		}
	}
}

// bind gives the ServiceAccount sa of ns the tenant Role.
func bind(t *testing.T, c client.Client, ns, sa string) {
	t.Helper()
	b := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
		"metadata": map[string]any{"namespace": ns, "name": sa},
		"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": tenantSA},
		"subjects": []any{map[string]any{"kind": "ServiceAccount", "name": sa, "namespace": ns}},
	}}
	if err := c.Create(context.Background(), b); err != nil {
		t.Fatal(err)
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

func createModel(t *testing.T, c client.Client, ns, name, sa string) {
	t.Helper()
	m := &v1alpha1.OpenMedModel{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.OpenMedModelSpec{
			Family: "PII", Version: v1, Tier: v1alpha1.TierSmall, Replicas: ptr.To[int32](2),
			ServiceAccountName: sa,
			RolloutStrategy:    v1alpha1.RolloutStrategy{Type: v1alpha1.RollingUpdateRolloutStrategyType},
		},
	}
	if err := c.Create(context.Background(), m); err != nil {
		t.Fatal(err)
	}
}

func getModel(t *testing.T, c client.Client, ns, name string) *v1alpha1.OpenMedModel {
	t.Helper()
	m := &v1alpha1.OpenMedModel{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, m); err != nil {
		t.Fatal(err)
	}
	return m
}

func waitReady(t *testing.T, c client.Client, ns, name, version string) {
	t.Helper()
	testenv.Eventually(t, timeout, fmt.Sprintf("%s/%s Ready on %s", ns, name, version), func() (bool, string) {
		m := getModel(t, c, ns, name)
		ready := apimeta.FindStatusCondition(m.Status.Conditions, v1alpha1.ReadyCondition)
		return ready != nil && ready.Status == metav1.ConditionTrue && m.Status.ActiveVersion == version &&
			m.Status.ObservedGeneration == m.Generation, fmt.Sprintf("%+v active=%s", ready, m.Status.ActiveVersion)
	})
}

// waitDenied waits for AccessDenied and returns the Stalled message.
func waitDenied(t *testing.T, c client.Client, ns, name string) string {
	t.Helper()
	var msg string
	testenv.Eventually(t, timeout, fmt.Sprintf("%s/%s AccessDenied", ns, name), func() (bool, string) {
		m := getModel(t, c, ns, name)
		stalled := apimeta.FindStatusCondition(m.Status.Conditions, v1alpha1.StalledCondition)
		ready := apimeta.FindStatusCondition(m.Status.Conditions, v1alpha1.ReadyCondition)
		if stalled == nil || ready == nil {
			return false, "no Stalled or Ready condition"
		}
		msg = stalled.Message
		return stalled.Status == metav1.ConditionTrue && stalled.Reason == v1alpha1.AccessDeniedReason &&
			ready.Status == metav1.ConditionFalse && ready.Reason == v1alpha1.AccessDeniedReason, fmt.Sprintf("%+v", stalled)
	})
	return msg
}
