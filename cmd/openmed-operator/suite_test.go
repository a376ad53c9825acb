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
	"github.com/openmed/openmed-operator/pkg/version"
)

// env is the real kube-apiserver and etcd the operator processes talk to.
// Nothing plays the Deployment controller: tests write Deployment status.
var env *testenv.Environment

// metricsReader scrapes the processes' /metrics as Prometheus does: with a
// token of a ServiceAccount bound to openmed-metrics-reader.
var metricsReader *localrun.Scraper

// binary is the openmed-operator executable, built once for the package so
// the tests run real processes (flags, signals, Leases, metrics ports),
// with the version and commit a release build sets (testVersion,
// testCommit).
var binary string

// The version and commit the binary is built with, through the linker
// symbols of pkg/version.
const (
	testVersion = "v9.8.7-test.1"
	testCommit  = "0123456789abcdef0123456789abcdef01234567"
)

// auditedUser is the one user whose requests the API server's audit log
// (auditLog) records, with their User-Agent: a test runs a process as this
// user (env.AddUser) to see what the API server received from it.
const auditedUser = "openmed-operator-audited"

// auditLog is the API server's audit log of auditedUser's requests.
var auditLog string

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
	build := exec.Command("go", "build", "-o", binary,
		"-ldflags=-X "+version.VersionVar+"="+testVersion+" -X "+version.CommitVar+"="+testCommit, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	// The toolchain running this test builds the binary, whatever the
	// installed go's GOTOOLCHAIN default is.
	build.Env = append(os.Environ(), "GOTOOLCHAIN="+runtime.Version())
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build openmed-operator:", err)
		return 1
	}

	auditLog = filepath.Join(dir, "audit.log")
	policy := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte("apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n"+
		"- level: Metadata\n  users: [\""+auditedUser+"\"]\n- level: None\n"), 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if env, err = testenv.StartWith(testenv.Options{APIServerFlags: map[string]string{
		"audit-log-path": auditLog, "audit-policy-file": policy, "audit-log-maxsize": "0",
	}}); err != nil {
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
