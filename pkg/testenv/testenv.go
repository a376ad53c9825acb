// Package testenv starts a real kube-apiserver and etcd (controller-runtime's
// envtest) with the OpenMedModel CRD installed. The binaries are built from Go
// modules by `make testbin` into bin/ and found through KUBEBUILDER_ASSETS.
//
// Every process it starts dies with the test binary: they run under
// `setpriv --pdeathsig KILL`, so even a test that times out, panics or is
// killed leaves no API server or etcd behind.
package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/version"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// AssetsEnv names the directory holding kube-apiserver and etcd.
const AssetsEnv = "KUBEBUILDER_ASSETS"

// Environment is a running kube-apiserver and etcd with the CRDs installed.
type Environment struct {
	// Config reaches the API server as an administrator.
	Config *rest.Config
	// Scheme knows the built-in types and OpenMedModel.
	Scheme *k8sruntime.Scheme
	// Client is a direct (uncached) client for Config and Scheme.
	Client client.Client

	env     *envtest.Environment
	wrapDir string
	// calls runs functions on the goroutine that started the processes,
	// which stays locked to its OS thread until they are stopped.
	calls chan func()
}

// Options change how Start runs the control plane.
type Options struct {
	// APIServerFlags are extra kube-apiserver flags, name to value (for
	// example "audit-log-path").
	APIServerFlags map[string]string
}

// Start launches the control plane and installs the CRDs from the module's
// kustomize/crd/bases directory.
func Start() (*Environment, error) {
	return StartWith(Options{})
}

// StartWith is Start with options.
func StartWith(opts Options) (*Environment, error) {
	assets, err := assetsDir()
	if err != nil {
		return nil, err
	}
	wrapDir, err := wrapBinaries(assets, "kube-apiserver", "etcd")
	if err != nil {
		return nil, err
	}
	scheme := k8sruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: wrapDir,
		CRDDirectoryPaths:     []string{CRDDirectory()},
		ErrorIfCRDPathMissing: true,
		Scheme:                scheme,
	}
	// The launchers by path: envtest prefers $KUBEBUILDER_ASSETS (which
	// the Makefile exports) to BinaryAssetsDirectory, and would start the
	// bare binaries, which outlive a killed test.
	env.ControlPlane.GetAPIServer().Path = filepath.Join(wrapDir, "kube-apiserver")
	env.ControlPlane.Etcd = &envtest.Etcd{Path: filepath.Join(wrapDir, "etcd")}
	for name, value := range opts.APIServerFlags {
		env.ControlPlane.GetAPIServer().Configure().Set(name, value)
	}
	e := &Environment{Scheme: scheme, env: env, wrapDir: wrapDir, calls: make(chan func())}
	// The parent-death signal fires when the *thread* that forked a
	// process ends. envtest forks from the calling goroutine, so the
	// processes are started, and later stopped, from a goroutine locked to
	// its thread for their whole life: no other goroutine can lock that
	// thread and retire it early.
	go func() {
		runtime.LockOSThread() // never unlocked: the thread retires after Stop
		for call := range e.calls {
			call()
		}
	}()
	var cfg *rest.Config
	e.onThread(func() { cfg, err = env.Start() })
	if err != nil {
		close(e.calls)
		_ = os.RemoveAll(wrapDir)
		return nil, fmt.Errorf("start kube-apiserver and etcd from %s: %w", assets, err)
	}
	e.Config = cfg
	if e.Client, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		return nil, errors.Join(err, e.Stop())
	}
	return e, nil
}

// AddUser provisions a user the API server authenticates (with groups, for
// example system:masters) and returns a kubeconfig for it, so a process's
// requests can be told apart from the tests' in the audit log.
func (e *Environment) AddUser(name string, groups ...string) ([]byte, error) {
	u, err := e.env.ControlPlane.AddUser(envtest.User{Name: name, Groups: groups}, nil)
	if err != nil {
		return nil, err
	}
	return u.KubeConfig()
}

// onThread runs f on the goroutine that owns the processes.
func (e *Environment) onThread(f func()) {
	done := make(chan struct{})
	e.calls <- func() { f(); close(done) }
	<-done
}

// Stop stops the API server and etcd and removes their data.
func (e *Environment) Stop() error {
	var err error
	e.onThread(func() { err = e.env.Stop() })
	close(e.calls)
	return errors.Join(err, os.RemoveAll(e.wrapDir))
}

// Main is a TestMain body: it starts the environment, hands it to setup, runs
// the tests and always stops the environment before exiting.
func Main(m *testing.M, setup func(*Environment)) {
	env, err := Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testenv:", err)
		os.Exit(1)
	}
	code := func() int {
		defer func() {
			if err := env.Stop(); err != nil {
				fmt.Fprintln(os.Stderr, "testenv: stop:", err)
			}
		}()
		setup(env)
		return m.Run()
	}()
	os.Exit(code)
}

// GVR is the OpenMedModel resource.
var GVR = schema.GroupVersionResource{Group: v1alpha1.GroupVersion.Group, Version: v1alpha1.GroupVersion.Version, Resource: "openmedmodels"}

