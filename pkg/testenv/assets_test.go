package testenv

import (
	"strings"
	"testing"
)

// TestNewestKube: a plain `go test` uses the newest Kubernetes version's
// build under bin/k8s, the one `make test` runs, when the oldest supported
// version's (`make compatbin`) sits beside it.
func TestNewestKube(t *testing.T) {
	for _, tc := range []struct {
		name    string
		dirs    []string
		want    string
		wantErr string
	}{{
		name: "the only build",
		dirs: []string{"/b/k8s/v1.37.0-etcd-v3.6.16"},
		want: "/b/k8s/v1.37.0-etcd-v3.6.16",
	}, {
		name: "the oldest supported version beside it",
		dirs: []string{"/b/k8s/v1.34.4-etcd-v3.6.16", "/b/k8s/v1.37.0-etcd-v3.6.16"},
		want: "/b/k8s/v1.37.0-etcd-v3.6.16",
	}, {
		name: "versions compare as numbers, not strings",
		dirs: []string{"/b/k8s/v1.100.0-etcd-v3.6.16", "/b/k8s/v1.37.10-etcd-v3.6.16", "/b/k8s/v1.37.9-etcd-v3.6.16"},
		want: "/b/k8s/v1.100.0-etcd-v3.6.16",
	}, {
		name:    "no build",
		wantErr: "no build",
	}, {
		name:    "the newest version twice, with two etcd versions",
		dirs:    []string{"/b/k8s/v1.34.4-etcd-v3.6.16", "/b/k8s/v1.37.0-etcd-v3.6.15", "/b/k8s/v1.37.0-etcd-v3.6.16"},
		wantErr: "several builds of Kubernetes 1.37.0",
	}, {
		name:    "a name of another form",
		dirs:    []string{"/b/k8s/v1.37.0-etcd-v3.6.16", "/b/k8s/scratch"},
		wantErr: "bin/k8s/scratch is not named",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := newestKube(tc.dirs)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("newestKube = %q, %v; want an error saying %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("newestKube = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
