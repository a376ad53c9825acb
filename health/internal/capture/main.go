// Command capture regenerates the health fixtures from a live cluster:
//
//	go run ./health/internal/capture
//
// It starts the local control plane (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, kwok; `make clusterbin` builds
// them), installs the bundle, runs the operator binary, drives OpenMedModels
// through every state the health corpus covers and writes each object as the
// API server returned it (managedFields included) into
// health/argocd/resource_customizations/openmed.ai/OpenMedModel/testdata and
// the action fixtures into its actions/testdata. It also writes
// health/testdata/ecosystem: pairs of a Deployment and its model at every
// state of the scale-ups, scale-downs, other managers' rollouts, pauses and
// failures the ecosystem property test judges.
//
// A few fixtures describe statuses the operator never writes (no status at
// all, an unknown phase, the Python (Kopf) operator's format, an invalid stored
// spec): they are derived from a capture by one stated change, and their
// header says which. With -derive it writes only those again, from the
// captured fixtures in the folder, without a cluster (a new derivation
// lands without recapturing every fixture). The expectations stay in
// health/testdata/corpus.yaml, written by hand; `go test ./health/...`
// checks every face against them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

func main() {
	out := flag.String("out", "", "the OpenMedModel resource-customization folder (default: the one in this module)")
	ecoOut := flag.String("ecosystem-out", "", "the folder of Deployment and model pairs (default: health/testdata/ecosystem in this module)")
	timeout := flag.Duration("timeout", 10*time.Minute, "give up after this long")
	deriveOnly := flag.Bool("derive", false, "write only the derived fixtures again, from the captured ones in the folder (no cluster)")
	flag.Parse()
	ctrllog.SetLogger(logr.Discard())

	dir := *out
	if dir == "" {
		dir = filepath.Join(moduleRoot(), "health", "argocd", "resource_customizations", "openmed.ai", "OpenMedModel")
	}
	if *deriveOnly {
		n, err := rederive(dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, "capture:", err)
			os.Exit(1)
		}
		fmt.Printf("wrote %d derived fixtures to %s\n", n, dir)
		return
	}
	ecoDir := *ecoOut
	if ecoDir == "" {
		ecoDir = filepath.Join(moduleRoot(), "health", "testdata", "ecosystem")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	start := time.Now()
	n, err := run(ctx, dir, ecoDir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "capture:", err)
		if errors.Is(err, context.DeadlineExceeded) {
			fmt.Fprintln(os.Stderr, "capture: timed out; see the operator log above")
		}
		os.Exit(1)
	}
	fmt.Printf("wrote %d fixtures to %s in %s\n", n, dir, time.Since(start).Round(time.Second))
}
