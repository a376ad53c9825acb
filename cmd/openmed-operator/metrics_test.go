package main

import (
	"context"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	certutil "k8s.io/client-go/util/cert"

	"github.com/openmed/openmed-operator/pkg/localrun"
)

// TestMetricsEndpoint runs the binary with its defaults, with
// --enable-pprof and with --metrics-cert-dir, and reads its metrics
// endpoint as the real API server authenticates (TokenReview) and
// authorizes (SubjectAccessReview) each request: without a token it is
// refused (401); a ServiceAccount's token is refused (403) unless the
// ServiceAccount is bound to the bundle's ClusterRole for the path
// (openmed-metrics-reader for /metrics, openmed-profiler for
// /debug/pprof); /debug/pprof is not served at all without --enable-pprof.
// The endpoint speaks HTTPS, HTTP/1.1 only (the client offers HTTP/2), with
// the certificate of --metrics-cert-dir or a self-signed one.
func TestMetricsEndpoint(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "metrics")
	token := func(name string, roles ...string) string {
		t.Helper()
		tok, err := localrun.ServiceAccountToken(ctx, env.Client, ns, name)
		if err != nil {
			t.Fatal(err)
		}
		if err := localrun.BindClusterRoles(ctx, env.Client, ns, name, roles...); err != nil {
			t.Fatal(err)
		}
		return tok
	}
	reader := token("reader", localrun.MetricsReaderRole)
	certDir, roots := servingCert(t)
	scrapers := map[string]*localrun.Scraper{
		"nobody":   localrun.NewScraper("", nil),
		"unbound":  localrun.NewScraper(token("unbound"), nil),
		"reader":   localrun.NewScraper(reader, nil),
		"profiler": localrun.NewScraper(token("profiler", localrun.ProfilerRole), nil),
		// Trusts only the CA of the certificate in certDir.
		"verifying reader": localrun.NewScraper(reader, roots),
	}

	kc := kubeconfig(t, "")
	defaults := startOperator(t, "defaults", kc, ns)
	pprof := startOperator(t, "pprof", kc, ns, "--enable-pprof")
	certs := startOperator(t, "cert-dir", kc, ns, "--metrics-cert-dir="+certDir)

	for _, tc := range []struct {
		name     string
		p        *operatorProcess
		path, as string
		want     int
		// body is in the answer of a 200; wantErr in the error of a
		// request that gets no answer.
		body, wantErr string
	}{
		{name: "metrics without a token", p: defaults, path: "/metrics", as: "nobody", want: http.StatusUnauthorized},
		{name: "metrics as a ServiceAccount bound to nothing", p: defaults, path: "/metrics", as: "unbound", want: http.StatusForbidden},
		{name: "metrics as openmed-metrics-reader", p: defaults, path: "/metrics", as: "reader", want: http.StatusOK, body: "openmed_passes_total"},
		{name: "metrics as openmed-profiler", p: defaults, path: "/metrics", as: "profiler", want: http.StatusForbidden},
		{name: "pprof off by default", p: defaults, path: "/debug/pprof/", as: "profiler", want: http.StatusNotFound},
		{name: "pprof without a token", p: pprof, path: "/debug/pprof/", as: "nobody", want: http.StatusUnauthorized},
		{name: "pprof as openmed-metrics-reader", p: pprof, path: "/debug/pprof/heap", as: "reader", want: http.StatusForbidden},
		{name: "pprof as openmed-profiler", p: pprof, path: "/debug/pprof/", as: "profiler", want: http.StatusOK, body: "goroutine"},
		{name: "metrics beside pprof", p: pprof, path: "/metrics", as: "reader", want: http.StatusOK, body: "openmed_passes_total"},
		{name: "self-signed without a cert dir", p: defaults, path: "/metrics", as: "verifying reader", wantErr: "certificate signed by unknown authority"},
		{name: "the certificate of the cert dir", p: certs, path: "/metrics", as: "verifying reader", want: http.StatusOK, body: "openmed_passes_total"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := tc.p.metricsURL(tc.path)
			resp, err := scrapers[tc.as].Get(ctx, url)
			if tc.wantErr != "" {
				if err == nil {
					resp.Body.Close()
					t.Fatalf("GET %s as %s answered %s, want an error saying %q", url, tc.as, resp.Status, tc.wantErr)
				}
				if !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("GET %s as %s: %v, want an error saying %q", url, tc.as, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tc.want {
				t.Fatalf("GET %s as %s answered %s, want %d: %.200q", url, tc.as, resp.Status, tc.want, body)
			}
			if resp.Proto != "HTTP/1.1" {
				t.Errorf("GET %s: protocol %s, want HTTP/1.1", url, resp.Proto)
			}
			if tc.body != "" && !strings.Contains(string(body), tc.body) {
				t.Errorf("GET %s as %s: the answer lacks %q: %.300q", url, tc.as, tc.body, body)
			}
		})
	}
}

// servingCert writes a certificate for localhost and 127.0.0.1, signed by a
// CA of its own, as tls.crt and tls.key into a new directory, and returns
// the directory and a pool holding that CA.
func servingCert(t *testing.T) (string, *x509.CertPool) {
	t.Helper()
	cert, key, err := certutil.GenerateSelfSignedCertKey("localhost", []net.IP{net.ParseIP("127.0.0.1")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, data := range map[string][]byte{"tls.crt": cert, "tls.key": key} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(cert) {
		t.Fatal("the generated certificate is not PEM")
	}
	return dir, roots
}
