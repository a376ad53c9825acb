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
// checked; offline, it is not checked. A model with a golden request needs
// patch pods/status for the verdicts and get on its header's Secret by
// name; what it may not is named with what follows; the Secret is never
// read, not even by a caller who may read it.
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
	// verifiedAs declares a golden request whose header takes its value
	// from the Secret secret; the Secret exists, and plan never reads it.
	verifiedAs := func(sa, secret string) string {
		return modelFile(t, ns, func(u *unstructured.Unstructured) {
			spec := u.Object["spec"].(map[string]any)
			spec["serviceAccountName"] = sa
			spec["verification"] = map[string]any{
				"request": map[string]any{"port": "http", "path": "/pii/extract", "headers": []any{
					map[string]any{"name": "Authorization", "valueFrom": map[string]any{"secretKeyRef": map[string]any{"name": secret, "key": "token"}}}}},
				"successCondition": "response.code == 200",
			}
		})
	}
	for _, name := range []string{"openmed-verification-token", "other-token"} {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, StringData: map[string]string{"token": "s3cr3t-value"}}
		if err := env.Client.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	const (
		denied         = ": the operator's requests will be denied (AccessDenied) until it may"
		withoutVerdict = "; without patch pods/status, no pod's verdict can be written: new pods never become Ready and the rollout fails at its progress deadline"
		withoutSecret  = ", the golden request cannot read its header, so every pod fails it and the rollout fails at once"
	)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"tenant-role", []string{"-f", modelAs("openmed-deployer")}, "  access:      may create configmaps, patch deployments\n"},
		{"no-rights", []string{"-f", modelAs("nobody")}, "  access:      may NOT create configmaps, patch deployments" + denied + "\n"},
		// The tenant Role grants the verdicts and get on its one Secret.
		{"verified", []string{"-f", verifiedAs("openmed-deployer", "openmed-verification-token")},
			"  access:      may create configmaps, patch deployments, patch pods/status, get secrets named openmed-verification-token\n"},
		{"verified-other-secret", []string{"-f", verifiedAs("openmed-deployer", "other-token")},
			"  access:      may NOT get secrets named other-token" + denied + "; without get secrets named other-token" + withoutSecret + "\n"},
		{"verified-no-rights", []string{"-f", verifiedAs("nobody", "openmed-verification-token")},
			"  access:      may NOT create configmaps, patch deployments, patch pods/status, get secrets named openmed-verification-token" + denied +
				withoutVerdict + "; without get secrets named openmed-verification-token" + withoutSecret + "\n"},
		{"missing", []string{"-f", modelAs("ghost")}, "  access:      ServiceAccount plan-tenant/ghost does not exist: the operator writes nothing as it (AccessDenied)\n"},
		{"offline", []string{"-f", modelIn("openmed", "openmed-deployer"), "--target", exampleTarget}, "  access:      not checked (offline)\n"},
		{"caller-without-reviews", []string{"-f", modelAs("openmed-deployer"), "--as", "planner"}, "  access:      could not check: you may not create subjectaccessreviews (authorization.k8s.io)\n"},
		// A caller who may not read Secrets plans a model whose header
		// comes from one: plan names the Secret and never reads it.
		{"verified-caller-without-secrets", []string{"-f", verifiedAs("openmed-deployer", "openmed-verification-token"), "--as", "planner"},
			"    headers:   Authorization (from Secret openmed-verification-token, key token, read when sent)\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if strings.Contains(tc.name, "caller-without") {
				grantPlanner(t)
			}
			res := run(t, append([]string{"plan"}, tc.args...)...)
			if got := exitCode(res.err); got != ExitChanges {
				t.Fatalf("exit code %d (%v)\n%s%s", got, res.err, res.stdout, res.stderr)
			}
			if !strings.Contains(res.stdout, tc.want) {
				t.Fatalf("plan does not say %q:\n%s", tc.want, res.stdout)
			}
			if strings.Contains(res.stdout, "s3cr3t-value") {
				t.Fatalf("plan shows a Secret's value:\n%s", res.stdout)
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
