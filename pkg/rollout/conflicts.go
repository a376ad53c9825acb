package rollout

import (
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// An ownership conflict is ConflictThreshold corrections of one field for
// one other field manager, each within CorrectionWindow of the one before.
// It clears CorrectionWindow after the last correction, or at once with a
// reconcile.fluxcd.io/resetAt request.
const (
	CorrectionWindow  = time.Hour
	ConflictThreshold = 3
	maxCorrections    = 20
)

// countCorrection records one correction of x in status.corrections, one
// entry per field and manager, and notes a conflict that starts with it.
func (d *decider) countCorrection(x Drift) {
	managers := x.Managers
	if len(managers) == 0 {
		managers = []string{""}
	}
	for _, m := range managers {
		i := d.correctionIndex(x.Field, m)
		if i < 0 {
			d.st.Corrections = append(d.st.Corrections, v1alpha1.FieldCorrection{
				Field: x.Field, Manager: m, FirstCorrectedAt: d.now,
			})
			i = len(d.st.Corrections) - 1
		}
		c := &d.st.Corrections[i]
		c.Count++
		c.LastCorrectedAt = d.now
		if c.Count == ConflictThreshold && m != "" {
			d.plan.Conflicts = append(d.plan.Conflicts, *c)
		}
	}
	if n := len(d.st.Corrections); n > maxCorrections {
		sort.SliceStable(d.st.Corrections, func(i, j int) bool {
			return d.st.Corrections[j].LastCorrectedAt.Before(&d.st.Corrections[i].LastCorrectedAt)
		})
		d.st.Corrections = d.st.Corrections[:maxCorrections]
	}
}

func (d *decider) correctionIndex(field, manager string) int {
	for i, c := range d.st.Corrections {
		if c.Field == field && c.Manager == manager {
			return i
		}
	}
	return -1
}

// expireCorrections drops the corrections whose last one is older than the
// window.
func (d *decider) expireCorrections() {
	var kept []v1alpha1.FieldCorrection
	for _, c := range d.st.Corrections {
		if d.now.Sub(c.LastCorrectedAt.Time) < CorrectionWindow {
			kept = append(kept, c)
		}
	}
	d.st.Corrections = kept
}

// conflicts are the corrections that make an ownership conflict, oldest
// first.
func (d *decider) conflicts() []v1alpha1.FieldCorrection {
	var out []v1alpha1.FieldCorrection
	for _, c := range d.st.Corrections {
		if c.Count >= ConflictThreshold && c.Manager != "" {
			out = append(out, c)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].FirstCorrectedAt.Before(&out[j].FirstCorrectedAt) })
	return out
}

// overlayConflicts reports an ownership conflict on top of the pass's
// verdict: the OwnershipConflict condition names the field, the manager and
// the fix; a resource that would be Ready is not (Stalled: a person has to
// change where the other manager's value comes from). The operator keeps
// correcting the field meanwhile. A timed pass clears the conflict when the
// window passes without another correction.
func (d *decider) overlayConflicts() {
	active := d.conflicts()
	if len(active) == 0 {
		removeCondition(&d.st.Conditions, v1alpha1.OwnershipConflictCondition)
		if conditionIs(d.st, v1alpha1.ReadyCondition, metav1.ConditionFalse, v1alpha1.OwnershipConflictReason) {
			// A pass that kept the status as it was kept the overlay of a
			// conflict that has ended: the verdict under it was Ready.
			d.conditions(readyTuple, settled)
		}
		return
	}
	msg := ConflictMessage(active[0].Field, active[0].Manager)
	set := func(typ string, c cond) {
		meta.SetStatusCondition(&d.st.Conditions, metav1.Condition{
			Type: typ, Status: c.status, Reason: c.reason, Message: c.message,
			ObservedGeneration: d.gen, LastTransitionTime: d.now,
		})
	}
	set(v1alpha1.OwnershipConflictCondition, t(v1alpha1.OwnershipConflictReason, msg))
	if conditionIs(d.st, v1alpha1.ReadyCondition, metav1.ConditionTrue, "") {
		set(v1alpha1.ReadyCondition, f(v1alpha1.OwnershipConflictReason, msg))
		set(v1alpha1.DegradedCondition, t(v1alpha1.OwnershipConflictReason, msg))
		removeCondition(&d.st.Conditions, v1alpha1.ReconcilingCondition)
		set(v1alpha1.StalledCondition, t(v1alpha1.OwnershipConflictReason, msg))
	}
	for _, c := range d.plan.Conflicts {
		d.event(corev1.EventTypeWarning, v1alpha1.OwnershipConflictReason, EventMsgOwnershipConflict+": "+ConflictMessage(c.Field, c.Manager))
	}
	last := active[0].LastCorrectedAt.Time
	for _, c := range active {
		if c.LastCorrectedAt.After(last) {
			last = c.LastCorrectedAt.Time
		}
	}
	d.requeueWithin(last.Add(CorrectionWindow).Sub(d.now.Time) + time.Second)
}

// ConflictMessage says which field another manager keeps reverting and how
// to stop it, by the kind of manager. It names the field and the manager
// only, never values.
func ConflictMessage(field, manager string) string {
	return fmt.Sprintf("%s is reverted again and again by field manager %q; %s", field, manager, conflictFix(field, manager))
}

func conflictFix(field, manager string) string {
	switch {
	case manager == "kube-controller-manager" && field == "spec.replicas":
		return "a HorizontalPodAutoscaler owns the replicas: leave spec.replicas out of the OpenMedModel."
	case manager == "kustomize-controller":
		return "leave the field out of the Deployment in Git or out of the OpenMedModel, or annotate the Deployment with kustomize.toolkit.fluxcd.io/ssa: IfNotPresent."
	case manager == "argocd-controller" || manager == "argocd-application-controller":
		return "leave the field out of the Deployment in Git, or add it to the Application's ignoreDifferences (managedFieldsManagers: [openmed-operator])."
	case manager == "helm":
		return "leave the field out of the chart's values or out of the OpenMedModel."
	default:
		return "stop the other writer from setting this field, or leave it out of the OpenMedModel."
	}
}
