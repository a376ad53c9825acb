package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/openmed/openmed-operator/pkg/localrun"
	"github.com/openmed/openmed-operator/pkg/minicluster"
)

// operatorProcess is one running openmed-operator.
type operatorProcess struct {
	name        string
	cmd         *exec.Cmd
	metricsAddr string
	healthAddr  string
	out         *syncBuffer
	exited      chan struct{}
	exitErr     error
}

// syncBuffer is the process's combined output, shown when a test fails.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// freeAddr returns a free loopback address for the operator to bind.
func freeAddr(t *testing.T) string {
	t.Helper()
	addrs, err := minicluster.FreeLoopbackAddrs(1)
	if err != nil {
		t.Fatal(err)
	}
	return addrs[0]
}

// kubeconfig writes a kubeconfig for the test API server. With user set,
// every request impersonates that user and groups, as `kubectl --as` does.
func kubeconfig(t *testing.T, user string, groups ...string) string {
	t.Helper()
	cfg := env.Config
	auth := &clientcmdapi.AuthInfo{
		ClientCertificateData: cfg.CertData,
		ClientKeyData:         cfg.KeyData,
		Token:                 cfg.BearerToken,
		Impersonate:           user,
		ImpersonateGroups:     groups,
	}
	kc := clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"test": {Server: cfg.Host, CertificateAuthorityData: cfg.CAData}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"test": auth},
		Contexts:       map[string]*clientcmdapi.Context{"test": {Cluster: "test", AuthInfo: "test"}},
		CurrentContext: "test",
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// serviceAccountKubeconfig impersonates a ServiceAccount with the groups the
// API server gives its tokens.
func serviceAccountKubeconfig(t *testing.T, namespace, name string) string {
	return kubeconfig(t, "system:serviceaccount:"+namespace+":"+name,
		"system:serviceaccounts", "system:serviceaccounts:"+namespace, "system:authenticated")
}

// startOperator runs the binary with the given kubeconfig, runtime namespace
// and flags, on free metrics and health ports, and waits until it is ready
// (start).
func startOperator(t *testing.T, name, kubeconfigPath, runtimeNamespace string, args ...string) *operatorProcess {
	t.Helper()
	p := &operatorProcess{name: name, metricsAddr: freeAddr(t), healthAddr: freeAddr(t)}
	args = append([]string{
		"--kubeconfig=" + kubeconfigPath,
		"--metrics-addr=" + p.metricsAddr,
		"--health-addr=" + p.healthAddr,
		"--log-encoding=console",
		"--log-level=info",
	}, args...)
	p.cmd = exec.Command(binary, args...)
	p.cmd.Env = append(os.Environ(), "RUNTIME_NAMESPACE="+runtimeNamespace)
	p.start(t)
	return p
}

// start runs p.cmd and waits until /readyz on p.healthAddr answers 200 and
// the metrics endpoint on p.metricsAddr answers at all (it is bound in a
// goroutine of its own, after the probes may answer). The process dies with
// the test: it gets SIGKILL when the test binary exits (Pdeathsig) and is
// killed at cleanup if still running.
func (p *operatorProcess) start(t *testing.T) {
	t.Helper()
	p.out, p.exited = &syncBuffer{}, make(chan struct{})
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	// Own process group, parent-death signal, forked from a thread locked
	// until the process exits (minicluster.StartChild).
	waited, err := minicluster.StartChild(p.cmd)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		p.exitErr = <-waited
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.exited
		}
		if t.Failed() {
			t.Logf("output of %s:\n%s", p.name, p.out.String())
		}
	})
	eventually(t, p.name+" ready", func() (bool, string) {
		select {
		case <-p.exited:
			t.Fatalf("%s exited: %v\n%s", p.name, p.exitErr, p.out.String())
		default:
		}
		resp, err := http.Get("http://" + p.healthAddr + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false, "/readyz: " + resp.Status
		}
		resp, err = localrun.NewScraper("", nil).Get(context.Background(), p.metricsURL("/metrics"))
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return true, ""
	})
}

// terminate sends SIGTERM and expects a graceful exit with status 0 within
// the manager's shutdown timeout.
func (p *operatorProcess) terminate(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
		if p.exitErr != nil {
			t.Errorf("%s did not exit cleanly after SIGTERM: %v", p.name, p.exitErr)
		}
	case <-time.After(40 * time.Second):
		t.Fatalf("%s did not exit within 40s of SIGTERM", p.name)
	}
}

// kill ends the process with SIGKILL, as a node failure or OOM kill would:
// nothing is released.
func (p *operatorProcess) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-p.exited
}

// metricsURL is the URL of path on the process's metrics endpoint.
func (p *operatorProcess) metricsURL(path string) string { return "https://" + p.metricsAddr + path }

// sample is one line of the Prometheus text format.
type sample struct {
	name   string
	labels string
	value  float64
}

// scrape reads the process's /metrics as metricsReader.
func (p *operatorProcess) scrape(t *testing.T) []sample {
	t.Helper()
	body, err := metricsReader.Read(context.Background(), p.metricsURL("/metrics"))
	if err != nil {
		t.Fatal(err)
	}
	var out []sample
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		s := sample{value: v}
		s.name, s.labels, _ = strings.Cut(line[:i], "{")
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// sum adds the values of a metric whose labels contain every fragment
// (fragments look like `name="m1"`).
func sum(samples []sample, name string, fragments ...string) (total float64, found bool) {
	for _, s := range samples {
		if s.name != name {
			continue
		}
		match := true
		for _, f := range fragments {
			match = match && strings.Contains(s.labels, f)
		}
		if match {
			total += s.value
			found = true
		}
	}
	return total, found
}

// writes counts the mutating API requests the process has sent
// (client-go's rest_client_requests_total), the POSTs of the metrics
// endpoint's token and access reviews among them.
func (p *operatorProcess) writes(t *testing.T) float64 {
	t.Helper()
	samples := p.scrape(t)
	var n float64
	for _, m := range []string{"POST", "PUT", "PATCH", "DELETE"} {
		v, _ := sum(samples, "rest_client_requests_total", fmt.Sprintf("method=%q", m))
		n += v
	}
	return n
}

// isLeader reports whether the process holds the Lease named id.
func (p *operatorProcess) isLeader(t *testing.T, id string) bool {
	t.Helper()
	v, _ := sum(p.scrape(t), "leader_election_master_status", fmt.Sprintf("name=%q", id))
	return v == 1
}
