package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/go-logr/logr"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/openmed/openmed-operator/kustomize"
	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/localrun"
	"github.com/openmed/openmed-operator/pkg/minicluster"
	"github.com/openmed/openmed-operator/pkg/testenv"
)

// brokenVersion is the model version whose pods kwok keeps Running but never
// Ready on the suite's cluster.
const brokenVersion = "OpenMed/OpenMed-PII-SuperClinical-Small-44M-never-ready"

// crashingVersion is the model version whose pods kwok restarts crashAfter
// after they became Ready.
const (
	crashingVersion = "OpenMed/OpenMed-PII-SuperClinical-Small-44M-crashes"
	crashAfter      = 5 * time.Second
)

// operatorLabel on an OpenMedModel hands it to an operator a test starts for
// itself (--watch-label-selector); the shared operator takes the models
// without it. A test can so kill or stop its operator without touching the
// others, which run in parallel.
const operatorLabel = "e2e.openmed.ai/operator"

var (
	cluster *minicluster.Cluster
	k8s     client.WithWatch
	// operatorBinary and demoBinary are built once for the package.
	operatorBinary, demoBinary string
	// operatorKubeconfig acts as the bundle's ServiceAccount, which lives in
	// bundleNamespace (with its leader-election Role).
	operatorKubeconfig string
	bundleNamespace    string
	workDir            string
	// shared is the operator for models without operatorLabel.
	shared *localrun.Operator
	// metricsScraper reads the operators' metrics endpoints as Prometheus
	// does: with a token of a ServiceAccount bound to
	// openmed-metrics-reader.
	metricsScraper *localrun.Scraper
)

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) (code int) {
	// A fresh shell has none of the Makefile's variables: the binaries
	// are found under bin/, or the suite fails saying how to build them
	// (it never passes with everything skipped).
	testenv.UseBuiltBinaries()
	if err := minicluster.Binaries(minicluster.Config{}); err != nil {
		fmt.Fprintf(os.Stderr, "control-plane binaries missing, run `make %s` (or `make test`): %v\n", minicluster.BuildTarget, err)
		return 1
	}
	var err error
	if workDir, err = os.MkdirTemp("", "openmed-e2e-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(workDir)
	if err := setUp(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e set-up:", err)
		code = 1
	} else {
		code = m.Run()
	}

	// Tear down, then prove nothing is left: every component and the
	// shared operator must be gone once Stop has returned.
	var pids []int
	if shared != nil {
		pids = append(pids, shared.PID())
		if err := shared.Stop(10 * time.Second); err != nil {
			fmt.Fprintln(os.Stderr, "stop the shared operator:", err)
			code = 1
		}
	}
	if cluster != nil {
		for _, pid := range cluster.PIDs() {
			pids = append(pids, pid)
		}
		if err := cluster.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stop the cluster:", err)
			code = 1
		}
	}
	for _, pid := range pids {
		if alive(pid) {
			fmt.Fprintf(os.Stderr, "process %d (%s) still runs after the suite stopped it\n", pid, cmdName(pid))
			code = 1
		}
	}
	return code
}

// setUp builds the binaries, starts the cluster, installs the bundle and the
// shared operator.
func setUp() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "go", "build", "-o", workDir+string(filepath.Separator),
		localrun.OperatorPackage, "github.com/openmed/openmed-operator/cmd/openmed-demo")
	build.Dir = localrun.ModuleRoot()
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	// The toolchain running the tests builds the binaries.
	build.Env = append(os.Environ(), "GOTOOLCHAIN="+runtime.Version())
	if err := build.Run(); err != nil {
		return fmt.Errorf("build the binaries: %w", err)
	}
	operatorBinary = filepath.Join(workDir, "openmed-operator")
	demoBinary = filepath.Join(workDir, "openmed-demo")

	var err error
	if cluster, err = startControlPlane(ctx); err != nil {
		return err
	}
	if k8s, err = newClient(cluster.RESTConfig()); err != nil {
		return err
	}
	bundle, err := localrun.InstallBundle(ctx, k8s, filepath.Join(kustomize.Dir(), kustomize.DefaultOverlay))
	if err != nil {
		return err
	}
	bundleNamespace = bundle.ServiceAccount.Namespace
	operatorKubeconfig = filepath.Join(workDir, "operator.kubeconfig")
	if err := localrun.WriteImpersonatingKubeconfig(cluster.KubeconfigPath(), operatorKubeconfig, bundle.ServiceAccount.Namespace, bundle.ServiceAccount.Name); err != nil {
		return err
	}
	if metricsScraper, err = localrun.ServiceAccountScraper(ctx, k8s, "default", "prometheus", localrun.MetricsReaderRole); err != nil {
		return err
	}
	// The shared operator serves the bundle's admission webhook for the
	// whole cluster; the operators tests start for themselves do not.
	shared, err = startOperator(ctx, "shared", "!"+operatorLabel, bundleNamespace)
	return err
}

