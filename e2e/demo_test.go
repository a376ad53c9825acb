package e2e_test

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/openmed/openmed-operator/pkg/minicluster"
)

// demoRun is one openmed-demo process (`make run`) and what it printed.
type demoRun struct {
	cmd   *exec.Cmd
	procs processTracker
	mu    sync.Mutex
	out   strings.Builder
	// started is closed once the operator runs: the storyline begins.
	started chan struct{}
	exited  chan struct{}
	err     error
}

// storylineStarts is the first line of the storyline, printed once the
// cluster and the operator are up.
const storylineStarts = "== stage 1/"

// startDemo runs the demo binary on a local control plane of its own and
// samples its process tree until it exits.
func startDemo(t *testing.T, args ...string) *demoRun {
	t.Helper()
	cmd := exec.Command(demoBinary, append([]string{"--operator-binary=" + operatorBinary}, args...)...)
	// The demo must start its own cluster, whatever the caller's shell has.
	// Its working folder goes under one of the test's: a second Ctrl-C
	// exits at once and leaves the folder behind, which the test removes.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KUBECONFIG=") && !strings.HasPrefix(kv, "TMPDIR=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	tmp, err := os.MkdirTemp("", "openmed-demo-test-")
	if err != nil {
		t.Fatal(err)
	}
	// Runs after the demo was killed and waited for (cleanups run last
	// first); what it started may still be exiting, so the removal is
	// retried for a while and a failure only logged.
	t.Cleanup(func() {
		var err error
		for range 50 {
			if err = os.RemoveAll(tmp); err == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Logf("remove the demo's folder: %v", err)
	})
	cmd.Env = append(cmd.Env, "TMPDIR="+tmp)
	// A plain pipe rather than StdoutPipe: the output is read to its end
	// while StartChild's goroutine waits for the process.
	stdout, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = w, w
	// Tied to the test binary by the kernel's parent-death signal, from a
	// thread that stays locked until the demo exits (minicluster.StartChild).
	waited, err := minicluster.StartChild(cmd)
	w.Close()
	if err != nil {
		stdout.Close()
		t.Fatal(err)
	}
	r := &demoRun{cmd: cmd, started: make(chan struct{}), exited: make(chan struct{})}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-r.exited
	})
	go func() {
		var once sync.Once
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			r.mu.Lock()
			r.out.WriteString(sc.Text() + "\n")
			r.mu.Unlock()
			if strings.Contains(sc.Text(), storylineStarts) {
				once.Do(func() { close(r.started) })
			}
		}
		stdout.Close()
		r.err = <-waited
		close(r.exited)
	}()
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			r.procs.sample(cmd.Process.Pid)
			select {
			case <-r.exited:
				return
			case <-tick.C:
			}
		}
	}()
	return r
}

func (r *demoRun) output() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.out.String()
}

// waitStarted waits until the cluster and the operator run.
func (r *demoRun) waitStarted(t *testing.T) {
	t.Helper()
	select {
	case <-r.started:
	case <-r.exited:
		t.Fatalf("openmed-demo exited before the storyline began (%v):\n%s", r.err, r.output())
	case <-time.After(2 * time.Minute):
		t.Fatalf("the storyline did not begin:\n%s", r.output())
	}
}

// wait waits for the demo to exit and returns its exit code.
func (r *demoRun) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-r.exited:
	case <-time.After(timeout):
		t.Fatalf("openmed-demo still runs after %s:\n%s", timeout, r.output())
	}
	var exit *exec.ExitError
	switch {
	case r.err == nil:
		return 0
	case errors.As(r.err, &exit):
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return exit.ExitCode()
	}
	t.Fatal(r.err)
	return -1
}

// controlPlane are the executables the demo must have started, so a leftover
// check cannot pass because nothing was seen.
var controlPlane = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "openmed-operator"}

// assertNoLeftovers checks that every process seen below the demo is gone,
// within grace (the kernel's parent-death signal is asynchronous).
func (r *demoRun) assertNoLeftovers(t *testing.T, grace time.Duration) {
	t.Helper()
	names := r.procs.names()
	for _, n := range controlPlane {
		if !names[n] {
			t.Errorf("never saw %s below the demo (saw %v)", n, names)
		}
	}
	deadline := time.Now().Add(grace)
	for {
		left := r.procs.leftovers()
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes left after openmed-demo ended: %v", left)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

var dataDirLine = regexp.MustCompile(`\(data in (\S+)\)`)

// dataDir is the local control plane's temporary directory the demo printed.
func (r *demoRun) dataDir(t *testing.T) string {
	t.Helper()
	m := dataDirLine.FindStringSubmatch(r.output())
	if m == nil {
		t.Fatalf("the demo did not print its data directory:\n%s", r.output())
	}
	return m[1]
}

// TestDemoOnce: `make run` with --once plays the whole storyline, prints
// every stage and the summary, exits 0 and leaves no process behind.
func TestDemoOnce(t *testing.T) {
	requireCluster(t)
	t.Parallel()
	r := startDemo(t, "--once", "--progress-deadline=5s")
	if code := r.wait(t, 4*time.Minute); code != 0 {
		t.Fatalf("openmed-demo --once exited %d:\n%s", code, r.output())
	}
	out := r.output()
	for _, want := range []string{"first-rollout", "upgrade", "never-ready", "revert", "crash-after-warm-up", "revert-again", "forgets-names", "revert-verified", "manual-rollback", "release"} {
		if !regexp.MustCompile(`(?m)^` + want + `\s+ok\s`).MatchString(out) {
			t.Errorf("summary has no successful %s stage", want)
		}
	}
	for _, want := range []string{"ProgressDeadlineExceeded seen: true", "Baking seen: true", "BakeFailed seen: true", "VerificationFailed seen: true", "argocd=Degraded", "kstatus=Failed", "argocd=Healthy", "kstatus=Current"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if t.Failed() {
		t.Log(out)
	}
	r.assertNoLeftovers(t, 0)
	if _, err := os.Stat(r.dataDir(t)); !os.IsNotExist(err) {
		t.Errorf("the temporary data directory is left: %v", err)
	}
}

// TestDemoInterrupted: Ctrl-C (SIGINT) in the middle of the storyline stops
// the operator and the cluster, removes the temporary data and exits 130.
func TestDemoInterrupted(t *testing.T) {
	requireCluster(t)
	t.Parallel()
	r := startDemo(t, "--once")
	r.waitStarted(t)
	if err := r.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if code := r.wait(t, time.Minute); code != 130 {
		t.Errorf("exit code after SIGINT = %d, want 130\n%s", code, r.output())
	}
	r.assertNoLeftovers(t, 0)
	if _, err := os.Stat(r.dataDir(t)); !os.IsNotExist(err) {
		t.Errorf("the temporary data directory is left: %v", err)
	}
}

// TestDemoKilled: a demo killed with SIGKILL cannot clean up; the kernel's
// parent-death signal still ends every process it started. Only its
// temporary data directory stays, which the test removes.
func TestDemoKilled(t *testing.T) {
	requireCluster(t)
	t.Parallel()
	r := startDemo(t, "--once")
	r.waitStarted(t)
	dir := r.dataDir(t)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := r.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	r.wait(t, time.Minute)
	r.assertNoLeftovers(t, 10*time.Second)
}
