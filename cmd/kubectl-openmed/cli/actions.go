package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	"github.com/spf13/cobra"
	"k8s.io/client-go/util/retry"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// retryTokenLayout is the token of the retry action: the Lua action writes
// os.date("!%Y-%m-%dT%H:%M:%SZ"), RFC 3339 in UTC to the second.
const retryTokenLayout = "2006-01-02T15:04:05Z"

// mergePatch is the JSON merge patch of an action: only the fields it means
// to change. A nil annotation value removes the annotation.
type mergePatch struct {
	Metadata *patchMetadata `json:"metadata,omitempty"`
	Spec     *patchSpec     `json:"spec,omitempty"`
}

type patchMetadata struct {
	// ResourceVersion, when set, makes the patch conditional: the API server
	// rejects it with a conflict if the object changed since it was read.
	ResourceVersion string             `json:"resourceVersion,omitempty"`
	Annotations     map[string]*string `json:"annotations,omitempty"`
}

type patchSpec struct {
	Suspend *bool `json:"suspend,omitempty"`
}

func (p mergePatch) encode() []byte {
	data, err := json.Marshal(p)
	if err != nil {
		// Only strings, bools and maps of them: encoding cannot fail.
		panic(fmt.Sprintf("encode merge patch: %v", err))
	}
	return data
}

// retainedVersions are the versions a manual rollback may name, newest first,
// as the operator resolves them: status.history or, for a status in the
// Python (Kopf) operator's format, lastSuccessfulSpec then previousSuccessfulSpec;
// at most spec.revisionHistoryLimit of them.
func retainedVersions(m *v1alpha1.OpenMedModel) []string {
	st := m.Status
	var versions []string
	switch {
	case len(st.History) > 0:
		for _, e := range st.History {
			versions = append(versions, e.Version)
		}
	case st.LastSuccessfulSpec != nil:
		versions = append(versions, st.LastSuccessfulSpec.Version)
		if p := st.PreviousSuccessfulSpec; p != nil && p.Version != st.LastSuccessfulSpec.Version {
			versions = append(versions, p.Version)
		}
	}
	limit := int(v1alpha1.DefaultRevisionHistoryLimit)
	if l := m.Spec.RevisionHistoryLimit; l != nil {
		limit = int(*l)
	}
	if len(versions) > limit {
		versions = versions[:limit]
	}
	return versions
}

// errNothingToRollBackTo is returned when no retained version differs from
// the desired one, the case in which Argo CD disables its rollback action.
var errNothingToRollBackTo = errors.New("no retained version other than the desired one: nothing to roll back to")

// rollbackPatch sets openmed.ai/rollback-to. An empty version picks what the
// Argo CD rollback action picks: the newest retained version other than
// spec.version. A named version must be retained; the operator would reject
// anything else. The patch is conditional on the resourceVersion the choice
// was made from.
func rollbackPatch(m *v1alpha1.OpenMedModel, version string) ([]byte, string, error) {
	retained := retainedVersions(m)
	// The operator trims the annotation; so does the check.
	version = strings.TrimSpace(version)
	if version == "" {
		i := slices.IndexFunc(retained, func(v string) bool { return v != m.Spec.Version })
		if i < 0 {
			return nil, "", errNothingToRollBackTo
		}
		version = retained[i]
	} else if !slices.Contains(retained, version) {
		return nil, "", fmt.Errorf("version %q is not retained in status.history (retained: %s)", version, listOrNone(retained))
	}
	p := mergePatch{Metadata: &patchMetadata{
		ResourceVersion: m.ResourceVersion,
		Annotations:     map[string]*string{v1alpha1.RollbackToAnnotation: &version},
	}}
	return p.encode(), version, nil
}

// releasePatch removes openmed.ai/rollback-to.
func releasePatch() []byte {
	return mergePatch{Metadata: &patchMetadata{
		Annotations: map[string]*string{v1alpha1.RollbackToAnnotation: nil},
	}}.encode()
}

// retryPatch is the Argo CD retry action: resetAt and requestedAt set to one
// token, so the operator clears the failed-spec block and reconciles at once,
// and the rollback hold removed, since it would keep the desired spec from
// being tried.
func retryPatch(now time.Time) ([]byte, string) {
	token := now.UTC().Format(retryTokenLayout)
	return mergePatch{Metadata: &patchMetadata{Annotations: map[string]*string{
		meta.ReconcileRequestAnnotation: &token,
		v1alpha1.ResetRequestAnnotation: &token,
		v1alpha1.RollbackToAnnotation:   nil,
	}}}.encode(), token
}