// startControlPlane starts a local control plane whose kwok keeps the
// pods of brokenVersion never Ready and restarts those of crashingVersion,
// and of the versions crashing names, crashAfter after they became Ready.
func startControlPlane(ctx context.Context, crashing ...string) (*minicluster.Cluster, error) {
	model, err := exampleModel()
	if err != nil {
		return nil, err
	}
	brokenHash, err := localrun.ManifestHashOf(model, brokenVersion)
	if err != nil {
		return nil, err
	}
	var crashingHashes []string
	for _, v := range append([]string{crashingVersion}, crashing...) {
		h, err := localrun.ManifestHashOf(model, v)
		if err != nil {
			return nil, err
		}
		crashingHashes = append(crashingHashes, h)
	}
	return minicluster.Start(ctx, minicluster.Config{
		NeverReady:      minicluster.NeverReady{Annotation: v1alpha1.ManifestHashAnnotation, Values: []string{brokenHash}},
		CrashAfterReady: minicluster.CrashAfterReady{Annotation: v1alpha1.ManifestHashAnnotation, Values: crashingHashes, After: crashAfter},
	})
}

// newClient is a client of the cluster cfg reaches, with the suite's
// types. The tests poll many objects in parallel; client-go's default 5
// QPS would make them observe late, not the operator act late.
func newClient(cfg *rest.Config) (client.WithWatch, error) {
	scheme := k8sruntime.NewScheme()
	for _, add := range []func(*k8sruntime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	cfg.QPS, cfg.Burst = 100, 200
	return client.NewWithWatch(cfg, client.Options{Scheme: scheme})
}

// launchOperator starts an operator for the models matching selector and
// waits until it is ready.
func launchOperator(ctx context.Context, name, selector string, args ...string) (*localrun.Operator, error) {
	return startOperator(ctx, name, selector, "", args...)
}

// startOperator is launchOperator; with a webhookNamespace the operator
// also serves the admission webhook (localrun.OperatorConfig.WebhookNamespace).
func startOperator(ctx context.Context, name, selector, webhookNamespace string, args ...string) (*localrun.Operator, error) {
	op, err := localrun.StartOperator(localrun.OperatorConfig{
		Binary:           operatorBinary,
		Kubeconfig:       operatorKubeconfig,
		LogPath:          filepath.Join(workDir, "operator-"+name+".log"),
		Args:             append([]string{"--log-encoding=console", "--watch-label-selector=" + selector}, args...),
		Scraper:          metricsScraper,
		WebhookNamespace: webhookNamespace,
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := op.WaitReady(ctx); err != nil {
		return nil, errors.Join(err, op.Kill())
	}
	return op, nil
}

// requireCluster marks a test that needs the suite's cluster (TestMain
// fails the package when it cannot start one).
func requireCluster(t *testing.T) {
	t.Helper()
	if cluster == nil {
		t.Fatal("the suite has no cluster")
	}
}

// exampleModel is examples/openmedmodel.yaml.
func exampleModel() (*v1alpha1.OpenMedModel, error) {
	return localrun.ReadModel(filepath.Join(localrun.ExamplesDir(), localrun.ModelExample))
}
