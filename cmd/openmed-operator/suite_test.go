package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/openmed/openmed-operator/pkg/localrun"
	"github.com/openmed/openmed-operator/pkg/testenv"
)

// env is the real kube-apiserver and etcd the operator processes talk to.
// Nothing plays the Deployment controller: tests write Deployment status.
var env *testenv.Environment

// metricsReader scrapes the processes' /metrics as Prometheus does: with a
// token of a ServiceAccount bound to openmed-metrics-reader.
var metricsReader *localrun.Scraper

// binary is the openmed-operator executable, built once for the package so
// the tests run real processes (flags, signals, Leases, metrics ports).
var binary string

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "openmed-operator-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binary = filepath.Join(dir, "openmed-operator")
	build := exec.Command("go", "build", "-o", binary, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	// The toolchain running this test builds the binary, whatever the
	// installed go's GOTOOLCHAIN default is.
	build.Env = append(os.Environ(), "GOTOOLCHAIN="+runtime.Version())
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build openmed-operator:", err)
		return 1
	}

	if env, err = testenv.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "testenv:", err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "testenv: stop:", err)
		}
	}()
	if metricsReader, err = localrun.ServiceAccountScraper(context.Background(), env.Client, "default", "metrics-reader", localrun.MetricsReaderRole); err != nil {
		fmt.Fprintln(os.Stderr, "metrics reader:", err)
		return 1
	}
	return m.Run()
}
