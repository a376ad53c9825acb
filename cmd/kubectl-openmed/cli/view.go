package cli

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	"github.com/fluxcd/pkg/apis/meta"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/openmed/openmed-operator/health"
	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// none fills a cell or field that has no value, so columns never collapse.
const none = "-"

// views is an object as the two GitOps UIs show it.
type views struct {
	argo health.Result
	flux status.Result
}

// assess computes both views from the object as read, not from the Go type,
// because that is what Argo CD's Lua and Flux's kstatus read.
func assess(u *unstructured.Unstructured) views {
	v := views{argo: health.Assess(u)}
	res, err := status.Compute(u)
	if err != nil {
		// kstatus reports a malformed object as Unknown itself; the error
		// only says which field it could not read.
		v.flux = status.Result{Status: status.UnknownStatus, Message: "Status could not be read"}
		return v
	}
	v.flux = *res
	return v
}

// row is one line of `get`.
type row struct {
	namespace, name, family, desired, active, phase, ready, argo, flux, age string
}

// newRow is the `get` line of an object at now.
func newRow(u *unstructured.Unstructured, now time.Time) (row, error) {
	m, err := typed(u)
	if err != nil {
		return row{}, err
	}
	v := assess(u)
	return row{
		namespace: m.Namespace,
		name:      m.Name,
		family:    orNone(m.Spec.Family),
		desired:   orNone(m.Spec.Version),
		active:    orNone(m.Status.ActiveVersion),
		phase:     phaseCell(m, now),
		ready:     conditionStatus(m.Status.Conditions, v1alpha1.ReadyCondition),
		argo:      string(v.argo.Code),
		flux:      v.flux.Status.String(),
		age:       duration.HumanDuration(now.Sub(m.CreationTimestamp.Time)),
	}, nil
}

// heldBack is what the PHASE of `get` adds, by Ready reason, while a new
// pod of the rollout is held back: by the scheduler, the API server, a
// scheduling gate, or the operator's readiness gate until the pod answered
// the golden request (spec.verification).
var heldBack = map[string]string{
	v1alpha1.UnschedulableReason:      "a pod cannot be scheduled",
	v1alpha1.PodCreationRefusedReason: "pods are refused: see describe",
	v1alpha1.SchedulingGatedReason:    "a pod waits for admission",
	v1alpha1.VerifyingReason:          "verifying a pod",
}

// phaseCell is the PHASE of `get`: the phase, and the time left of a bake.
func phaseCell(m *v1alpha1.OpenMedModel, now time.Time) string {
	if _, left, ok := bakeLeft(m, now); ok {
		return fmt.Sprintf("%s (baking, %s left)", m.Status.Phase, duration.HumanDuration(left))
	}
	if c := apimeta.FindStatusCondition(m.Status.Conditions, v1alpha1.ReadyCondition); c != nil && c.Status == metav1.ConditionFalse &&
		heldBack[c.Reason] != "" {
		return fmt.Sprintf("%s (%s)", m.Status.Phase, heldBack[c.Reason])
	}
	return orNone(string(m.Status.Phase))
}

// bakeLeft is when the bake the status reports ends and how long that is
// from now; ok is false when the model is not baking.
func bakeLeft(m *v1alpha1.OpenMedModel, now time.Time) (end time.Time, left time.Duration, ok bool) {
	st := m.Status
	c := apimeta.FindStatusCondition(st.Conditions, v1alpha1.ReconcilingCondition)
	if st.BakeStartedAt == nil || m.Spec.RolloutStrategy.BakeSeconds == nil || c == nil || c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.BakingReason {
		return time.Time{}, 0, false
	}
	end = st.BakeStartedAt.Add(time.Duration(*m.Spec.RolloutStrategy.BakeSeconds) * time.Second)
	return end, max(0, end.Sub(now)), true
}

