package minicluster

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openmed/openmed-operator/pkg/testenv"
)

// helperEnv makes the test binary act as a program that starts a cluster and
// then waits to be signalled; TestChildrenDieWithParent runs it.
const helperEnv = "MINICLUSTER_TEST_HELPER"

func TestMain(m *testing.M) {
	// A fresh shell finds the binaries under bin/ as make sets them.
	testenv.UseBuiltBinaries()
	if os.Getenv(helperEnv) == "1" {
		os.Exit(runHelper())
	}
	os.Exit(m.Run())
}

// helperReport is what the helper prints once its cluster is ready.
type helperReport struct {
	PIDs    map[Component]int
	DataDir string
}

// runHelper starts a cluster, installs StopOnSignal, prints the pids and
// blocks until a signal ends the process.
func runHelper() int {
	c, err := Start(context.Background(), Config{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	c.StopOnSignal()
	if err := json.NewEncoder(os.Stdout).Encode(helperReport{PIDs: c.PIDs(), DataDir: c.DataDir()}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	select {}
}

// requireBinaries fails the test when the binaries have not been built
// (in -short mode it skips: the test starts a control plane).
func requireBinaries(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a control plane; skipped in -short mode")
	}
	if err := Binaries(Config{}); err != nil {
		t.Fatalf("control-plane binaries not available, run `make %s` (it builds them into bin/): %v", BuildTarget, err)
	}
}

// procIdentity identifies a running process: the start time (field 22 of
// /proc/<pid>/stat) tells it apart from a later process that reuses the pid.
type procIdentity struct {
	pid       int
	startTime string
}

// identify records the identity of each pid, failing if one is not alive.
func identify(t *testing.T, pids map[Component]int) map[Component]procIdentity {
	t.Helper()
	ids := map[Component]procIdentity{}
	for name, pid := range pids {
		state, start, err := procStat(pid)
		if err != nil || state == "Z" {
			t.Fatalf("%s (pid %d) is not running: state %q, %v", name, pid, state, err)
		}
		ids[name] = procIdentity{pid: pid, startTime: start}
	}
	return ids
}

// alive returns the components whose process still runs. A zombie counts as
// gone: it no longer runs and holds nothing but its pid.
func alive(ids map[Component]procIdentity) []string {
	var left []string
	for name, id := range ids {
		state, start, err := procStat(id.pid)
		if err == nil && start == id.startTime && state != "Z" {
			left = append(left, fmt.Sprintf("%s (pid %d, state %s)", name, id.pid, state))
		}
	}
	return left
}

// waitGone waits until none of the processes runs any more. On failure it
// kills the survivors, so a failing test does not leak a control plane.
func waitGone(t *testing.T, ids map[Component]procIdentity, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		left := alive(ids)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, id := range ids {
				if _, start, err := procStat(id.pid); err == nil && start == id.startTime {
					_ = syscall.Kill(id.pid, syscall.SIGKILL)
				}
			}
			t.Fatalf("processes still running after %s: %s", timeout, strings.Join(left, ", "))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// procStat reads the state and start time of pid from /proc.
func procStat(pid int) (state, startTime string, err error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", "", err
	}
	// The command name (field 2) is in parentheses and may hold spaces, so
	// fields are counted from the last ')'.
	s := string(data)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 20 {
		return "", "", fmt.Errorf("short /proc/%d/stat", pid)
	}
	return fields[0], fields[19], nil
}

// readReport reads the helper's report line.
func readReport(r *bufio.Reader) (helperReport, error) {
	var rep helperReport
	line, err := r.ReadBytes('\n')
	if err != nil {
		return rep, err
	}
	return rep, json.Unmarshal(line, &rep)
}
