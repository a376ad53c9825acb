package app

import (
	"crypto/tls"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/leaderelection"
	"github.com/spf13/pflag"
)

func parse(t *testing.T, args ...string) Options {
	t.Helper()
	var o Options
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return o
}

// TestDefaults pins the Flux defaults the flags inherit: leader election is
// off in the binary (the shipped manifests turn it on), all namespaces are
// watched, and the Lease timings are Flux's; metrics on :8443 (HTTPS), no
// profiling.
func TestDefaults(t *testing.T) {
	o := parse(t)
	if o.LeaderElection.Enable || !o.LeaderElection.ReleaseOnCancel || o.LeaderElection.LeaseDuration != 35*time.Second {
		t.Errorf("leader election defaults = %+v", o.LeaderElection)
	}
	if !o.Watch.AllNamespaces || o.Watch.LabelSelector != "" {
		t.Errorf("watch defaults = %+v", o.Watch)
	}
	if o.MetricsAddr != ":8443" || o.HealthAddr != ":9440" || o.Concurrent != 4 || o.GotkMetrics {
		t.Errorf("addresses and concurrency = %q %q %d", o.MetricsAddr, o.HealthAddr, o.Concurrent)
	}
	// Profiling is off and the certificate self-signed unless asked for.
	if o.EnablePprof || o.MetricsCertDir != "" {
		t.Errorf("--enable-pprof=%v --metrics-cert-dir=%q", o.EnablePprof, o.MetricsCertDir)
	}
	// The webhook is off unless asked for (the shipped Deployment does),
	// so of the operators a local run starts only one serves it; its
	// certificate is the operator's own, in the bundle's Secret.
	if w := o.Webhook; w.Addr != "0" || w.CertDir != "" || w.URL != "" || w.SecretName != "openmed-operator-webhook-cert" || w.ServiceName != "openmed-operator-webhook" {
		t.Errorf("webhook defaults = %+v", w)
	}
	// Seconds, not Flux's 15-minute cap: a failed pass is retried soon.
	if o.RateLimiter.MinRetryDelay != 250*time.Millisecond || o.RateLimiter.MaxRetryDelay != 10*time.Second {
		t.Errorf("retry delays = %+v", o.RateLimiter)
	}
}

// TestUnusedWatchFlagIsNotExposed: the operator reads no user ConfigMaps or
// Secrets, so Flux's --watch-configs-label-selector would do nothing.
func TestUnusedWatchFlagIsNotExposed(t *testing.T) {
	var o Options
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.BindFlags(fs)
	if fs.Lookup("watch-configs-label-selector") != nil {
		t.Error("--watch-configs-label-selector is bound")
	}
}

func TestResolveScope(t *testing.T) {
	for _, tc := range []struct {
		name             string
		args             []string
		runtimeNamespace string
		wantNamespace    string
		wantLease        string
		wantErr          bool
	}{
		{name: "cluster-wide", runtimeNamespace: "openmed-system", wantLease: LeaderElectionID},
		{
			name: "shard", args: []string{"--watch-label-selector=sharding.fluxcd.io/key=shard1"},
			wantLease: leaderelection.GenerateID(LeaderElectionID, "sharding.fluxcd.io/key=shard1"),
		},
		{
			name: "main shard", args: []string{"--watch-label-selector=!sharding.fluxcd.io/key"},
			wantLease: leaderelection.GenerateID(LeaderElectionID, "!sharding.fluxcd.io/key"),
		},
		{name: "invalid selector", args: []string{"--watch-label-selector=a=b=c"}, wantErr: true},
		{
			name: "own namespace", args: []string{"--watch-all-namespaces=false"}, runtimeNamespace: "team-a",
			wantNamespace: "team-a", wantLease: LeaderElectionID,
		},
		{
			name: "explicit namespace", args: []string{"--watch-all-namespaces=false", "--watch-namespace=team-b"}, runtimeNamespace: "openmed-system",
			wantNamespace: "team-b", wantLease: LeaderElectionID,
		},
		{name: "no namespace to watch", args: []string{"--watch-all-namespaces=false"}, wantErr: true},
		{name: "namespace ignored cluster-wide", args: []string{"--watch-namespace=team-b"}, wantLease: LeaderElectionID},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := parse(t, tc.args...).ResolveScope(tc.runtimeNamespace)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if s.Namespace != tc.wantNamespace || s.LeaderElectionID != tc.wantLease || s.LeaderElectionNamespace != tc.runtimeNamespace {
				t.Errorf("scope = %+v, want namespace %q lease %q in %q", s, tc.wantNamespace, tc.wantLease, tc.runtimeNamespace)
			}
		})
	}
}

// TestMetricsOptions: the metrics endpoint is always HTTPS behind the
// authentication and authorization filter, speaks HTTP/1.1 only, and
// carries /debug/pprof only with --enable-pprof; --metrics-cert-dir must
// hold a certificate and a key.
func TestMetricsOptions(t *testing.T) {
	certDir := t.TempDir()
	for _, name := range []string{"tls.crt", "tls.key"} {
		if err := os.WriteFile(filepath.Join(certDir, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name      string
		args      []string
		wantPprof bool
		wantErr   string
	}{
		{name: "defaults"},
		{name: "pprof", args: []string{"--enable-pprof"}, wantPprof: true},
		{name: "cert dir", args: []string{"--metrics-cert-dir=" + certDir}},
		{name: "cert dir without a certificate", args: []string{"--metrics-cert-dir=" + t.TempDir()}, wantErr: "tls.crt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := parse(t, tc.args...)
			err := checkMetricsCertDir(o.MetricsCertDir)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			m := metricsOptions(o)
			if !m.SecureServing || m.FilterProvider == nil || m.CertDir != o.MetricsCertDir {
				t.Errorf("secure %v, filter %v, cert dir %q: want HTTPS behind the filter with the cert dir %q", m.SecureServing, m.FilterProvider != nil, m.CertDir, o.MetricsCertDir)
			}
			cfg := &tls.Config{NextProtos: []string{"h2"}}
			for _, f := range m.TLSOpts {
				f(cfg)
			}
			if !slices.Equal(cfg.NextProtos, []string{"http/1.1"}) {
				t.Errorf("ALPN protocols %v, want http/1.1 only", cfg.NextProtos)
			}
			if _, ok := m.ExtraHandlers["/debug/pprof/"]; ok != tc.wantPprof || (!tc.wantPprof && len(m.ExtraHandlers) > 0) {
				t.Errorf("extra handlers %v, want /debug/pprof: %v", slices.Collect(maps.Keys(m.ExtraHandlers)), tc.wantPprof)
			}
		})
	}
}
