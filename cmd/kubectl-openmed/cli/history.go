package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/rollout"
)

func newHistoryCommand(r *root) *cobra.Command {
	return &cobra.Command{
		Use:   "history NAME",
		Short: "List the retained versions, which one serves, and the rollbacks since the last Ready",
		Long: "List the versions the operator retains for rollback (status.history, newest\n" +
			"first, at most spec.revisionHistoryLimit), when each became Ready and which\n" +
			"one serves, with the rollback in effect and the rollbacks since the last Ready.",
		Example: "  kubectl openmed history clinical-ner",
		Args:    exactlyOneName,
		RunE: func(cmd *cobra.Command, args []string) error {
			_, u, err := r.connectAndGet(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			m, err := typed(u)
			if err != nil {
				return err
			}
			return printHistory(r.opts.Out, m)
		},
	}
}

// printHistory writes the retained versions of m. SERVING marks the entry
// whose spec the Deployment carries now: the active version's entry, or the
// rollback target while a rollback holds.
func printHistory(w io.Writer, m *v1alpha1.OpenMedModel) error {
	st := m.Status
	tw := newTabWriter(w)
	fmt.Fprintln(tw, "REVISION\tVERSION\tSPEC HASH\tREADY AT\tSERVING")
	serving := st.AppliedSpecHash
	if st.RollbackSpec != nil {
		serving = rollout.SpecHash(*st.RollbackSpec)
	}
	for i, e := range st.History {
		mark := ""
		if e.SpecHash == serving || (serving == "" && e.Version == st.ActiveVersion) {
			mark = "*"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", len(st.History)-i, e.Version, shortHash(e.SpecHash), timestamp(e.ReadyAt), mark)
	}
	if len(st.History) == 0 {
		fmt.Fprintln(tw, "<none>\t\t\t\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	desired := m.Spec.Version
	fmt.Fprintf(w, "\nDesired: %s   Active: %s   Phase: %s\n", orNone(desired), orNone(st.ActiveVersion), orNone(string(st.Phase)))
	var notes []string
	if st.RollbackRequest != "" {
		notes = append(notes, "rollback in effect: "+st.RollbackRequest)
	}
	notes = append(notes, fmt.Sprintf("rollbacks since the last Ready: %d", st.RollbackCount))
	if st.FailedSpecHash != "" {
		notes = append(notes, fmt.Sprintf("failed spec %s is held (retry with: kubectl openmed retry %s)", shortHash(st.FailedSpecHash), m.Name))
	}
	_, err := fmt.Fprintln(w, strings.Join(notes, "; "))
	return err
}
