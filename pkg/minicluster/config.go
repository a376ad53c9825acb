package minicluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

const (
	// KubeDirEnv names the directory holding etcd, kube-apiserver,
	// kube-controller-manager and kube-scheduler. It is the variable envtest
	// reads, so one directory serves both.
	KubeDirEnv = "KUBEBUILDER_ASSETS"

	// KwokEnv names the kwok binary, or a directory that holds it.
	KwokEnv = "OPENMED_KWOK"

	// BuildTarget is the Makefile target that builds every binary Start needs.
	BuildTarget = "clusterbin"

	// NeverReadyAnnotation is the default pod annotation that keeps a pod
	// Running but not Ready.
	NeverReadyAnnotation = "minicluster.openmed.ai/never-ready"

	// CrashAfterReadyAnnotation is the default pod annotation that makes
	// kwok report a container restart of a pod after it became Ready.
	CrashAfterReadyAnnotation = "minicluster.openmed.ai/crash-after-ready"

	// RestartContainerAnnotation on a pod makes kwok restart the container
	// (or native sidecar) it names once, as a kubelet reports a restart:
	// the pod stays Running and Ready.
	RestartContainerAnnotation = "minicluster.openmed.ai/restart-container"
	// EvictAnnotation on a running pod makes kwok evict it as the kubelet
	// does under node pressure: phase Failed, reason Evicted, a
	// DisruptionTarget condition, its containers terminated.
	EvictAnnotation = "minicluster.openmed.ai/evict"
	// NodeLabel with the value "fake" makes kwok manage a node: it makes
	// it Ready, renews its Lease and runs its pods. A node created with it
	// joins the cluster; removing it from a node is a node that stops
	// heartbeating: once its Lease and status are older than
	// --node-monitor-grace-period (50 s) the node lifecycle controller
	// marks it Unknown and its pods not Ready and taints it unreachable,
	// and the taint eviction controller evicts its pods once their
	// toleration runs out.
	NodeLabel = kwokNodeLabel
	// NodeName is the name of the fake node kwok manages.
	NodeName = "kwok-node-0"
)

// Component names one process of the control plane.
type Component string

// The components, in the order Start launches them.
const (
	Etcd                  Component = "etcd"
	KubeAPIServer         Component = "kube-apiserver"
	KubeControllerManager Component = "kube-controller-manager"
	KubeScheduler         Component = "kube-scheduler"
	Kwok                  Component = "kwok"
)

// DefaultControllers are the kube-controller-manager controllers Start enables
// unless Config.Controllers says otherwise. The manager starts its informers
// only after it has set up every controller, each with its own
// service-account token, so a short list makes the cluster ready in about
// 4 s instead of 9 s on two cores.
var DefaultControllers = []string{
	"deployment-controller",
	"replicaset-controller",
	"garbage-collector-controller",
	"namespace-controller",
	"serviceaccount-controller",
	"serviceaccount-token-controller",
	// Removes the node.kubernetes.io/not-ready taint that admission puts on
	// every new node; without it no pod is ever scheduled.
	"node-lifecycle-controller",
	// Evicts the pods of a node tainted unreachable or not-ready once
	// their toleration (300 s by default) runs out.
	"taint-eviction-controller",
	"pod-garbage-collector-controller",
	"root-ca-certificate-publisher-controller",
	// Computes every ResourceQuota's usage: the API server's quota
	// admission refuses pods against it (a namespace GPU quota), and
	// rejects every pod of a namespace whose quota it has not computed.
	"resourcequota-controller",
	// Creates a pod's ResourceClaims from its ResourceClaimTemplates and
	// deletes them with the pod (Dynamic Resource Allocation).
	"resourceclaim-controller",
}

// Config says where the binaries are and how the cluster behaves. The zero
// value is usable: everything is taken from the environment and defaults.
type Config struct {
	// KubeDir holds etcd, kube-apiserver, kube-controller-manager and
	// kube-scheduler. Defaults to $KUBEBUILDER_ASSETS.
	KubeDir string

	// KwokBinary is the kwok binary, or a directory holding one named kwok.
	// Defaults to $OPENMED_KWOK.
	KwokBinary string

	// DataDir holds the PKI, kubeconfigs, component logs and etcd's data.
	// Empty means a new temporary directory, removed by Stop. A directory
	// given here is kept, so a later Start finds the objects of the last
	// run; only one cluster may use it at a time.
	DataDir string

	// Controllers is kube-controller-manager's --controllers list.
	// Defaults to DefaultControllers; []string{"*"} enables all the
	// controllers that are on by default.
	Controllers []string

	// NeverReady selects the pods that kwok makes Running but never Ready.
	// Its Annotation defaults to NeverReadyAnnotation.
	NeverReady NeverReady

	// CrashAfterReady selects the pods that kwok makes Ready and then
	// reports one container restart for. Its Annotation defaults to
	// CrashAfterReadyAnnotation.
	CrashAfterReady CrashAfterReady

	// StartTimeout bounds Start. Defaults to 90 s.
	StartTimeout time.Duration

	// StopTimeout is how long Stop waits for a component to exit after
	// SIGTERM before it sends SIGKILL, when DataDir is kept. A temporary
	// data directory is thrown away, so its components are killed at once.
	// Defaults to 10 s.
	StopTimeout time.Duration
}

