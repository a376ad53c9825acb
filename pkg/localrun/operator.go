package localrun

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"syscall"
	"time"

	"github.com/openmed/openmed-operator/pkg/minicluster"
)

// OperatorPackage is the import path of the operator command.
const OperatorPackage = "github.com/openmed/openmed-operator/cmd/openmed-operator"

// ModuleRoot is the directory of this module's go.mod, found from this
// source file, so a build works from any working directory.
func ModuleRoot() string {
	_, file, _, _ := goruntime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// BuildOperator builds the openmed-operator binary into dir the way the
// image builds it (static, stripped) and returns its path. The go command
// of the toolchain running this program does the build, so `go run` and
// `go test` never fetch a second toolchain.
func BuildOperator(ctx context.Context, dir string) (string, error) {
	return Build(ctx, dir, OperatorPackage, "openmed-operator")
}

// Build builds the command pkg of this module into dir/name as
// BuildOperator builds the operator (the running toolchain, static,
// stripped) and returns its path.
func Build(ctx context.Context, dir, pkg, name string) (string, error) {
	bin := filepath.Join(dir, name)
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, pkg)
	cmd.Dir = ModuleRoot()
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN="+goruntime.Version(), "CGO_ENABLED=0")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build %s: %w\n%s", pkg, err, out.String())
	}
	return bin, nil
}

// OperatorConfig says how to run one operator process.
type OperatorConfig struct {
	// Binary is the openmed-operator executable.
	Binary string
	// Kubeconfig is passed as --kubeconfig.
	Kubeconfig string
	// LogPath collects the process's output; it is appended to.
	LogPath string
	// Args are further flags, after the ones StartOperator sets (the last
	// occurrence of a flag wins).
	Args []string
	// Env are further environment variables (NAME=value) of the process.
	Env []string
	// Scraper reads the metrics endpoint for Operator.Read; nil makes Read
	// fail.
	Scraper *Scraper
	// WebhookNamespace, when set, makes this process the one that serves
	// the bundle's validating admission webhook: on a free loopback port,
	// with the ValidatingWebhookConfiguration pointed at its URL and the
	// certificate kept in the bundle's Secret of this namespace (the
	// bundle's, given as $RUNTIME_NAMESPACE). The configuration names one
	// URL, so one process of a cluster serves it; the others leave it off.
	WebhookNamespace string
}

// Operator is a running openmed-operator process.
type Operator struct {
	cmd         *exec.Cmd
	scraper     *Scraper
	logPath     string
	metricsAddr string
	healthAddr  string
	webhookAddr string
	// done is closed once the process has exited and been reaped; err then
	// holds how it exited.
	done chan struct{}
	err  error
}

