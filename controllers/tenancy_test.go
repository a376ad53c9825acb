package controllers_test

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/kustomize"
	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/localrun"
	"github.com/openmed/openmed-operator/pkg/rollout"
)

// tenantSA is the ServiceAccount examples/tenancy/tenant-role.yaml creates.
const tenantSA = "openmed-deployer"

// applyTenantRole creates the objects of examples/tenancy/tenant-role.yaml
// in ns, as a user copies the file: the namespace replaced, nothing else.
func applyTenantRole(t *testing.T, ns string) {
	t.Helper()
	objs, err := localrun.TenantRole(ns)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if err := env.Client.Create(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
}

// bindImpersonator creates examples/tenancy/impersonator-binding.yaml in ns,
// as a user copies the file: the operator's ServiceAccount may then
// impersonate the ServiceAccounts of ns.
func bindImpersonator(t *testing.T, ns string) {
	t.Helper()
	objs, err := localrun.ImpersonatorBinding(ns)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if err := env.Client.Create(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
}

// asBundleServiceAccount installs the default bundle (the operator's
// ClusterRole and its binding, without the Deployment) and returns a config
// authenticated as the bundle's ServiceAccount, by a client certificate
// with its user name and groups: no impersonation, so the API server
// authorizes the operator's own impersonation on the bundle's RBAC.
func asBundleServiceAccount(t *testing.T) *rest.Config {
	t.Helper()
	bundle, err := localrun.InstallBundle(context.Background(), env.Client, filepath.Join(kustomize.Dir(), kustomize.DefaultOverlay))
	if err != nil {
		t.Fatal(err)
	}
	sa := bundle.ServiceAccount
	kubeconfig, err := env.AddUser(localrun.ServiceAccountUser(sa.Namespace, sa.Name), "system:serviceaccounts", "system:serviceaccounts:"+sa.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// tenantBinding is the RoleBinding of the tenant role in ns.
func tenantBinding(ns string) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: tenantSA},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: tenantSA},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: tenantSA, Namespace: ns}}}
}

// bindTenantRole gives the ServiceAccount sa of ns the tenant role.
func bindTenantRole(t *testing.T, ns, sa string) {
	t.Helper()
	b := tenantBinding(ns)
	b.Name, b.Subjects[0].Name = sa, sa
	if err := env.Client.Create(context.Background(), b); err != nil {
		t.Fatal(err)
	}
}

func createServiceAccount(t *testing.T, ns, name string) {
	t.Helper()
	if err := env.Client.Create(context.Background(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}); err != nil {
		t.Fatal(err)
	}
}

// targetWrites are the writes of a pass to the Deployment name and to
// ConfigMaps, as "METHOD kind as user", in order of kind.
func targetWrites(op *operator, ns, name string) []string {
	var out []string
	for _, w := range op.writes.writesAs("/namespaces/" + ns + "/") {
		switch {
		case strings.Contains(w, "/deployments/"+name+" "):
			out = append(out, strings.Replace(w, "/apis/apps/v1/namespaces/"+ns+"/deployments/"+name, "deployment", 1))
		case strings.Contains(w, "/configmaps"):
			out = append(out, regexp.MustCompile(`/api/v1/namespaces/[^/]+/configmaps(/[^ ]*)?`).ReplaceAllString(w, "configmap"))
		}
	}
	return out
}

// denied waits for the model's AccessDenied status and returns its Stalled
// message.
func denied(t *testing.T, ns, name string) string {
	t.Helper()
	m := waitFor(t, ns, name, v1alpha1.PhasePending, v1alpha1.AccessDeniedReason)
	stalled := condition(m, v1alpha1.StalledCondition)
	if stalled == nil || stalled.Status != metav1.ConditionTrue || stalled.Reason != v1alpha1.AccessDeniedReason {
		t.Fatalf("Stalled = %+v, want True/AccessDenied", stalled)
	}
	if c := condition(m, v1alpha1.ReconcilingCondition); c != nil {
		t.Fatalf("Reconciling = %+v beside Stalled", c)
	}
	return stalled.Message
}