// NeverReady selects pods by one annotation. kwok runs a selected pod with
// Ready=False and ContainersReady=False for good, as if its readiness probe
// kept failing; every other pod becomes Ready at once.
type NeverReady struct {
	// Annotation is the pod annotation key.
	Annotation string

	// Values lists the annotation values that select a pod. Empty means any
	// non-empty value does.
	Values []string
}

// CrashAfterReady selects pods by one annotation, like NeverReady. kwok
// makes a selected pod Ready, and After later reports that each of its
// containers terminated with Reason and was restarted (restartCount 1,
// lastState.terminated), as a kubelet does for a server that crashes under
// its first requests. The pod is Ready again at once and does not restart a
// second time.
type CrashAfterReady struct {
	// Annotation is the pod annotation key.
	Annotation string

	// Values lists the annotation values that select a pod. Empty means any
	// non-empty value does.
	Values []string

	// After is how long after it became Ready a pod restarts. Defaults to
	// 5 s; kwok counts in milliseconds.
	After time.Duration

	// Reason is the terminated container's reason: "Error" (the default,
	// exit code 1) or "OOMKilled" (exit code 137).
	Reason string
}

// withDefaults returns cfg with every unset field filled in and checked.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.KubeDir == "" {
		cfg.KubeDir = os.Getenv(KubeDirEnv)
	}
	if cfg.KwokBinary == "" {
		cfg.KwokBinary = os.Getenv(KwokEnv)
	}
	if len(cfg.Controllers) == 0 {
		cfg.Controllers = DefaultControllers
	}
	if cfg.NeverReady.Annotation == "" {
		cfg.NeverReady.Annotation = NeverReadyAnnotation
	}
	// The key ends up inside a jq expression in the kwok stages, so only a
	// valid annotation key may get there.
	if errs := validation.IsQualifiedName(cfg.NeverReady.Annotation); len(errs) > 0 {
		return cfg, fmt.Errorf("never-ready annotation key is invalid: %v", errs)
	}
	if cfg.CrashAfterReady.Annotation == "" {
		cfg.CrashAfterReady.Annotation = CrashAfterReadyAnnotation
	}
	if errs := validation.IsQualifiedName(cfg.CrashAfterReady.Annotation); len(errs) > 0 {
		return cfg, fmt.Errorf("crash-after-ready annotation key is invalid: %v", errs)
	}
	if cfg.CrashAfterReady.After <= 0 {
		cfg.CrashAfterReady.After = 5 * time.Second
	}
	switch cfg.CrashAfterReady.Reason {
	case "":
		cfg.CrashAfterReady.Reason = "Error"
	case "Error", "OOMKilled":
	default:
		return cfg, fmt.Errorf("crash-after-ready reason %q is neither Error nor OOMKilled", cfg.CrashAfterReady.Reason)
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = 90 * time.Second
	}
	if cfg.StopTimeout <= 0 {
		cfg.StopTimeout = 10 * time.Second
	}
	return cfg, nil
}

// binaries returns the path of every component's binary, checking that each
// exists and is executable.
func (cfg Config) binaries() (map[Component]string, error) {
	if cfg.KubeDir == "" {
		return nil, fmt.Errorf("no directory for the Kubernetes binaries: set Config.KubeDir or %s (run `make %s`)", KubeDirEnv, BuildTarget)
	}
	if cfg.KwokBinary == "" {
		return nil, fmt.Errorf("no kwok binary: set Config.KwokBinary or %s (run `make %s`)", KwokEnv, BuildTarget)
	}
	kwok := cfg.KwokBinary
	if fi, err := os.Stat(kwok); err == nil && fi.IsDir() {
		kwok = filepath.Join(kwok, string(Kwok))
	}
	bins := map[Component]string{Kwok: kwok}
	for _, c := range []Component{Etcd, KubeAPIServer, KubeControllerManager, KubeScheduler} {
		bins[c] = filepath.Join(cfg.KubeDir, string(c))
	}
	var errs []error
	for _, c := range components {
		if err := checkExecutable(bins[c]); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("%w (run `make %s`)", err, BuildTarget)
	}
	return bins, nil
}

// components lists every component in launch order.
var components = []Component{Etcd, KubeAPIServer, KubeControllerManager, KubeScheduler, Kwok}

// Binaries reports whether every binary Start needs can be found with cfg, and
// if not, why. Tests use it to skip when the binaries were not built.
func Binaries(cfg Config) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	_, err = cfg.binaries()
	return err
}

func checkExecutable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", path)
	}
	return nil
}
