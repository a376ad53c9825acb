package controllers

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/openmed/openmed-operator/pkg/rollout"
)

// TestRejectionDetail: what a rejected request puts in the status is the
// API server's causes, each "field: reason", at most maxCauses of at most
// maxCauseLength bytes each, cut on a character boundary; without causes,
// the answer's message after the object's name; nothing for an error that
// is not an API answer. The errors are the API machinery's own.
func TestRejectionDetail(t *testing.T) {
	deployments := schema.GroupKind{Group: "apps", Kind: "Deployment"}
	long := strings.Repeat("é", 400) // 800 bytes of two-byte characters
	var many field.ErrorList
	for _, f := range []string{"spec.a", "spec.b", "spec.c", "spec.d", "spec.e"} {
		many = append(many, field.Invalid(field.NewPath(f), "x", long))
	}
	for _, tc := range []struct {
		name  string
		err   error
		exact bool   // the detail is want
		want  string // with exact
		parts int    // else: how many causes it names; 0 for one cut message
	}{{
		name: "minReadySeconds above the progress deadline",
		err: apierrors.NewInvalid(deployments, "svc", field.ErrorList{field.Invalid(
			field.NewPath("spec", "progressDeadlineSeconds"), int32(8), "must be greater than minReadySeconds")}),
		exact: true,
		want:  "spec.progressDeadlineSeconds: Invalid value: 8: must be greater than minReadySeconds",
	}, {
		name:  "five long causes",
		err:   apierrors.NewInvalid(deployments, "svc", many),
		parts: maxCauses,
	}, {
		name: "an admission webhook's denial has no causes",
		err: apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "deployments"}, "svc",
			errors.New(`admission webhook "policy.example.com" denied the request: env entries must not use valueFrom`)),
		exact: true,
		want:  `admission webhook "policy.example.com" denied the request: env entries must not use valueFrom`,
	}, {
		name: "a long denial",
		err:  apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "deployments"}, "svc", errors.New(long+long)),
	}, {
		name:  "not an answer of the API server",
		err:   errors.New("connection reset by peer"),
		exact: true,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := rejectionDetail(tc.err)
			if !utf8.ValidString(got) {
				t.Errorf("cut inside a character: %q", got)
			}
			if len(got) > maxCauses*(maxCauseLength+len("; "))+len("…") || len(rollout.Shorten(got, rollout.MaxFailureDetail)) > rollout.MaxFailureDetail {
				t.Errorf("%d bytes, unbounded: %q", len(got), got)
			}
			switch {
			case tc.exact:
				if got != tc.want {
					t.Errorf("detail %q, want %q", got, tc.want)
				}
			case tc.parts > 0:
				parts := strings.Split(got, "; ")
				if len(parts) != tc.parts+1 || parts[tc.parts] != "…" {
					t.Fatalf("%d parts, want %d causes and an ellipsis: %q", len(parts), tc.parts, got)
				}
				for i, p := range parts[:tc.parts] {
					if len(p) > maxCauseLength || !strings.HasPrefix(p, []string{"spec.a", "spec.b", "spec.c"}[i]+": Invalid value") {
						t.Errorf("cause %d: %d bytes: %q", i, len(p), p)
					}
				}
			default:
				if len(got) > rollout.MaxFailureDetail || !strings.HasPrefix(got, "é") || strings.Contains(got, "is forbidden") {
					t.Errorf("detail of %d bytes: %q", len(got), got)
				}
			}
		})
	}
}

// TestDeniedDetail: a refused impersonation names the binding to add in
// the model's namespace, not the operator's identity; the
// ServiceAccount's own denial stays the API server's answer (which user
// may not make which verb on which resource). The errors are built as the
// API server's authorization filters build them.
func TestDeniedDetail(t *testing.T) {
	forbidden := func(resource, name, msg string) error {
		return apierrors.NewForbidden(schema.GroupResource{Resource: resource}, name, errors.New(msg))
	}
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{{
		name: "the impersonation refused",
		err: forbidden("serviceaccounts", "openmed-deployer",
			`User "system:serviceaccount:openmed-system:openmed-operator" cannot impersonate resource "serviceaccounts" in API group "" in the namespace "team-b"`),
		want: "the operator may not impersonate ServiceAccounts in namespace team-b: bind ClusterRole openmed-impersonator to its ServiceAccount there (RoleBinding openmed-impersonator)",
	}, {
		// Kubernetes 1.36 and later try constrained impersonation first.
		name: "constrained impersonation refused for the write",
		err: forbidden("configmaps", "",
			`User "system:serviceaccount:openmed-system:openmed-operator" cannot impersonate-on:serviceaccount:create resource "configmaps" in API group "" in the namespace "team-b"`),
		want: "the operator may not impersonate ServiceAccounts in namespace team-b: bind ClusterRole openmed-impersonator to its ServiceAccount there (RoleBinding openmed-impersonator)",
	}, {
		name: "constrained impersonation refused for the ServiceAccount",
		err: forbidden("serviceaccounts", "openmed-deployer",
			`User "system:serviceaccount:openmed-system:openmed-operator" cannot impersonate:serviceaccount resource "serviceaccounts" in API group "authentication.k8s.io" in the namespace "team-b"`),
		want: "the operator may not impersonate ServiceAccounts in namespace team-b: bind ClusterRole openmed-impersonator to its ServiceAccount there (RoleBinding openmed-impersonator)",
	}, {
		name: "the ServiceAccount may not write",
		err: forbidden("configmaps", "",
			`User "system:serviceaccount:team-b:default" cannot create resource "configmaps" in API group "" in the namespace "team-b"`),
		want: `User "system:serviceaccount:team-b:default" cannot create resource "configmaps" in API group "" in the namespace "team-b"`,
	}, {
		name: "impersonating a user, not a ServiceAccount",
		err:  forbidden("users", "alice", `User "bob" cannot impersonate resource "users" in API group "" at the cluster scope`),
		want: `User "bob" cannot impersonate resource "users" in API group "" at the cluster scope`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if got := deniedDetail(tc.err, "team-b"); got != tc.want {
				t.Errorf("detail %q, want %q", got, tc.want)
			}
		})
	}
}