// printTable writes rows in kubectl's column layout; withNamespace adds the
// NAMESPACE column of `-A`.
func printTable(w io.Writer, rows []row, withNamespace bool) error {
	tw := newTabWriter(w)
	header := []string{"NAME", "FAMILY", "DESIRED", "ACTIVE", "PHASE", "READY", "ARGO CD", "FLUX", "AGE"}
	if withNamespace {
		header = append([]string{"NAMESPACE"}, header...)
	}
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		cells := []string{r.name, r.family, r.desired, r.active, r.phase, r.ready, r.argo, r.flux, r.age}
		if withNamespace {
			cells = append([]string{r.namespace}, cells...)
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

// newTabWriter has kubectl's table settings.
func newTabWriter(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 6, 4, 3, ' ', 0)
}

// describe writes the detail view of an object: what it wants, what serves,
// both health views, the rollback state, conditions and retained history.
// Times are absolute, except the time left of a bake, from now.
func describe(w io.Writer, u *unstructured.Unstructured, now time.Time) error {
	m, err := typed(u)
	if err != nil {
		return err
	}
	v := assess(u)
	st := m.Status
	tw := newTabWriter(w)
	field := func(indent int, name, value string) {
		fmt.Fprintf(tw, "%s%s:\t%s\n", strings.Repeat("  ", indent), name, value)
	}
	section := func(name string) { fmt.Fprintf(tw, "%s:\n", name) }

	field(0, "Name", m.Name)
	field(0, "Namespace", m.Namespace)
	field(0, "Family", orNone(m.Spec.Family))
	field(0, "Tier", orNone(string(m.Spec.Tier)))
	field(0, "Desired Version", orNone(m.Spec.Version))
	field(0, "Active Version", orNone(st.ActiveVersion))
	field(0, "Phase", orNone(string(st.Phase)))
	field(0, "Suspended", fmt.Sprint(m.Spec.Suspend))
	field(0, "Generation", fmt.Sprintf("%d (observed %d)", m.Generation, st.ObservedGeneration))
	field(0, "Target", orNone(st.TargetName))
	bake := none
	if b := m.Spec.RolloutStrategy.BakeSeconds; b != nil && *b > 0 {
		bake = fmt.Sprintf("%ds after a new version's rollout completes", *b)
		if end, left, ok := bakeLeft(m, now); ok {
			bake = fmt.Sprintf("baking %s since %s, until %s (%s left)", st.DesiredVersion, timestamp(*st.BakeStartedAt), timestamp(metav1.NewTime(end)), duration.HumanDuration(left))
		}
	}
	field(0, "Bake", bake)

	section("Health")
	field(1, "Argo CD", fmt.Sprintf("%s: %s", v.argo.Code, v.argo.Message))
	field(1, "Flux", fluxView(v.flux))

	section("Rollback")
	requested := none
	if version := m.Annotations[v1alpha1.RollbackToAnnotation]; version != "" {
		// A hold lasts until released; say how, as the status message does.
		requested = fmt.Sprintf("%s (release with: kubectl openmed release %s)", version, m.Name)
	}
	field(1, "Requested", requested)
	field(1, "In Effect", orNone(st.RollbackRequest))
	field(1, "Rollbacks Since Ready", fmt.Sprint(st.RollbackCount))
	failed := none
	if st.FailedSpecHash != "" {
		failed = fmt.Sprintf("%s (retry with: kubectl openmed retry %s)", shortHash(st.FailedSpecHash), m.Name)
	}
	field(1, "Failed Spec", failed)

	section("Reconcile Requests")
	field(1, "Requested At", orNone(m.Annotations[meta.ReconcileRequestAnnotation]))
	field(1, "Handled At", orNone(st.LastHandledReconcileAt))
	field(1, "Reset Requested At", orNone(m.Annotations[v1alpha1.ResetRequestAnnotation]))
	field(1, "Reset Handled At", orNone(st.LastHandledResetAt))
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprintln(w, "Conditions:")
	if len(st.Conditions) == 0 {
		fmt.Fprintln(w, "  <none>")
	} else {
		tw = newTabWriter(w)
		fmt.Fprintln(tw, "  TYPE\tSTATUS\tREASON\tMESSAGE\tLAST TRANSITION")
		for _, c := range st.Conditions {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", c.Type, c.Status, orNone(c.Reason), orNone(c.Message), timestamp(c.LastTransitionTime))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}

	fmt.Fprintln(w, "History:")
	if len(st.History) == 0 {
		fmt.Fprintln(w, "  <none>")
		return nil
	}
	tw = newTabWriter(w)
	fmt.Fprintln(tw, "  VERSION\tSPEC HASH\tREADY AT")
	for _, e := range st.History {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", e.Version, shortHash(e.SpecHash), timestamp(e.ReadyAt))
	}
	return tw.Flush()
}

// fluxView is the kstatus status with its message, as the Flux Operator UI
// shows it.
func fluxView(r status.Result) string {
	if r.Message == "" {
		return r.Status.String()
	}
	return fmt.Sprintf("%s: %s", r.Status, r.Message)
}

// conditionStatus is the status of the condition of type t, or "-".
func conditionStatus(conditions []metav1.Condition, t string) string {
	for _, c := range conditions {
		if c.Type == t {
			return string(c.Status)
		}
	}
	return none
}

// shortHash keeps the algorithm and 12 hex digits of a digest, enough to tell
// retained specs apart at a glance.
func shortHash(digest string) string {
	const keep = 12
	algorithm, hex, found := strings.Cut(digest, ":")
	if !found {
		algorithm, hex = "", digest
	}
	if len(hex) > keep {
		hex = hex[:keep]
	}
	if algorithm == "" {
		return hex
	}
	return algorithm + ":" + hex
}

// timestamp is t in RFC 3339 UTC, or "-" when unset.
func timestamp(t metav1.Time) string {
	if t.IsZero() {
		return none
	}
	return t.UTC().Format(time.RFC3339)
}

func orNone(s string) string {
	if s == "" {
		return none
	}
	return s
}