// untouched fails unless the Deployment carries nothing of the operator and
// the namespace holds no ConfigMap of the model.
func untouched(t *testing.T, ns, name string) {
	t.Helper()
	d := getDeployment(t, ns, name)
	if ok, what := released(t, ns, name); !ok {
		t.Fatalf("Deployment %s was written: %s", name, what)
	}
	if _, ok := d.Annotations[v1alpha1.ModelResourceAnnotation]; ok {
		t.Fatalf("Deployment %s carries the owner annotation", name)
	}
	var cms corev1.ConfigMapList
	if err := env.Client.List(context.Background(), &cms, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, cm := range cms.Items {
		if strings.HasPrefix(cm.Name, name+"-model-manifest") {
			t.Fatalf("ConfigMap %s was created", cm.Name)
		}
	}
}

// TestImpersonation: a model with spec.serviceAccountName makes every write
// to its Deployment and ConfigMaps as that ServiceAccount, on the real API
// server with real RBAC. The tenant Role file is enough for a model's whole
// life; a ServiceAccount without a right is AccessDenied with the verb and
// resource, nothing written, and picks the right up by itself; a
// ServiceAccount that does not exist says so; rights taken away before a
// deletion hold the finalizer until they are back.
func TestImpersonation(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	op := startOperatorIn(t, ns)
	applyTenantRole(t, ns)

	t.Run("tenant-role-is-enough", func(t *testing.T) {
		// The same life twice: once as the tenant's ServiceAccount, once
		// with the operator's own rights. The writes are the same
		// requests; only who makes them differs.
		life := func(name, sa string) []string {
			before := targetWrites(op, ns, name)
			createDeployment(t, chartDeployment(ns, name, 2))
			m := newModel(ns, name, "OpenMed/pii-v1")
			m.Spec.ServiceAccountName = sa
			createModel(t, m)
			waitFor(t, ns, name, v1alpha1.PhaseRollingOut)
			updateDeploymentStatus(t, ns, name, rolloutComplete)
			waitFor(t, ns, name, v1alpha1.PhaseReady, v1alpha1.RolloutSucceededReason)
			m = getModel(t, ns, name)
			m.Spec.Version = "OpenMed/pii-v2"
			if err := env.Client.Update(ctx, m); err != nil {
				t.Fatal(err)
			}
			waitFor(t, ns, name, v1alpha1.PhaseRollingOut)
			updateDeploymentStatus(t, ns, name, rolloutComplete)
			waitFor(t, ns, name, v1alpha1.PhaseReady, v1alpha1.RolloutSucceededReason)
			deleteAndWait(t, ns, name)
			if ok, what := released(t, ns, name); !ok {
				t.Fatalf("Deployment %s not released: %s", name, what)
			}
			untouched(t, ns, name)
			after := targetWrites(op, ns, name)
			for _, w := range before {
				i := slices.Index(after, w)
				after = slices.Delete(after, i, i+1)
			}
			return after
		}
		tenant := life("tenant", tenantSA)
		own := life("own", "")
		want := "system:serviceaccount:" + ns + ":" + tenantSA
		for _, w := range tenant {
			if !strings.HasSuffix(w, " as "+want) {
				t.Errorf("write %q is not made as %s", w, want)
			}
		}
		strip := func(ws []string) []string {
			out := make([]string, len(ws))
			for i, w := range ws {
				out[i], _, _ = strings.Cut(w, " as ")
			}
			return out
		}
		if len(tenant) == 0 || !slices.Equal(strip(tenant), strip(own)) {
			t.Fatalf("writes as the ServiceAccount:\n%s\nwrites with the operator's rights:\n%s\nwant the same requests",
				strings.Join(tenant, "\n"), strings.Join(own, "\n"))
		}
		for _, w := range op.writes.writesAs("/openmedmodels/") {
			if !strings.HasSuffix(w, " as ") {
				t.Errorf("write %q of the model itself is impersonated; status and finalizer are the operator's", w)
			}
		}
		t.Logf("%d writes to the Deployment and ConfigMaps, each as %s", len(tenant), want)
	})

	t.Run("denied-names-the-verb-and-the-resource-then-the-grant-resumes", func(t *testing.T) {
		createServiceAccount(t, ns, "nobody")
		createDeployment(t, chartDeployment(ns, "nobody", 2))
		m := newModel(ns, "nobody", "OpenMed/pii-v1")
		m.Spec.ServiceAccountName = "nobody"
		createModel(t, m)
		msg := denied(t, ns, "nobody")
		for _, want := range []string{"as ServiceAccount " + ns + "/nobody: ", `system:serviceaccount:` + ns + `:nobody" cannot create resource "configmaps"`} {
			if !strings.Contains(msg, want) {
				t.Fatalf("message %q does not say %q", msg, want)
			}
		}
		untouched(t, ns, "nobody")
		if got := recordedEvents(t, ns, "nobody", v1alpha1.AccessDeniedReason, 1); len(got) != 1 {
			t.Fatalf("AccessDenied events %q, want one", got)
		}

		// ConfigMaps only: the apply is the write denied.
		role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "configmaps-only"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create", "delete"}}}}
		if err := env.Client.Create(ctx, role); err != nil {
			t.Fatal(err)
		}
		b := tenantBinding(ns)
		b.Name, b.Subjects[0].Name, b.RoleRef.Name = "nobody-configmaps", "nobody", role.Name
		if err := env.Client.Create(ctx, b); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the apply is the denied write", func() (bool, string) {
			c := condition(getModel(t, ns, "nobody"), v1alpha1.StalledCondition)
			return c != nil && strings.Contains(c.Message, `cannot patch resource "deployments" in API group "apps"`), fmt.Sprint(c)
		})
		if ok, what := released(t, ns, "nobody"); !ok {
			t.Fatalf("Deployment written: %s", what)
		}

		// The right granted: the rollout goes on by itself.
		bindTenantRole(t, ns, "nobody")
		waitFor(t, ns, "nobody", v1alpha1.PhaseRollingOut)
		updateDeploymentStatus(t, ns, "nobody", rolloutComplete)
		waitFor(t, ns, "nobody", v1alpha1.PhaseReady, v1alpha1.RolloutSucceededReason)
	})

	t.Run("a-service-account-that-does-not-exist", func(t *testing.T) {
		createDeployment(t, chartDeployment(ns, "ghost", 2))
		m := newModel(ns, "ghost", "OpenMed/pii-v1")
		m.Spec.ServiceAccountName = "ghost"
		createModel(t, m)
		msg := denied(t, ns, "ghost")
		if want := "as ServiceAccount " + ns + "/ghost: " + rollout.MsgServiceAccountMissing; !strings.Contains(msg, want) {
			t.Fatalf("message %q does not say %q", msg, want)
		}
		untouched(t, ns, "ghost")
	})

	t.Run("rights-removed-before-the-deletion", func(t *testing.T) {
		createServiceAccount(t, ns, "leaver")
		bindTenantRole(t, ns, "leaver")
		createDeployment(t, chartDeployment(ns, "leaver", 2))
		m := newModel(ns, "leaver", "OpenMed/pii-v1")
		m.Spec.ServiceAccountName = "leaver"
		createModel(t, m)
		waitFor(t, ns, "leaver", v1alpha1.PhaseRollingOut)
		updateDeploymentStatus(t, ns, "leaver", rolloutComplete)
		waitFor(t, ns, "leaver", v1alpha1.PhaseReady, v1alpha1.RolloutSucceededReason)

		binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "leaver"}}
		if err := env.Client.Delete(ctx, binding); err != nil {
			t.Fatal(err)
		}
		if err := env.Client.Delete(ctx, getModel(t, ns, "leaver")); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the release is denied and the finalizer kept", func() (bool, string) {
			m := getModel(t, ns, "leaver")
			c := condition(m, v1alpha1.StalledCondition)
			return c != nil && c.Reason == v1alpha1.AccessDeniedReason &&
				strings.Contains(c.Message, "release of a Deployment") &&
				slices.Contains(m.Finalizers, v1alpha1.Finalizer), fmt.Sprint(c, m.Finalizers)
		})
		if ok, _ := released(t, ns, "leaver"); ok {
			t.Fatal("the Deployment was released without the right")
		}

		bindTenantRole(t, ns, "leaver")
		eventually(t, "model gone once the right is back", func() (bool, string) {
			err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "leaver"}, &v1alpha1.OpenMedModel{})
			return isNotFound(err), fmt.Sprint(err)
		})
		untouched(t, ns, "leaver")
	})
}

