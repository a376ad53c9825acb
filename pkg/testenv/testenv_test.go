package testenv

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// childEnv marks the process TestKilledTestLeavesNothingRunning starts.
const childEnv = "OPENMED_TESTENV_CHILD"

// TestKilledTestLeavesNothingRunning starts a test process that starts the
// API server and etcd and kills it with SIGKILL, as a go test timeout or a
// CI runner's cancel would: the kernel kills both with it. With
// KUBEBUILDER_ASSETS set (as the Makefile sets it) envtest would start the
// bare binaries, which outlive the test.
func TestKilledTestLeavesNothingRunning(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		if _, err := Start(); err != nil {
			t.Fatal(err)
		}
		os.Stdout.WriteString("started\n")
		time.Sleep(time.Minute)
		return
	}
	if _, err := assetsDir(); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestKilledTestLeavesNothingRunning$", "-test.v")
	// The killed process cannot remove its directories (the launchers,
	// etcd's data, the certificates): they go where the test removes them.
	cmd.Env = append(os.Environ(), childEnv+"=1", "TMPDIR="+t.TempDir())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	sc := bufio.NewScanner(out)
	for sc.Scan() && sc.Text() != "started" {
	}
	children := childrenOf(t, cmd.Process.Pid)
	var names []string
	for _, pid := range children {
		names = append(names, command(pid))
	}
	if len(children) < 2 {
		t.Fatalf("the test process runs %v, want kube-apiserver and etcd", names)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	Eventually(t, 10*time.Second, "the control plane to die with the test", func() (bool, string) {
		var alive []string
		for i, pid := range children {
			if c := command(pid); c != "" && !strings.HasPrefix(state(pid), "Z") {
				alive = append(alive, names[i])
			}
		}
		return len(alive) == 0, strings.Join(alive, ", ") + " still running"
	})
}

// childrenOf returns the pids whose parent is pid.
func childrenOf(t *testing.T, pid int) []int {
	t.Helper()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after ')'.
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			n, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
			out = append(out, n)
		}
	}
	return out
}

// command is the process's executable name, "" when it is gone.
func command(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// state is the process's state letter (R, S, Z, ...), "" when it is gone.
func state(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) == 0 {
		return ""
	}
	return fields[0]
}
