package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	"github.com/fluxcd/pkg/apis/meta"
	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// DefaultReconcileTimeout is how long `reconcile --wait` waits by default,
// as `flux reconcile`.
const DefaultReconcileTimeout = 5 * time.Minute

// reconcilePatch requests a reconcile with token as the value of
// reconcile.fluxcd.io/requestedAt.
func reconcilePatch(token string) []byte {
	return mergePatch{Metadata: &patchMetadata{
		Annotations: map[string]*string{meta.ReconcileRequestAnnotation: &token},
	}}.encode()
}

// outcome is what one read of the object says about a reconcile request.
type outcome int

const (
	// pending: the request is not handled yet, or the object is still
	// InProgress.
	pending outcome = iota
	// succeeded: handled, kstatus Current and Ready=True.
	succeeded
	// failed: handled and kstatus is neither Current nor InProgress, or it
	// is Current without Ready=True.
	failed
)

// judge reads one observation the way `flux reconcile` does: first the
// request must be handled, then kstatus decides, and a Current object must
// also be Ready. The message says why it failed.
func judge(u *unstructured.Unstructured, token string) (outcome, string, error) {
	m, err := typed(u)
	if err != nil {
		return failed, "", err
	}
	if !handled(u, token) {
		return pending, "", nil
	}
	res, err := status.Compute(u)
	if err != nil {
		return failed, "", fmt.Errorf("compute kstatus: %w", err)
	}
	switch res.Status {
	case status.InProgressStatus:
		return pending, "", nil
	case status.CurrentStatus:
	default:
		return failed, fmt.Sprintf("%s: %s", res.Status, res.Message), nil
	}
	for _, c := range m.Status.Conditions {
		if c.Type == v1alpha1.ReadyCondition {
			if c.Status == metav1.ConditionTrue {
				return succeeded, "", nil
			}
			return failed, c.Message, nil
		}
	}
	return failed, "no Ready condition", nil
}

// handled reports whether the operator handled the request token. A newer
// request than ours, once handled, covers ours too.
func handled(u *unstructured.Unstructured, token string) bool {
	last, _, _ := unstructured.NestedString(u.Object, "status", "lastHandledReconcileAt")
	return last != "" && (last == token || last == u.GetAnnotations()[meta.ReconcileRequestAnnotation])
}

func newReconcileCommand(r *root) *cobra.Command {
	var (
		waitFor bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "reconcile NAME",
		Short: "Ask the operator to reconcile now (reconcile.fluxcd.io/requestedAt)",
		Long: "Set reconcile.fluxcd.io/requestedAt to the current time. With --wait, wait\n" +
			"until the operator handled the request and report the result the way\n" +
			"`flux reconcile` does: kstatus Failed ends the wait at once, and success\n" +
			"needs Ready=True.",
		Args: exactlyOneName,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, name := cmd.Context(), args[0]
			t, u, err := r.connectAndGet(ctx, name)
			if err != nil {
				return err
			}
			m, err := typed(u)
			if err != nil {
				return err
			}
			// A suspended object would never handle the request.
			if m.Spec.Suspend {
				return fmt.Errorf("%s %s/%s is suspended: resume it first (kubectl openmed resume %s)", kind, t.namespace, name, name)
			}
			out := r.opts.Out
			token := r.opts.Now().Format(time.RFC3339Nano)
			fmt.Fprintf(out, "► annotating %s %s in %s namespace\n", kind, name, t.namespace)
			if _, err := t.patch(ctx, name, reconcilePatch(token)); err != nil {
				return err
			}
			fmt.Fprintf(out, "✔ %s annotated\n", kind)
			if !waitFor {
				return nil
			}

			fmt.Fprintf(out, "◎ waiting for %s reconciliation\n", kind)
			var (
				last    *unstructured.Unstructured
				result  outcome
				message string
			)
			err = wait.PollUntilContextTimeout(ctx, r.opts.PollInterval, timeout, true, func(context.Context) (bool, error) {
				// Reads use the command's context, not the poll's: the
				// client's rate limiter fails a read early when it
				// would end past the poll deadline, which would turn
				// a timeout into a confusing read error.
				u, err := t.get(ctx, name)
				if err != nil {
					return false, err
				}
				last = u
				result, message, err = judge(u, token)
				return result != pending, err
			})
			switch {
			case ctx.Err() != nil:
				return fmt.Errorf("stopped waiting for %s %s/%s: %w", kind, t.namespace, name, ctx.Err())
			case wait.Interrupted(err):
				return fmt.Errorf("timed out after %s waiting for %s %s/%s to %s", timeout, kind, t.namespace, name, waitingFor(last, token))
			case err != nil:
				return err
			case result == failed:
				return fmt.Errorf("%s %s/%s reconciliation failed: %s", kind, t.namespace, name, message)
			}
			fmt.Fprintf(out, "✔ %s reconciliation completed\n", kind)
			if m, err := typed(last); err == nil && m.Status.ActiveVersion != "" {
				fmt.Fprintf(out, "✔ serving version %s\n", m.Status.ActiveVersion)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&waitFor, "wait", false, "Wait until the operator handled the request and report the result")
	cmd.Flags().DurationVar(&timeout, "timeout", DefaultReconcileTimeout, "How long --wait waits")
	return cmd
}

// waitingFor says which step a timed-out wait was stuck at.
func waitingFor(u *unstructured.Unstructured, token string) string {
	if u == nil {
		return "be read"
	}
	if handled(u, token) {
		return "finish reconciling"
	}
	return "handle the request"
}
