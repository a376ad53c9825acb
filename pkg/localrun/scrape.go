package localrun

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/kustomize"
)

// The install bundle's ClusterRoles for the operator's metrics endpoint
// (kustomize/rbac/metrics_roles.yaml): the endpoint serves a path only to a
// client whose token the API server authenticates and authorizes for get
// on it.
const (
	// MetricsReaderRole allows get on /metrics.
	MetricsReaderRole = "openmed-metrics-reader"
	// ProfilerRole allows get on /debug/pprof/*, which the operator serves
	// only with --enable-pprof.
	ProfilerRole = "openmed-profiler"
)

// tokenLifetime is how long a token ServiceAccountToken mints is valid: a
// scale run can last hours.
const tokenLifetime = 24 * time.Hour

// Scraper reads an operator's metrics endpoint the way Prometheus does with
// the PodMonitor of examples/monitoring: over HTTPS, with a ServiceAccount's
// bearer token.
type Scraper struct {
	token  string
	client *http.Client
}

// NewScraper returns a Scraper that sends token ("" sends none). roots
// verifies the endpoint's certificate; nil accepts any, as the example
// PodMonitor does for the self-signed certificate the operator serves
// without --metrics-cert-dir.
func NewScraper(token string, roots *x509.CertPool) *Scraper {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: roots, InsecureSkipVerify: roots == nil} //nolint:gosec // the operator's own self-signed certificate
	return &Scraper{token: token, client: &http.Client{Transport: tr}}
}

// ServiceAccountScraper returns a Scraper with a token of the
// ServiceAccount namespace/name (ServiceAccountToken) bound to the bundle's
// ClusterRoles named by roles (BindClusterRoles): it reads what the roles
// allow, as Prometheus bound to them does.
func ServiceAccountScraper(ctx context.Context, c client.Client, namespace, name string, roles ...string) (*Scraper, error) {
	token, err := ServiceAccountToken(ctx, c, namespace, name)
	if err != nil {
		return nil, err
	}
	if err := BindClusterRoles(ctx, c, namespace, name, roles...); err != nil {
		return nil, err
	}
	return NewScraper(token, nil), nil
}

// BindClusterRoles makes, through c, the install bundle's ClusterRoles
// named by roles, as the bundle ships them, and a ClusterRoleBinding of each
// to the ServiceAccount namespace/name; what exists already is left as it
// is.
func BindClusterRoles(ctx context.Context, c client.Client, namespace, name string, roles ...string) error {
	bundled, err := bundleClusterRoles()
	if err != nil {
		return err
	}
	for _, role := range roles {
		cr, ok := bundled[role]
		if !ok {
			return fmt.Errorf("the install bundle has no ClusterRole %s", role)
		}
		binding := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: role + ":" + namespace + ":" + name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: name}},
		}
		for _, obj := range []client.Object{cr, binding} {
			if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("create %T %s: %w", obj, obj.GetName(), err)
			}
		}
	}
	return nil
}

// ServiceAccountToken makes the ServiceAccount namespace/name through c if
// it does not exist and mints a token of it with the TokenRequest API, as
// the kubelet does for a pod.
func ServiceAccountToken(ctx context.Context, c client.Client, namespace, name string) (string, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if err := c.Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("create ServiceAccount %s/%s: %w", namespace, name, err)
	}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(tokenLifetime.Seconds()))}}
	if err := c.SubResource("token").Create(ctx, sa, tr); err != nil {
		return "", fmt.Errorf("request a token of ServiceAccount %s/%s: %w", namespace, name, err)
	}
	return tr.Status.Token, nil
}

// bundleClusterRoles are the ClusterRoles of kustomize/rbac, by name.
func bundleClusterRoles() (map[string]*rbacv1.ClusterRole, error) {
	objs, err := kustomize.Build(filepath.Join(kustomize.Dir(), "rbac"))
	if err != nil {
		return nil, err
	}
	out := map[string]*rbacv1.ClusterRole{}
	for _, o := range objs {
		if o.GetKind() != "ClusterRole" {
			continue
		}
		cr := &rbacv1.ClusterRole{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, cr); err != nil {
			return nil, fmt.Errorf("ClusterRole %s: %w", o.GetName(), err)
		}
		out[cr.Name] = cr
	}
	return out, nil
}

// Get sends a GET for url with the Scraper's token. The caller closes the
// body.
func (s *Scraper) Get(ctx context.Context, url string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	return s.client.Do(req)
}

// Read returns the body of url, or an error with the status and the start
// of the body unless it answered 200.
func (s *Scraper) Read(ctx context.Context, url string) ([]byte, error) {
	resp, err := s.Get(ctx, url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %.200s", url, resp.Status, body)
	}
	return body, nil
}
