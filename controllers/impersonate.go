package controllers

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/pkg/rollout"
)

// Impersonation: the writes a pass makes for a model (its manifest
// ConfigMaps, the apply, the release, the pruning) can be made as a
// ServiceAccount of the model's namespace (spec.serviceAccountName, or the
// operator's --default-service-account), the way Flux's kustomize-controller
// applies as a Kustomization's ServiceAccount. The API server then
// authorizes each write as that ServiceAccount, and the audit log records
// the operator as the user and the ServiceAccount as the impersonated user.
//
// One client does every impersonated write: the identity travels in the
// request's context, and a round tripper turns it into the Impersonate-User
// header. So impersonation costs no client, no connection and no discovery
// per model or per pass: the same requests as the operator's own writes,
// with one more header. Reads, status writes and events never carry it.

// asKey is the context key of the identity a write is made as.
type asKey struct{}

// writeAs returns ctx whose writes through the impersonating client are
// made as the ServiceAccount namespace/name; an empty name leaves them the
// operator's own.
func writeAs(ctx context.Context, namespace, name string) context.Context {
	if name == "" {
		return ctx
	}
	return context.WithValue(ctx, asKey{}, serviceAccountUser(namespace, name))
}

// serviceAccountUser is the user name the API server gives the
// ServiceAccount namespace/name. Impersonating it without groups makes the
// API server add the ServiceAccount's groups (system:serviceaccounts,
// system:serviceaccounts:<namespace>, system:authenticated), as a token of
// that ServiceAccount would carry.
func serviceAccountUser(namespace, name string) string {
	return "system:serviceaccount:" + namespace + ":" + name
}

// impersonating sets the Impersonate-User header of a request whose context
// names an identity (writeAs), replacing any impersonation the operator's
// own kubeconfig adds: a write for a model is authorized as the model's
// ServiceAccount, never as a mix of two identities.
type impersonating struct{ next http.RoundTripper }

func (t impersonating) RoundTrip(req *http.Request) (*http.Response, error) {
	user, ok := req.Context().Value(asKey{}).(string)
	if !ok {
		return t.next.RoundTrip(req)
	}
	req = net.CloneRequest(req)
	for h := range req.Header {
		if strings.HasPrefix(h, "Impersonate-") {
			req.Header.Del(h)
		}
	}
	req.Header.Set("Impersonate-User", user)
	return t.next.RoundTrip(req)
}

func (t impersonating) WrappedRoundTripper() http.RoundTripper { return t.next }

// newWriter returns a client for the operator's writes on cfg, which
// impersonates the identity its request context names (writeAs).
func newWriter(cfg *rest.Config, opts client.Options) (client.Client, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return impersonating{next: rt} })
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("impersonating client: %w", err)
	}
	opts.HTTPClient = httpClient
	return client.New(cfg, opts)
}

// isAccessDenied reports an answer of the API server's authorization: the
// user may not make the verb on the resource (RBAC, or any authorizer),
// or may not impersonate the identity. An admission webhook's or policy's
// denial is a 403 too, but says so in other words, and stays Rejected.
func isAccessDenied(err error) bool {
	if !apierrors.IsForbidden(err) {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, " cannot ") && strings.Contains(msg, ` resource "`)
}

// isImpersonationDenied reports the API server's refusal of the
// impersonation itself: the operator may not impersonate ServiceAccounts
// in the namespace (no RoleBinding of rollout.ImpersonatorRole there), so
// no write of the model is even authorized as the ServiceAccount. The API
// server checks it before the write. Since Kubernetes 1.36 it tries
// constrained impersonation (KEP-5284) before the impersonate verb and
// answers with the first refusal, so the verb it names may be either.
func isImpersonationDenied(err error) bool {
	if !isAccessDenied(err) {
		return false
	}
	msg := err.Error()
	for _, refusal := range impersonationRefusals {
		if strings.Contains(msg, refusal) {
			return true
		}
	}
	return false
}

// impersonationRefusals are the parts of a refused impersonation of a
// ServiceAccount: the impersonate verb on serviceaccounts, and constrained
// impersonation's verbs for ServiceAccounts (impersonate:serviceaccount,
// and impersonate-on:serviceaccount:<verb> on the written resource).
var impersonationRefusals = []string{
	` cannot impersonate resource "serviceaccounts"`,
	` cannot impersonate:serviceaccount resource `,
	` cannot impersonate-on:serviceaccount:`,
}

// deniedDetail is the detail of a write in namespace that the API server's
// authorization denied: the binding to add when the impersonation was
// refused (the answer names the operator's identity, not what to do), else
// the answer (which user may not make which verb on which resource).
func deniedDetail(err error, namespace string) string {
	if isImpersonationDenied(err) {
		return rollout.ImpersonationDenied(namespace)
	}
	return rejectionDetail(err)
}

// serviceAccountMissing reports whether the ServiceAccount namespace/name
// is known not to exist. A token of a deleted ServiceAccount stops working,
// but the API server authorizes an impersonated name whether or not it
// exists (a RoleBinding to a deleted ServiceAccount still grants the name);
// so the operator checks, and writes nothing as a ServiceAccount that does
// not exist. The check reads the manager's cache (ServiceAccounts by
// metadata, pruned to their names; the informer starts with the first
// model that names one), so it costs no request. A read that fails is
// logged, and the API server decides.
func (r *OpenMedModelReconciler) serviceAccountMissing(ctx context.Context, namespace, name string) bool {
	sa := &metav1.PartialObjectMetadata{}
	sa.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ServiceAccount"))
	err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, sa)
	if err != nil && !apierrors.IsNotFound(err) {
		ctrl.LoggerFrom(ctx).Error(err, "read the ServiceAccount the writes are made as; the API server decides", "ServiceAccount", namespace+"/"+name)
	}
	return apierrors.IsNotFound(err)
}
