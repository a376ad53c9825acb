package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/pkg/localrun"
	"github.com/openmed/openmed-operator/pkg/testenv"
)

// TestPlanServiceAccount: plan names the ServiceAccount a model's writes
// are made as and asks the API server's authorizer whether it may make
// them (SubjectAccessReviews, as the caller): the tenant Role is enough,
// a ServiceAccount without it may not, one that does not exist is said to;
// a caller who may not create SubjectAccessReviews is told it could not be
// checked; offline, it is not checked.
func TestPlanServiceAccount(t *testing.T) {
	ctx := context.Background()
	const ns = "plan-tenant"
	ensureNamespace(t, ns)
	for _, u := range readObjects(t, exampleTarget) {
		u.SetNamespace(ns)
		if err := env.Client.Create(ctx, u, client.FieldOwner("helm")); err != nil {
			t.Fatal(err)
		}
	}
	tenant, err := localrun.TenantRole(ns)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range tenant {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	if err := env.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nobody"}}); err != nil {
		t.Fatal(err)
	}
	modelIn := func(namespace, sa string) string {
		return modelFile(t, namespace, func(u *unstructured.Unstructured) { u.Object["spec"].(map[string]any)["serviceAccountName"] = sa })
	}
	modelAs := func(sa string) string { return modelIn(ns, sa) }
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"tenant-role", []string{"-f", modelAs("openmed-deployer")}, "  access:      may create configmaps, patch deployments\n"},
		{"no-rights", []string{"-f", modelAs("nobody")}, "  access:      may NOT create configmaps, patch deployments: the operator's writes will be denied (AccessDenied) until it may\n"},
		{"missing", []string{"-f", modelAs("ghost")}, "  access:      ServiceAccount plan-tenant/ghost does not exist: the operator writes nothing as it (AccessDenied)\n"},
		{"offline", []string{"-f", modelIn("openmed", "openmed-deployer"), "--target", exampleTarget}, "  access:      not checked (offline)\n"},
		{"caller-without-reviews", []string{"-f", modelAs("openmed-deployer"), "--as", "planner"}, "  access:      could not check: you may not create subjectaccessreviews (authorization.k8s.io)\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "caller-without-reviews" {
				grantPlanner(t)
			}
			res := run(t, append([]string{"plan"}, tc.args...)...)
			if got := exitCode(res.err); got != ExitChanges {
				t.Fatalf("exit code %d (%v)\n%s%s", got, res.err, res.stdout, res.stderr)
			}
			if !strings.Contains(res.stdout, tc.want) {
				t.Fatalf("plan does not say %q:\n%s", tc.want, res.stdout)
			}
			if tc.name != "offline" && !strings.Contains(res.stdout, "  writes as:   ServiceAccount "+ns+"/") {
				t.Fatalf("plan does not name the ServiceAccount:\n%s", res.stdout)
			}
		})
	}
}

// grantPlanner lets the user "planner" run plan (read the model, the
// Deployment and the ConfigMaps, dry-run the apply) and nothing else: no
// SubjectAccessReview, no ResourceClaimTemplate. Tests may call it
// again: the grant stays.
func grantPlanner(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "openmed-planner"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"openmed.ai"}, Resources: []string{"openmedmodels"}, Verbs: []string{"get", "list"}},
		{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"get", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps", "serviceaccounts"}, Verbs: []string{"get", "list"}},
	}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "openmed-planner"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "planner"}}}
	for _, o := range []client.Object{role, binding} {
		if err := env.Client.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	// The API server's RBAC authorizer reads roles and bindings from its
	// own informers: wait until it allows what the binding grants.
	testenv.Eventually(t, 30*time.Second, "the planner's binding seen by the authorizer", func() (bool, string) {
		review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: "planner",
			ResourceAttributes: &authorizationv1.ResourceAttributes{Group: "openmed.ai", Resource: "openmedmodels", Verb: "get", Namespace: "default"}}}
		if err := env.Client.Create(ctx, review); err != nil {
			return false, err.Error()
		}
		return review.Status.Allowed, review.Status.Reason
	})
}
