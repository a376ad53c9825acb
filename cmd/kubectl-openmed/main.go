// Command kubectl-openmed is the kubectl plugin for OpenMedModels. Installed
// on the PATH it runs as `kubectl openmed`; see `kubectl openmed --help` and
// package cli.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/openmed/openmed-operator/cmd/kubectl-openmed/cli"
)

func main() {
	// Ctrl-C ends a `reconcile --wait` cleanly instead of killing a request
	// half way.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := cli.Run(ctx, os.Args[1:], cli.Options{Out: os.Stdout, ErrOut: os.Stderr})
	stop()
	var exit *cli.ExitError
	switch {
	case errors.As(err, &exit):
		os.Exit(exit.Code)
	case err != nil:
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
