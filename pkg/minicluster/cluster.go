package minicluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// pollInterval is how often Start checks readiness; components come up within
// seconds, so a short interval is what keeps Start fast.
const pollInterval = 100 * time.Millisecond

// kwokNodeLabel marks the nodes kwok manages
// (--manage-nodes-with-label-selector). A label, not an annotation: the API
// server filters the watch by it, so a node that loses it reaches kwok as
// deleted and kwok stops renewing its Lease; with an annotation selector
// kwok filters on its side, ignores the update and heartbeats on.
const kwokNodeLabel = "kwok.x-k8s.io/node"

// Cluster is a running control plane. Stop it when done.
type Cluster struct {
	cfg        Config
	dataDir    string
	tempDir    bool
	kubeconfig string
	restConfig *rest.Config

	launcher *launcher
	lock     *os.File

	// podCIDR is where kwok takes pod IPs from; podCIDRLock holds it
	// against the other clusters on this machine (reservePodCIDR).
	podCIDR     netip.Prefix
	podCIDRLock io.Closer

	mu    sync.Mutex
	procs []*process

	stopOnce sync.Once
	stopErr  error
}

// Start launches the control plane described by cfg and returns once it can
// run workloads: the API server is ready, the fake node is Ready with its
// not-ready taint gone, and the default ServiceAccount exists. If anything
// fails, or ctx ends first, Start stops whatever it launched and returns an
// error that names the failing component.
//
// Ports are picked free and released just before the components bind them,
// so another process can take one in between; a start that fails with
// "address already in use" is retried, twice at most, on new ports.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	for attempt := 1; ; attempt++ {
		c, err := start(ctx, cfg)
		if err == nil || attempt == 3 || ctx.Err() != nil || !strings.Contains(err.Error(), "address already in use") {
			return c, err
		}
	}
}