// StartOperator launches the operator with --kubeconfig, metrics and health
// endpoints (and, with cfg.WebhookNamespace, the webhook) on free loopback
// ports and cfg.Args. The process runs in a
// process group of its own, so a terminal's Ctrl-C reaches only this program,
// which then stops it in order; and it gets SIGKILL from the kernel when the
// thread that started it ends, so it never outlives this program, even one
// that is killed with SIGKILL.
func StartOperator(cfg OperatorConfig) (*Operator, error) {
	ports, err := minicluster.FreeLoopbackAddrs(3)
	if err != nil {
		return nil, err
	}
	logFile, err := os.OpenFile(cfg.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	// The child has its own copy of the descriptor.
	defer logFile.Close()

	o := &Operator{scraper: cfg.Scraper, logPath: cfg.LogPath, metricsAddr: ports[0], healthAddr: ports[1], done: make(chan struct{})}
	args := []string{
		"--kubeconfig=" + cfg.Kubeconfig,
		"--metrics-addr=" + o.metricsAddr,
		"--health-addr=" + o.healthAddr,
	}
	var env []string
	if cfg.WebhookNamespace != "" {
		o.webhookAddr = ports[2]
		args = append(args, "--webhook-addr="+o.webhookAddr, "--webhook-url="+o.WebhookURL())
		env = append(env, "RUNTIME_NAMESPACE="+cfg.WebhookNamespace)
	}
	cmd := exec.Command(cfg.Binary, append(args, cfg.Args...)...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if env = append(env, cfg.Env...); len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	o.cmd = cmd
	// In a process group of its own, tied to this process by the kernel's
	// parent-death signal (see minicluster.StartChild).
	waited, err := minicluster.StartChild(cmd)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", cfg.Binary, err)
	}
	go func() {
		o.err = <-waited
		close(o.done)
	}()
	return o, nil
}

// PID is the process id.
func (o *Operator) PID() int { return o.cmd.Process.Pid }

// LogPath is the file with the process's output.
func (o *Operator) LogPath() string { return o.logPath }

// Signal sends sig to the process group.
func (o *Operator) Signal(sig syscall.Signal) error { return signalGroup(o.PID(), sig) }

// MetricsURL is where the operator serves Prometheus metrics (HTTPS, to an
// authorized bearer token), unless OperatorConfig.Args moved it.
func (o *Operator) MetricsURL() string { return o.endpoint("/metrics") }

// WebhookURL is where the operator serves the validating admission webhook
// (https://127.0.0.1:port), or "" when it does not (see
// OperatorConfig.WebhookNamespace).
func (o *Operator) WebhookURL() string {
	if o.webhookAddr == "" {
		return ""
	}
	return "https://" + o.webhookAddr
}

// endpoint is the URL of path (with its query) on the metrics endpoint.
func (o *Operator) endpoint(path string) string { return "https://" + o.metricsAddr + path }

// Read returns the body of path on the metrics endpoint ("/metrics", or
// "/debug/pprof/heap" of an operator run with --enable-pprof) as
// OperatorConfig.Scraper reads it, or an error unless it answered 200.
func (o *Operator) Read(ctx context.Context, path string) ([]byte, error) {
	if o.scraper == nil {
		return nil, errors.New("localrun: the operator was started without a Scraper")
	}
	return o.scraper.Read(ctx, o.endpoint(path))
}

// Done is closed once the process has exited.
func (o *Operator) Done() <-chan struct{} { return o.done }

// WaitReady waits until the operator's /readyz answers 200 (its manager
// has started and its caches are syncing; a webhook, when served, has its
// certificate) and then until its metrics
// endpoint answers at all (without a token, 401): the manager binds the
// metrics listener in a goroutine of its own, after the health probes may
// already answer. It fails early when the process exits.
func (o *Operator) WaitReady(ctx context.Context) error {
	if err := o.waitFor(ctx, "http://"+o.healthAddr+"/readyz", http.DefaultTransport, func(code int) bool { return code == http.StatusOK }); err != nil {
		return err
	}
	return o.waitFor(ctx, o.MetricsURL(), NewScraper("", nil).client.Transport, func(int) bool { return true })
}

// waitFor waits until url answers with a status ok accepts, the process
// exits or ctx ends.
func (o *Operator) waitFor(ctx context.Context, url string, tr http.RoundTripper, ok func(code int) bool) error {
	client := &http.Client{Timeout: time.Second, Transport: tr}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if resp, err := client.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if ok(resp.StatusCode) {
				return nil
			}
		}
		select {
		case <-o.done:
			return fmt.Errorf("openmed-operator exited: %v; last lines of %s:\n%s", o.err, o.logPath, Tail(o.logPath, 15))
		case <-ctx.Done():
			return fmt.Errorf("openmed-operator not ready (%s): %w; last lines of %s:\n%s", url, ctx.Err(), o.logPath, Tail(o.logPath, 15))
		case <-tick.C:
		}
	}
}

// Stop sends SIGTERM, which makes the manager shut down gracefully, and
// SIGKILL to the process group once timeout has passed, then waits until the
// process is reaped. Stopping a process that has already exited is fine.
func (o *Operator) Stop(timeout time.Duration) error {
	if !o.exited() {
		if err := signalGroup(o.PID(), syscall.SIGTERM); err != nil {
			return err
		}
		select {
		case <-o.done:
		case <-time.After(timeout):
		}
	}
	return o.Kill()
}

// Kill sends SIGKILL to the process group, as a crash or an OOM kill would
// end the operator, and waits until the process is reaped.
func (o *Operator) Kill() error {
	// A reaped process's group id is free again and may belong to someone
	// else by now: only a live process is signalled.
	if !o.exited() {
		if err := signalGroup(o.PID(), syscall.SIGKILL); err != nil {
			return err
		}
	}
	<-o.done
	return nil
}

func (o *Operator) exited() bool {
	select {
	case <-o.done:
		return true
	default:
		return false
	}
}

// signalGroup signals every process in the group; an empty group is fine.
func signalGroup(pgid int, sig syscall.Signal) error {
	if err := syscall.Kill(-pgid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal process group %d: %w", pgid, err)
	}
	return nil
}

// Tail returns the last n lines of the file at path, indented, or why it
// cannot be read.
func Tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return "  " + err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  " + strings.Join(lines, "\n  ")
}