// TestDefaultServiceAccount: with the operator's --default-service-account
// (the lockdown), a model without spec.serviceAccountName writes as that
// ServiceAccount of its namespace: "default", which has no rights, is
// refused with a status that says how to fix it, and nothing is written; a
// model with a ServiceAccount that may rolls out.
func TestDefaultServiceAccount(t *testing.T) {
	ns := newNamespace(t)
	startOperatorWith(t, ns, "default")
	applyTenantRole(t, ns)
	// kube-controller-manager gives every namespace a "default"
	// ServiceAccount; envtest runs none.
	createServiceAccount(t, ns, "default")

	createDeployment(t, chartDeployment(ns, "bare", 2))
	createModel(t, newModel(ns, "bare", "OpenMed/pii-v1"))
	msg := denied(t, ns, "bare")
	for _, want := range []string{"as ServiceAccount " + ns + "/default: ", "system:serviceaccount:" + ns + ":default"} {
		if !strings.Contains(msg, want) {
			t.Fatalf("message %q does not say %q", msg, want)
		}
	}
	untouched(t, ns, "bare")

	createDeployment(t, chartDeployment(ns, "tenant", 2))
	m := newModel(ns, "tenant", "OpenMed/pii-v1")
	m.Spec.ServiceAccountName = tenantSA
	createModel(t, m)
	waitFor(t, ns, "tenant", v1alpha1.PhaseRollingOut)
	if got := getModel(t, ns, "tenant").Status.DesiredVersion; got != "OpenMed/pii-v1" {
		t.Fatalf("desired version %q", got)
	}
}

