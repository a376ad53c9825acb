// Command openmed-demo is `make run`: it shows the OpenMedModel lifecycle on a
// cluster, live.
//
// It starts a local control plane (pkg/minicluster: etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler and kwok) or, when $KUBECONFIG is
// set, uses that cluster; installs the kustomize/default bundle without the
// operator's own Deployment; runs the openmed-operator binary as a process of
// its own, authorized as the bundle's ServiceAccount; applies the examples (a
// Deployment shaped like the OpenMed Helm chart's and an OpenMedModel); and
// walks through the lifecycle: first rollout, upgrade, a version whose pods
// never become ready rolled back automatically, a manual rollback and its
// release. Every change of the model's phase, conditions, Argo CD health and
// Flux kstatus is printed as it happens, then a summary. The cluster then
// stays up until Ctrl-C; --once ends after the summary.
//
// Everything it starts is stopped on every way out: the end, an error, a
// panic, Ctrl-C or SIGTERM. Child processes sit in process groups of their
// own and get SIGKILL from the kernel if this program dies without cleaning
// up.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	var o options
	fs := flag.NewFlagSet("openmed-demo", flag.ExitOnError)
	o.bindFlags(fs)
	_ = fs.Parse(os.Args[1:])
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "openmed-demo: unexpected arguments %q\n", fs.Args())
		os.Exit(2)
	}

	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig := <-sigs
		fmt.Printf("\n%s received: stopping the operator and the cluster (send it again to exit at once)\n", sig)
		cancel(interrupted{sig.(syscall.Signal)})
		sig = <-sigs
		// Exiting ends the threads that started the children, so the
		// kernel kills them (parent-death signal); only a temporary data
		// directory may stay behind.
		os.Exit(128 + int(sig.(syscall.Signal)))
	}()

	err := run(ctx, o, os.Stdout)
	var intr interrupted
	switch {
	case errors.As(context.Cause(ctx), &intr) && (err == nil || errors.Is(err, context.Canceled)):
		if err != nil {
			// Interrupted before the end: report it the way a shell
			// reports a death by that signal.
			os.Exit(128 + int(intr.sig))
		}
	case err != nil:
		fmt.Fprintln(os.Stderr, "openmed-demo:", err)
		os.Exit(1)
	}
}

// interrupted is the cause of a context cancelled by a signal.
type interrupted struct{ sig syscall.Signal }

func (i interrupted) Error() string { return i.sig.String() }

// options are the command-line settings.
type options struct {
	once             bool
	local            bool
	kubeconfig       string
	dataDir          string
	operatorBinary   string
	examplesDir      string
	progressDeadline time.Duration
	upgradeVersion   string
	brokenVersion    string
	crashingVersion  string
	forgetfulVersion string
	crashAfter       time.Duration
	bake             time.Duration
	stageTimeout     time.Duration
}

func (o *options) bindFlags(fs *flag.FlagSet) {
	fs.BoolVar(&o.once, "once", false, "End after the summary instead of keeping the cluster up until Ctrl-C.")
	fs.BoolVar(&o.local, "local", false, "Start a local control plane even when $KUBECONFIG is set.")
	fs.StringVar(&o.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "Use the cluster of this kubeconfig instead of a local control plane (default $KUBECONFIG).")
	fs.StringVar(&o.dataDir, "data-dir", "", "Directory for the local control plane's state; empty means a temporary directory removed at exit.")
	fs.StringVar(&o.operatorBinary, "operator-binary", "", "A built openmed-operator binary; empty means build it now.")
	fs.StringVar(&o.examplesDir, "examples", "", "Directory holding target-deployment.yaml and openmedmodel.yaml (default: the module's examples/).")
	fs.DurationVar(&o.progressDeadline, "progress-deadline", 15*time.Second, "spec.rolloutStrategy.progressDeadlineSeconds for the demo (the example's 600s would make the never-ready stage last 10 minutes).")
	fs.StringVar(&o.upgradeVersion, "upgrade-version", "OpenMed/OpenMed-PII-SuperClinical-Small-44M-v2", "The model version of the upgrade stage.")
	fs.StringVar(&o.brokenVersion, "broken-version", "OpenMed/OpenMed-PII-SuperClinical-Small-44M-v3-broken", "The model version whose pods never become ready.")
	fs.StringVar(&o.crashingVersion, "crashing-version", "OpenMed/OpenMed-PII-SuperClinical-Small-44M-v4-crashes", "The model version whose pods restart after they became ready.")
	fs.DurationVar(&o.crashAfter, "crash-after", 5*time.Second, "How long after it became ready a pod of the crashing version restarts.")
	fs.StringVar(&o.forgetfulVersion, "forgetful-version", "OpenMed/OpenMed-PII-SuperClinical-Small-44M-forgets-names", "The model version of the forgets-names stage: on the local control plane its pods answer the golden request without the patient's name.")
	fs.DurationVar(&o.bake, "bake", 20*time.Second, "spec.rolloutStrategy.bakeSeconds of the crash-after-warm-up stage.")
	fs.DurationVar(&o.stageTimeout, "stage-timeout", 2*time.Minute, "How long one stage may take, on top of the progress deadline.")
}
