package cli_test

import (
	"context"
	"fmt"
	"os"

	"github.com/openmed/openmed-operator/cmd/kubectl-openmed/cli"
)

// ExampleRun embeds the plugin: here it rolls clinical-ner in namespace
// models back to the newest retained version other than the desired one,
// with the cluster and credentials of a kubeconfig context. It needs a
// cluster, so it is compiled but not run.
func ExampleRun() {
	err := cli.Run(context.Background(),
		[]string{"--kubeconfig", "/path/to/kubeconfig", "--context", "prod", "-n", "models", "rollback", "clinical-ner"},
		cli.Options{Out: os.Stdout, ErrOut: os.Stderr})
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
	}
}
