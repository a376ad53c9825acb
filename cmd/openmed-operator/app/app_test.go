package app

import (
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
// watched, and the Lease timings are Flux's.
func TestDefaults(t *testing.T) {
	o := parse(t)
	if o.LeaderElection.Enable || !o.LeaderElection.ReleaseOnCancel || o.LeaderElection.LeaseDuration != 35*time.Second {
		t.Errorf("leader election defaults = %+v", o.LeaderElection)
	}
	if !o.Watch.AllNamespaces || o.Watch.LabelSelector != "" {
		t.Errorf("watch defaults = %+v", o.Watch)
	}
	if o.MetricsAddr != ":8080" || o.HealthAddr != ":9440" || o.Concurrent != 4 || o.GotkMetrics {
		t.Errorf("addresses and concurrency = %q %q %d", o.MetricsAddr, o.HealthAddr, o.Concurrent)
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