// TestImpersonationNeedsTheBinding: the operator as the default bundle
// installs it (authenticated as the bundle's ServiceAccount, with the
// bundle's rights only) impersonates the ServiceAccounts of a namespace
// only once examples/tenancy/impersonator-binding.yaml binds the ClusterRole
// openmed-impersonator there. Without it, a model whose ServiceAccount may
// make every write is AccessDenied with a message naming the missing
// binding, one event, and nothing is written; the binding created, the
// rollout goes on by itself.
func TestImpersonationNeedsTheBinding(t *testing.T) {
	cfg := asBundleServiceAccount(t)
	ns := newNamespace(t)
	startOperatorAs(t, cfg, ns, "")
	applyTenantRole(t, ns)

	createDeployment(t, chartDeployment(ns, "unbound", 2))
	m := newModel(ns, "unbound", "OpenMed/pii-v1")
	m.Spec.ServiceAccountName = tenantSA
	createModel(t, m)
	msg := denied(t, ns, "unbound")
	if ready := condition(getModel(t, ns, "unbound"), v1alpha1.ReadyCondition); ready.Status != metav1.ConditionFalse {
		t.Fatalf("Ready = %+v, want False", ready)
	}
	want := "as ServiceAccount " + ns + "/" + tenantSA + ": " + rollout.ImpersonationDenied(ns) + ";"
	if !strings.Contains(msg, want) {
		t.Fatalf("message %q does not name the missing binding: want %q", msg, want)
	}
	untouched(t, ns, "unbound")
	if got := recordedEvents(t, ns, "unbound", v1alpha1.AccessDeniedReason, 1); len(got) != 1 || !strings.Contains(got[0], rollout.ImpersonatorRole) {
		t.Fatalf("AccessDenied events %q, want one naming %s", got, rollout.ImpersonatorRole)
	}

	bindImpersonator(t, ns)
	waitFor(t, ns, "unbound", v1alpha1.PhaseRollingOut)
	updateDeploymentStatus(t, ns, "unbound", rolloutComplete)
	waitFor(t, ns, "unbound", v1alpha1.PhaseReady, v1alpha1.RolloutSucceededReason)
}
