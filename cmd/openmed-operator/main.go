// Command openmed-operator runs the OpenMedModel reconciler in a
// controller-runtime manager. Flags follow Flux controllers; see
// `openmed-operator --help` and the package app. `openmed-operator
// --version` prints the version and commit (package pkg/version) and exits.
package main

import (
	"fmt"
	"os"
	"runtime/debug"

	"github.com/fluxcd/pkg/runtime/logger"
	"github.com/spf13/pflag"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/openmed/openmed-operator/cmd/openmed-operator/app"
	"github.com/openmed/openmed-operator/controllers"
	"github.com/openmed/openmed-operator/pkg/version"
)

// defaultGCPercent is the garbage collector's target when GOGC is not set:
// the heap may grow to 1.3 times what is live instead of Go's 2 times. The
// live heap is mostly the informer caches, which grow with the number of
// models, and an operator sits idle most of the time, so memory is worth
// more here than the collector's CPU; but at 20 % the collector's marking
// was half of the operator's CPU in a wave of 10,000 models, and 30 % cuts
// its cycles by a third for about 5 % of the resident set (see
// docs/scale.md).
const defaultGCPercent = 30

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
	var opts app.Options
	fs := pflag.NewFlagSet("openmed-operator", pflag.ExitOnError)
	opts.BindFlags(fs)
	showVersion := fs.Bool("version", false, "Print the version, commit, Go version and platform, and exit.")
	// ExitOnError: a bad flag prints usage and exits 2.
	_ = fs.Parse(os.Args[1:])
	if *showVersion {
		fmt.Println(version.Get().String(controllers.ControllerName))
		return
	}

	// Values a pass adds to its logger are encoded only if it logs a line
	// (controllers.LazyValues).
	logger.SetLogger(controllers.LazyValues(logger.NewLogger(opts.Logger)))
	// The first SIGTERM or SIGINT cancels the context for a graceful
	// shutdown; a second one exits at once.
	ctx := ctrl.SetupSignalHandler()
	if err := app.Run(ctx, opts); err != nil {
		ctrl.Log.Error(err, "operator failed")
		fmt.Fprintln(os.Stderr, "openmed-operator:", err)
		os.Exit(1)
	}
}
