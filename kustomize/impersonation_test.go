package kustomize_test

import (
	"context"
	"slices"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/openmed/openmed-operator/kustomize"
	"github.com/openmed/openmed-operator/pkg/localrun"
	"github.com/openmed/openmed-operator/pkg/rollout"
)

// impersonateServiceAccounts is the one rule of the impersonator role.
var impersonateServiceAccounts = []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"serviceaccounts"}, Verbs: []string{"impersonate"}}}

// TestImpersonatorRoleFollowsTheCode keeps the hand-written RBAC of
// impersonation in step with the name the operator's AccessDenied message
// tells a user to bind (rollout.ImpersonatorRole): every overlay ships that
// role with impersonation of ServiceAccounts and nothing else, and no other
// role of the bundle grants impersonation; the cluster-wide overlays bind
// it nowhere, the namespaced one in its own namespace only; the example
// binding in examples/tenancy binds that ClusterRole, under that name, to
// the ServiceAccount of the cluster-wide bundles.
func TestImpersonatorRoleFollowsTheCode(t *testing.T) {
	for _, ov := range overlays {
		t.Run(ov.name, func(t *testing.T) {
			objs := build(t, ov.name)
			var sa corev1.ServiceAccount
			typed(t, objs, "ServiceAccount", "openmed-operator", &sa)
			roleKind := "Role"
			if ov.clusterWide {
				roleKind = "ClusterRole"
			}
			var role rbacv1.ClusterRole
			typed(t, objs, roleKind, rollout.ImpersonatorRole, &role)
			if !equality.Semantic.DeepEqual(role.Rules, impersonateServiceAccounts) {
				t.Errorf("%s %s rules %+v, want only %+v", roleKind, rollout.ImpersonatorRole, role.Rules, impersonateServiceAccounts)
			}
			var bindings []string
			for _, o := range objs {
				switch o.GetKind() {
				case "Role", "ClusterRole":
					if o.GetName() == rollout.ImpersonatorRole {
						continue
					}
					var r rbacv1.ClusterRole
					fromUnstructured(t, o.Object, &r)
					for _, rule := range r.Rules {
						if slices.Contains(rule.Verbs, "impersonate") {
							t.Errorf("%s %s grants impersonation: %+v", o.GetKind(), o.GetName(), rule)
						}
					}
				case "RoleBinding", "ClusterRoleBinding":
					var b rbacv1.RoleBinding
					fromUnstructured(t, o.Object, &b)
					if b.RoleRef.Name == rollout.ImpersonatorRole {
						bindings = append(bindings, o.GetKind()+"/"+o.GetName())
					}
				}
			}
			if ov.clusterWide {
				if len(bindings) > 0 {
					t.Errorf("the bundle binds %s itself: %v; only a tenant namespace's RoleBinding may", rollout.ImpersonatorRole, bindings)
				}
				return
			}
			if want := []string{"RoleBinding/" + rollout.ImpersonatorRole}; !slices.Equal(bindings, want) {
				t.Fatalf("bindings of %s: %v, want %v", rollout.ImpersonatorRole, bindings, want)
			}
			var b rbacv1.RoleBinding
			typed(t, objs, "RoleBinding", rollout.ImpersonatorRole, &b)
			checkImpersonatorBinding(t, b, "Role", sa)
		})
	}

	t.Run("example", func(t *testing.T) {
		var sa corev1.ServiceAccount
		typed(t, build(t, kustomize.DefaultOverlay), "ServiceAccount", "openmed-operator", &sa)
		objs, err := localrun.ImpersonatorBinding("team-a")
		if err != nil {
			t.Fatal(err)
		}
		if len(objs) != 1 || objs[0].GetKind() != "RoleBinding" {
			t.Fatalf("examples/tenancy/impersonator-binding.yaml holds %v, want one RoleBinding", kinds(objs))
		}
		var b rbacv1.RoleBinding
		fromUnstructured(t, objs[0].Object, &b)
		checkImpersonatorBinding(t, b, "ClusterRole", sa)
	})
}

