package minicluster

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestStartFailure runs Start against stand-in scripts for the binaries: a
// component that dies or never becomes healthy must make Start fail with the
// component named, and leave no process and no temporary directory behind.
func TestStartFailure(t *testing.T) {
	for _, tc := range []struct {
		name string
		// etcd is the stand-in etcd's shell script; $PIDFILE is where it
		// records its pid.
		etcd    string
		wantErr []string
	}{
		{
			name:    "component exits",
			etcd:    "echo $$ > \"$PIDFILE\"\necho 'flag provided but not defined' >&2\nexit 3",
			wantErr: []string{"waiting for etcd /health", "etcd exited: exit status 3", "flag provided but not defined"},
		},
		{
			name:    "component never healthy",
			etcd:    "echo $$ > \"$PIDFILE\"\nexec sleep 60",
			wantErr: []string{"waiting for etcd /health", "deadline exceeded"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bins := t.TempDir()
			for _, c := range components {
				script := "#!/bin/sh\nexit 1\n"
				if c == Etcd {
					script = "#!/bin/sh\n" + tc.etcd + "\n"
				}
				if err := os.WriteFile(filepath.Join(bins, string(c)), []byte(script), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			pidFile := filepath.Join(t.TempDir(), "pid")
			t.Setenv("PIDFILE", pidFile)
			tmp := t.TempDir()
			t.Setenv("TMPDIR", tmp)

			_, err := Start(t.Context(), Config{KubeDir: bins, KwokBinary: bins, StartTimeout: 2 * time.Second})
			if err == nil {
				t.Fatal("Start succeeded with broken binaries")
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error does not mention %q:\n%v", want, err)
				}
			}
			data, err := os.ReadFile(pidFile)
			if err != nil {
				t.Fatalf("stand-in etcd never ran: %v", err)
			}
			pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
			if err != nil {
				t.Fatal(err)
			}
			if state, _, err := procStat(pid); err == nil && state != "Z" {
				t.Errorf("stand-in etcd (pid %d) still running, state %s", pid, state)
			} else if err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Error(err)
			}
			if left, _ := os.ReadDir(tmp); len(left) > 0 {
				t.Errorf("temporary data directory left behind: %s", left[0].Name())
			}
		})
	}
}