// suspendPatch sets spec.suspend, as the suspend and resume actions do.
func suspendPatch(suspend bool) []byte {
	return mergePatch{Spec: &patchSpec{Suspend: &suspend}}.encode()
}

func listOrNone(versions []string) string {
	if len(versions) == 0 {
		return "none"
	}
	return strings.Join(versions, ", ")
}

func newRollbackCommand(r *root) *cobra.Command {
	return &cobra.Command{
		Use:   "rollback NAME [VERSION]",
		Short: "Roll back to a retained version (default: the newest one other than the desired version)",
		Long: "Set openmed.ai/rollback-to. The operator restores that retained spec and holds\n" +
			"it while the annotation is set; `kubectl openmed release` removes it. VERSION\n" +
			"must be retained in status.history; without it the newest retained version\n" +
			"other than spec.version is chosen, as the Argo CD rollback action does.",
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := r.connect()
			if err != nil {
				return err
			}
			requested := ""
			if len(args) == 2 {
				requested = args[1]
				if strings.TrimSpace(requested) == "" {
					return errors.New("VERSION must not be empty")
				}
			}
			var (
				chosen    string
				suspended bool
			)
			// The choice is made from the status just read; if the object
			// changes before the write, choose again from the new one.
			err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
				u, err := t.get(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				m, err := typed(u)
				if err != nil {
					return err
				}
				patch, version, err := rollbackPatch(m, requested)
				if err != nil {
					return fmt.Errorf("%s %s/%s: %w", kind, t.namespace, args[0], err)
				}
				chosen, suspended = version, m.Spec.Suspend
				_, err = t.patch(cmd.Context(), args[0], patch)
				return err
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(r.opts.Out, "%s/%s rollback to %q requested\n", qualifiedResource, args[0], chosen)
			if suspended {
				fmt.Fprintf(r.opts.ErrOut, "Warning: %s %s/%s is suspended; the operator acts on the request once it is resumed\n", kind, t.namespace, args[0])
			}
			return nil
		},
	}
}

func newReleaseCommand(r *root) *cobra.Command {
	return &cobra.Command{
		Use:   "release NAME",
		Short: "Release a manual rollback hold (remove openmed.ai/rollback-to)",
		Args:  exactlyOneName,
		RunE: func(cmd *cobra.Command, args []string) error {
			t, u, err := r.connectAndGet(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if _, held := u.GetAnnotations()[v1alpha1.RollbackToAnnotation]; !held {
				fmt.Fprintf(r.opts.Out, "%s/%s has no rollback hold\n", qualifiedResource, args[0])
				return nil
			}
			if _, err := t.patch(cmd.Context(), args[0], releasePatch()); err != nil {
				return err
			}
			fmt.Fprintf(r.opts.Out, "%s/%s rollback hold released\n", qualifiedResource, args[0])
			return nil
		},
	}
}

func newRetryCommand(r *root) *cobra.Command {
	return &cobra.Command{
		Use:   "retry NAME",
		Short: "Try the failed desired spec again without editing it (the Argo CD retry action)",
		Long: "Set reconcile.fluxcd.io/resetAt and reconcile.fluxcd.io/requestedAt to one\n" +
			"timestamp and remove openmed.ai/rollback-to, exactly as the Argo CD retry\n" +
			"action does.",
		Args: exactlyOneName,
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := r.connect()
			if err != nil {
				return err
			}
			patch, token := retryPatch(r.opts.Now())
			if _, err := t.patch(cmd.Context(), args[0], patch); err != nil {
				return err
			}
			fmt.Fprintf(r.opts.Out, "%s/%s retry requested at %s\n", qualifiedResource, args[0], token)
			return nil
		},
	}
}

// newSuspendCommand returns `suspend` (suspend true) or `resume`.
func newSuspendCommand(r *root, suspend bool) *cobra.Command {
	use, short, done := "resume NAME", "Let the operator reconcile again (spec.suspend=false)", "resumed"
	if suspend {
		use, short, done = "suspend NAME", "Stop the operator from changing anything (spec.suspend=true)", "suspended"
	}
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  exactlyOneName,
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := r.connect()
			if err != nil {
				return err
			}
			if _, err := t.patch(cmd.Context(), args[0], suspendPatch(suspend)); err != nil {
				return err
			}
			fmt.Fprintf(r.opts.Out, "%s/%s %s\n", qualifiedResource, args[0], done)
			return nil
		},
	}
}