// checkImpersonatorBinding fails unless b, named rollout.ImpersonatorRole,
// binds the roleKind of that name to the ServiceAccount sa alone.
func checkImpersonatorBinding(t *testing.T, b rbacv1.RoleBinding, roleKind string, sa corev1.ServiceAccount) {
	t.Helper()
	if b.Name != rollout.ImpersonatorRole {
		t.Errorf("binding named %q, want %q (the name the AccessDenied message gives)", b.Name, rollout.ImpersonatorRole)
	}
	if want := (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: roleKind, Name: rollout.ImpersonatorRole}); b.RoleRef != want {
		t.Errorf("roleRef %+v, want %+v", b.RoleRef, want)
	}
	if want := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa.Name, Namespace: sa.Namespace}}; !slices.Equal(b.Subjects, want) {
		t.Errorf("subjects %+v, want the bundle's ServiceAccount %+v", b.Subjects, want)
	}
}

func fromUnstructured(t *testing.T, obj map[string]any, out any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, out); err != nil {
		t.Fatal(err)
	}
}

// TestImpersonationIsPerNamespace asks the API server's authorizer, with
// the bundle installed and the example binding in one tenant namespace,
// whether the bundle's ServiceAccount may impersonate a given
// ServiceAccount: never one of kube-system (whose controllers' rights
// would make a stolen operator token cluster-admin) nor of a namespace
// without the binding; one of the namespace with it, yes. The namespaced
// install: only its own namespace's.
func TestImpersonationIsPerNamespace(t *testing.T) {
	ctx := context.Background()
	const bound, unbound = "tenant-bound", "tenant-unbound"
	for _, ns := range []string{bound, unbound} {
		if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	binding, err := localrun.ImpersonatorBinding(bound)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range binding {
		if err := env.Client.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}

	type target struct {
		namespace, name string
		allowed         bool
	}
	kubeSystem := []target{
		{"kube-system", "replicaset-controller", false},
		{"kube-system", "clusterrole-aggregation-controller", false},
		{"kube-system", "default", false},
	}
	cases := map[string][]target{
		kustomize.DefaultOverlay:    append(slices.Clone(kubeSystem), target{unbound, "default", false}, target{bound, "default", true}, target{bound, "openmed-deployer", true}),
		kustomize.LockdownOverlay:   append(slices.Clone(kubeSystem), target{unbound, "default", false}, target{bound, "default", true}, target{bound, "openmed-deployer", true}),
		kustomize.NamespacedOverlay: append(slices.Clone(kubeSystem), target{bound, "default", false}, target{"openmed-models", "default", true}),
	}
	for _, ov := range overlays {
		t.Run(ov.name, func(t *testing.T) {
			if _, err := kustomize.Apply(ctx, env.Client, build(t, ov.name)); err != nil {
				t.Fatal(err)
			}
			user := localrun.ServiceAccountUser(ov.namespace, "openmed-operator")
			groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + ov.namespace, "system:authenticated"}
			for _, tg := range cases[ov.name] {
				sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
					User: user, Groups: groups,
					ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "impersonate", Resource: "serviceaccounts", Namespace: tg.namespace, Name: tg.name},
				}}
				if err := env.Client.Create(ctx, sar); err != nil {
					t.Fatal(err)
				}
				switch as := localrun.ServiceAccountUser(tg.namespace, tg.name); {
				case sar.Status.Allowed && !tg.allowed:
					t.Errorf("the operator may impersonate %s without a binding in %s (%s)", as, tg.namespace, sar.Status.Reason)
				case !sar.Status.Allowed && tg.allowed:
					t.Errorf("the operator may not impersonate %s although %s binds %s (%s)", as, tg.namespace, rollout.ImpersonatorRole, sar.Status.Reason)
				}
			}
		})
	}
}
