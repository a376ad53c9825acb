package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/openmed/openmed-operator/pkg/version"
)

// newVersionCommand is `kubectl openmed version`, as `flux version
// --client`: the plugin's own build, without reading a kubeconfig.
func newVersionCommand(r *root) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the plugin's version and commit",
		Long: "Print the plugin's version, the commit it was built from, the Go toolchain\n" +
			"and the platform (the same line as --version). It reads no kubeconfig.",
		Example: "  kubectl openmed version",
		Args:    cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintln(r.opts.Out, version.Get().String(FieldManager))
			return err
		},
	}
}