// ModuleRoot is the directory of this module's go.mod.
func ModuleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// CRDDirectory holds the generated CRDs.
func CRDDirectory() string {
	return filepath.Join(ModuleRoot(), "kustomize", "crd", "bases")
}

// assetsDir is $KUBEBUILDER_ASSETS or, for a plain `go test` after `make
// testbin`, the version directory under bin/k8s that newestKube picks.
func assetsDir() (string, error) {
	if dir := os.Getenv(AssetsEnv); dir != "" {
		return dir, nil
	}
	dirs, _ := filepath.Glob(filepath.Join(ModuleRoot(), "bin", "k8s", "*"))
	dir, err := newestKube(dirs)
	if err != nil {
		return "", fmt.Errorf("%s is not set and %w: run `make testbin` (or `make test`)", AssetsEnv, err)
	}
	return dir, nil
}

// newestKube picks, among the version directories under bin/k8s
// (<kube version>-etcd-<etcd version>), the one of the newest Kubernetes
// version: the one `make test` runs, when the oldest supported version
// (`make compatbin`) or the build of an earlier KUBE_VERSION sits beside
// it. Two builds of that version (with two etcd versions), or a name of
// another form, leave the choice to KUBEBUILDER_ASSETS.
func newestKube(dirs []string) (string, error) {
	var newest string
	var newestVersion *version.Version
	tie := false
	for _, dir := range dirs {
		kube, _, ok := strings.Cut(filepath.Base(dir), "-etcd-")
		v, err := version.ParseSemantic(kube)
		if !ok || err != nil {
			return "", fmt.Errorf("bin/k8s/%s is not named <kube version>-etcd-<etcd version>", filepath.Base(dir))
		}
		switch {
		case newestVersion == nil || v.GreaterThan(newestVersion):
			newest, newestVersion, tie = dir, v, false
		case v.EqualTo(newestVersion):
			tie = true
		}
	}
	switch {
	case newestVersion == nil:
		return "", errors.New("bin/k8s holds no build")
	case tie:
		return "", fmt.Errorf("bin/k8s holds several builds of Kubernetes %s", newestVersion)
	}
	return newest, nil
}

// wrapBinaries writes one launcher script per binary that execs it under
// `setpriv --pdeathsig KILL`, so the kernel kills it when the test process
// dies, whatever the reason.
func wrapBinaries(assets string, names ...string) (string, error) {
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		return "", fmt.Errorf("setpriv (util-linux) is needed to tie control-plane processes to the test: %w", err)
	}
	dir, err := os.MkdirTemp("", "openmed-testenv-")
	if err != nil {
		return "", err
	}
	for _, name := range names {
		bin := filepath.Join(assets, name)
		if _, err := os.Stat(bin); err != nil {
			_ = os.RemoveAll(dir)
			return "", fmt.Errorf("%s not found in %s: run `make testbin`: %w", name, assets, err)
		}
		script := fmt.Sprintf("#!/bin/sh\nexec %s --pdeathsig KILL -- %s \"$@\"\n", setpriv, bin)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
			_ = os.RemoveAll(dir)
			return "", err
		}
	}
	return dir, nil
}

// Eventually polls cond every 50ms until it holds, and fails the test when
// timeout passes first, with what and the last message cond returned.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for {
		ok, msg := cond()
		if ok {
			return
		}
		last = msg
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s; last: %s", timeout, what, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The environment variables through which the tests find what the Makefile
// builds into bin/, and the pattern of each under bin/.
var builtBinaries = []struct{ env, pattern string }{
	{AssetsEnv, "k8s/*"},
	{"OPENMED_KWOK", "kwok-*/kwok"},
	{"OPENMED_FLUX_DIR", "flux-*-kc-*"},
	{"OPENMED_FLUX_NOTIFICATION_DIR", "flux-*-kc-*/notification-controller-*"},
	{"OPENMED_ARGOCD_DIR", "argocd-*"},
}

// UseBuiltBinaries points every variable of the binaries the Makefile
// builds (KUBEBUILDER_ASSETS, OPENMED_KWOK, OPENMED_FLUX_DIR,
// OPENMED_FLUX_NOTIFICATION_DIR, OPENMED_ARGOCD_DIR) that is unset at the single build of it under the
// module's bin/ (for KUBEBUILDER_ASSETS, the newest Kubernetes version's:
// newestKube), so `go test` in a fresh shell runs what `make test` runs.
// A variable already set is kept; one with no build (or several) under bin/
// stays unset and the test that needs it fails saying which make target
// builds it.
func UseBuiltBinaries() {
	for _, b := range builtBinaries {
		if os.Getenv(b.env) != "" {
			continue
		}
		if b.env == AssetsEnv {
			if dir, err := assetsDir(); err == nil {
				_ = os.Setenv(b.env, dir)
			}
			continue
		}
		if found, _ := filepath.Glob(filepath.Join(ModuleRoot(), "bin", b.pattern)); len(found) == 1 {
			_ = os.Setenv(b.env, found[0])
		}
	}
}
