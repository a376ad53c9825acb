package minicluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBinaries(t *testing.T) {
	// The environment of whoever runs the test must not leak into it.
	t.Setenv(KubeDirEnv, "")
	t.Setenv(KwokEnv, "")

	// fakeBins makes a directory with the named files, executable or not.
	fakeBins := func(t *testing.T, mode os.FileMode, names ...string) string {
		dir := t.TempDir()
		for _, n := range names {
			if err := os.WriteFile(filepath.Join(dir, n), []byte("#!/bin/sh\n"), mode); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	kube := []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"}
	all := append([]string{"kwok"}, kube...)

	for _, tc := range []struct {
		name string
		cfg  func(t *testing.T) Config
		// wantErr lists what the error must mention; none means success.
		wantErr []string
	}{
		{
			name:    "nothing configured",
			cfg:     func(*testing.T) Config { return Config{} },
			wantErr: []string{KubeDirEnv, "make " + BuildTarget},
		},
		{
			name: "kwok missing",
			cfg: func(t *testing.T) Config {
				return Config{KubeDir: fakeBins(t, 0o755, kube...)}
			},
			wantErr: []string{KwokEnv, "make " + BuildTarget},
		},
		{
			name: "all in one directory, kwok given as the directory",
			cfg: func(t *testing.T) Config {
				dir := fakeBins(t, 0o755, all...)
				return Config{KubeDir: dir, KwokBinary: dir}
			},
		},
		{
			name: "taken from the environment",
			cfg: func(t *testing.T) Config {
				dir := fakeBins(t, 0o755, all...)
				t.Setenv(KubeDirEnv, dir)
				t.Setenv(KwokEnv, filepath.Join(dir, "kwok"))
				return Config{}
			},
		},
		{
			name: "scheduler not built",
			cfg: func(t *testing.T) Config {
				dir := fakeBins(t, 0o755, "etcd", "kube-apiserver", "kube-controller-manager", "kwok")
				return Config{KubeDir: dir, KwokBinary: dir}
			},
			wantErr: []string{"kube-scheduler", "make " + BuildTarget},
		},
		{
			name: "not executable",
			cfg: func(t *testing.T) Config {
				dir := fakeBins(t, 0o644, all...)
				return Config{KubeDir: dir, KwokBinary: dir}
			},
			wantErr: []string{"etcd", "kwok", "not an executable"},
		},
		{
			name: "invalid never-ready annotation",
			cfg: func(t *testing.T) Config {
				dir := fakeBins(t, 0o755, all...)
				return Config{KubeDir: dir, KwokBinary: dir, NeverReady: NeverReady{Annotation: `bad"key`}}
			},
			wantErr: []string{"never-ready annotation"},
		},
		{
			name: "invalid crash-after-ready annotation",
			cfg: func(t *testing.T) Config {
				dir := fakeBins(t, 0o755, all...)
				return Config{KubeDir: dir, KwokBinary: dir, CrashAfterReady: CrashAfterReady{Annotation: "bad key"}}
			},
			wantErr: []string{"crash-after-ready annotation"},
		},
		{
			name: "unknown crash reason",
			cfg: func(t *testing.T) Config {
				dir := fakeBins(t, 0o755, all...)
				return Config{KubeDir: dir, KwokBinary: dir, CrashAfterReady: CrashAfterReady{Reason: "Evicted"}}
			},
			wantErr: []string{"Evicted", "neither Error nor OOMKilled"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Binaries(tc.cfg(t))
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
		})
	}
}