func start(ctx context.Context, cfg Config) (_ *Cluster, err error) {
	cfg, err = cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	bins, err := cfg.binaries()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	defer cancel()

	c := &Cluster{cfg: cfg, launcher: newLauncher()}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Stop())
		}
	}()
	if err := c.prepareDataDir(); err != nil {
		return nil, err
	}
	free, err := FreeLoopbackPorts(6)
	if err != nil {
		return nil, fmt.Errorf("find free ports: %w", err)
	}
	l := launch{
		bins:          bins,
		etcdURL:       "http://" + loopback(free[0]),
		etcdPeerURL:   "http://" + loopback(free[1]),
		apiPort:       free[2],
		kcmPort:       free[3],
		schedulerPort: free[4],
		kwokAddr:      loopback(free[5]),
	}
	// Each step needs the ones before it. kube-controller-manager,
	// kube-scheduler and kwok only need the API server, so they are all
	// launched before any of them is waited for.
	steps := []func(context.Context, *launch) error{
		c.writeFiles,
		c.startEtcd,
		c.startAPIServer,
		c.reservePodCIDR,
		c.startNodeComponents,
		c.waitSchedulable,
	}
	for _, step := range steps {
		if err := step(ctx, &l); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// launch carries what the start-up steps share.
type launch struct {
	bins                            map[Component]string
	etcdURL, etcdPeerURL            string
	apiPort, kcmPort, schedulerPort int
	kwokAddr                        string

	files     pkiFiles
	clientset kubernetes.Interface
}

// writeFiles writes the PKI, a kubeconfig per API user and the kwok stages.
func (c *Cluster) writeFiles(_ context.Context, l *launch) error {
	certs, err := newPKI(time.Now())
	if err != nil {
		return fmt.Errorf("generate PKI: %w", err)
	}
	if l.files, err = certs.write(c.path("pki")); err != nil {
		return fmt.Errorf("write PKI: %w", err)
	}
	host := "https://" + loopback(l.apiPort)
	for user, kp := range map[string]keyPair{
		"admin":                       certs.Admin,
		string(KubeControllerManager): certs.KCM,
		string(KubeScheduler):         certs.Scheduler,
		string(Kwok):                  certs.Kwok,
	} {
		if err := certs.writeKubeconfig(c.path(user+".kubeconfig"), host, user, kp); err != nil {
			return fmt.Errorf("write kubeconfig for %s: %w", user, err)
		}
	}
	c.kubeconfig = c.path("admin.kubeconfig")
	c.restConfig = certs.restConfig(host, certs.Admin)
	if l.clientset, err = kubernetes.NewForConfig(c.restConfig); err != nil {
		return err
	}
	stages, err := renderStages(c.cfg.NeverReady, c.cfg.CrashAfterReady)
	if err != nil {
		return err
	}
	return os.WriteFile(c.path("kwok-stages.yaml"), stages, 0o600)
}

func (c *Cluster) startEtcd(ctx context.Context, l *launch) error {
	etcd, err := c.start(l.bins, Etcd, nil,
		"--name=minicluster",
		"--data-dir="+c.path("etcd"),
		"--listen-client-urls="+l.etcdURL, "--advertise-client-urls="+l.etcdURL,
		"--listen-peer-urls="+l.etcdPeerURL, "--initial-advertise-peer-urls="+l.etcdPeerURL,
		"--initial-cluster=minicluster="+l.etcdPeerURL, "--initial-cluster-state=new",
		"--auto-compaction-mode=periodic", "--auto-compaction-retention=1h",
		"--quota-backend-bytes=2147483648",
		// Test data is thrown away; skipping fsync makes every write cheap.
		"--unsafe-no-fsync=true",
		"--log-level=warn",
	)
	if err != nil {
		return err
	}
	return waitFor(ctx, "etcd /health", []*process{etcd}, func(ctx context.Context) error {
		return etcdHealthy(ctx, l.etcdURL+"/health")
	})
}

func (c *Cluster) startAPIServer(ctx context.Context, l *launch) error {
	_, err := c.start(l.bins, KubeAPIServer, nil,
		"--etcd-servers="+l.etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		// The endpoint reconciler refuses a loopback advertise address; no
		// pod really runs, so the kubernetes Service needs no endpoints.
		"--endpoint-reconciler-type=none",
		"--secure-port="+strconv.Itoa(l.apiPort),
		"--tls-cert-file="+l.files.APIServerCert, "--tls-private-key-file="+l.files.APIServerKey,
		"--client-ca-file="+l.files.CACert,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+l.files.SAPub,
		"--service-account-signing-key-file="+l.files.SAKey,
		"--service-cluster-ip-range=10.96.0.0/16",
		"--authorization-mode=Node,RBAC",
		"--allow-privileged=true",
		"--profiling=false",
	)
	if err != nil {
		return err
	}
	if err := waitFor(ctx, "kube-apiserver /readyz", c.processes(), func(ctx context.Context) error {
		return apiServerReady(ctx, l.clientset)
	}); err != nil {
		return err
	}
	// The node exists before kwok starts, so kwok takes it over at once.
	return ensureNode(ctx, l.clientset)
}

// startNodeComponents launches the clients of the API server that make
// workloads run; none waits for another.
func (c *Cluster) startNodeComponents(_ context.Context, l *launch) error {
	if _, err := c.start(l.bins, KubeControllerManager, nil,
		"--kubeconfig="+c.path(string(KubeControllerManager)+".kubeconfig"),
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(l.kcmPort),
		// A restart that keeps the data would otherwise wait for the lease
		// of the previous run to expire.
		"--leader-elect=false",
		"--controllers="+strings.Join(c.cfg.Controllers, ","),
		"--use-service-account-credentials=true",
		"--service-account-private-key-file="+l.files.SAKey,
		"--root-ca-file="+l.files.CACert,
		"--cluster-signing-cert-file="+l.files.CACert, "--cluster-signing-key-file="+l.files.CAKey,
		"--profiling=false",
	); err != nil {
		return err
	}
	if _, err := c.start(l.bins, KubeScheduler, nil,
		"--kubeconfig="+c.path(string(KubeScheduler)+".kubeconfig"),
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(l.schedulerPort),
		"--leader-elect=false",
		"--profiling=false",
	); err != nil {
		return err
	}
	kwokHome := c.path("kwok-home")
	if err := os.MkdirAll(kwokHome, 0o700); err != nil {
		return err
	}
	// kwok also loads ~/.kwok/kwok.yaml; a HOME of its own keeps a
	// developer's stages out of the cluster.
	_, err := c.start(l.bins, Kwok, []string{"HOME=" + kwokHome},
		"--kubeconfig="+c.path(string(Kwok)+".kubeconfig"),
		"--config="+c.path("kwok-stages.yaml"),
		"--manage-all-nodes=false",
		"--manage-nodes-with-label-selector="+kwokNodeLabel+"=fake",
		"--node-lease-duration-seconds=40",
		// Pods get loopback IPs (podcidr.go). kwok takes a pod's IP
		// from its node's spec.podCIDR when set, from here otherwise;
		// no node here sets one. The node IP, which hostNetwork pods
		// share, stays off loopback: nothing here dials a node.
		"--cidr="+c.podCIDR.String(),
		"--node-ip=10.240.0.1",
		// Without it kwok listens on every interface.
		"--server-address="+l.kwokAddr,
	)
	return err
}

// waitSchedulable waits until every component is healthy and a pod created
// now would be admitted and scheduled.
func (c *Cluster) waitSchedulable(ctx context.Context, l *launch) error {
	for _, ch := range []struct {
		what  string
		check func(context.Context) error
	}{
		{"kube-controller-manager /healthz", func(ctx context.Context) error {
			return httpOK(ctx, "https://"+loopback(l.kcmPort)+"/healthz")
		}},
		{"kube-scheduler /healthz", func(ctx context.Context) error {
			return httpOK(ctx, "https://"+loopback(l.schedulerPort)+"/healthz")
		}},
		{"kwok /healthz", func(ctx context.Context) error {
			return httpOK(ctx, "http://"+l.kwokAddr+"/healthz")
		}},
		{"node " + NodeName + " Ready and schedulable", func(ctx context.Context) error {
			return nodeSchedulable(ctx, l.clientset)
		}},
		// Admission rejects pods in a namespace until its default
		// ServiceAccount exists.
		{"ServiceAccount default/default", func(ctx context.Context) error {
			_, err := l.clientset.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
			return err
		}},
	} {
		if err := waitFor(ctx, ch.what, c.processes(), ch.check); err != nil {
			return err
		}
	}
	return nil
}

// prepareDataDir creates the data directory, or a temporary one, and locks
// it. The lock is an flock, so the kernel drops it when this process dies and
// a crashed run never blocks the next one.
func (c *Cluster) prepareDataDir() error {
	if c.cfg.DataDir == "" {
		dir, err := os.MkdirTemp("", "minicluster-")
		if err != nil {
			return err
		}
		c.dataDir, c.tempDir = dir, true
	} else {
		dir, err := filepath.Abs(c.cfg.DataDir)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
		c.dataDir = dir
	}
	if err := os.MkdirAll(c.path("logs"), 0o700); err != nil {
		return err
	}
	lock, err := os.OpenFile(c.path("minicluster.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = lock.Close()
		return fmt.Errorf("data directory %s is in use by another cluster: %w", c.dataDir, err)
	}
	c.lock = lock
	return nil
}

// start launches one component with its log in the data directory.
func (c *Cluster) start(bins map[Component]string, name Component, env []string, args ...string) (*process, error) {
	p, err := c.launcher.start(name, bins[name], args, childEnv(env...), c.LogPath(name))
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	return p, nil
}

// processes returns the components started so far.
func (c *Cluster) processes() []*process {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.procs)
}

func (c *Cluster) path(name string) string {
	return filepath.Join(c.dataDir, name)
}

// RESTConfig returns a new copy of the configuration that reaches the API
// server as a cluster administrator.
func (c *Cluster) RESTConfig() *rest.Config {
	return rest.CopyConfig(c.restConfig)
}

// KubeconfigPath is the administrator's kubeconfig, with its certificates
// embedded. It lives in the data directory.
func (c *Cluster) KubeconfigPath() string {
	return c.kubeconfig
}

// PodCIDR is the range kwok gives pod IPs from: a /16 inside 127.0.0.0/8
// that no other running cluster on this machine uses. Linux routes the
// whole of 127.0.0.0/8 to the loopback interface, so a test can listen on
// a pod's IP and port to play the pod's server, and whatever dials the pod
// reaches it. A start with a kept data directory takes a range that holds
// no IP of the pods it finds.
func (c *Cluster) PodCIDR() netip.Prefix {
	return c.podCIDR
}

// DataDir is the directory that holds the cluster's files.
func (c *Cluster) DataDir() string {
	return c.dataDir
}

// LogPath is the file that collects a component's output.
func (c *Cluster) LogPath(name Component) string {
	return filepath.Join(c.dataDir, "logs", string(name)+".log")
}

// PIDs returns the process id of each component that was started.
func (c *Cluster) PIDs() map[Component]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	pids := make(map[Component]int, len(c.procs))
	for _, p := range c.procs {
		pids[p.name] = p.cmd.Process.Pid
	}
	return pids
}

// Stop ends every component and waits until each has exited; later calls
// return the first call's result. The clients of the API server go first,
// then kube-apiserver, then etcd, so nothing logs errors about a missing
// server on the way down. With a temporary data directory the state is
// thrown away, so the components are killed at once and the directory is
// removed; otherwise each gets Config.StopTimeout to exit after SIGTERM.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() { c.stopErr = c.stop() })
	return c.stopErr
}

func (c *Cluster) stop() error {
	procs := c.processes()
	timeout := c.cfg.StopTimeout
	if c.tempDir {
		timeout = 0
	}
	byName := map[Component]*process{}
	for _, p := range procs {
		byName[p.name] = p
	}
	var errs []error
	var mu sync.Mutex
	for _, wave := range [][]Component{{Kwok, KubeScheduler, KubeControllerManager}, {KubeAPIServer}, {Etcd}} {
		var wg sync.WaitGroup
		for _, name := range wave {
			if p := byName[name]; p != nil {
				wg.Go(func() {
					if err := p.stop(timeout); err != nil {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
					}
				})
			}
		}
		wg.Wait()
	}
	c.launcher.close()
	// Released only now that kwok is gone and no pod gets an IP of it.
	if c.podCIDRLock != nil {
		errs = append(errs, c.podCIDRLock.Close())
	}
	if c.lock != nil {
		errs = append(errs, c.lock.Close())
	}
	if c.tempDir {
		errs = append(errs, os.RemoveAll(c.dataDir))
	}
	return errors.Join(errs...)
}
