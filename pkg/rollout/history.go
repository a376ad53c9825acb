package rollout

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// newHistoryEntry is the retained record of a spec that became Ready at now.
func newHistoryEntry(spec v1alpha1.NormalizedSpec, now metav1.Time) v1alpha1.HistoryEntry {
	return v1alpha1.HistoryEntry{
		Version:      spec.Version,
		SpecHash:     SpecHash(spec),
		ManifestHash: ManifestHash(spec),
		Spec:         *spec.DeepCopy(),
		ReadyAt:      now,
	}
}

// retainedHistory is the status history, or, for a status written in the
// Kopf operator's format (only lastSuccessfulSpec and previousSuccessfulSpec),
// the history those two describe. now stamps migrated entries, whose ready
// time the old format did not record.
//
// An entry whose spec does not hash to its recorded hash (a hand-edited or
// corrupt status) is dropped: it could not be restored faithfully (docs/decisions.md).
func retainedHistory(st *v1alpha1.OpenMedModelStatus, now metav1.Time) []v1alpha1.HistoryEntry {
	if len(st.History) > 0 {
		var h []v1alpha1.HistoryEntry
		for _, e := range st.History {
			if SpecHash(e.Spec) == e.SpecHash && e.Version == e.Spec.Version && e.Version != "" {
				h = append(h, e)
			}
		}
		return h
	}
	if st.LastSuccessfulSpec == nil || st.LastSuccessfulSpec.Version == "" {
		return nil
	}
	h := []v1alpha1.HistoryEntry{newHistoryEntry(*st.LastSuccessfulSpec, now)}
	if p := st.PreviousSuccessfulSpec; p != nil && p.Version != st.LastSuccessfulSpec.Version {
		h = append(h, newHistoryEntry(*p, now))
	}
	return h
}

// pushHistory puts spec at the head of the history: one entry per version
// (a replicas-only change replaces its version's entry instead of
// pushing another version out), at most limit entries.
func pushHistory(h []v1alpha1.HistoryEntry, spec v1alpha1.NormalizedSpec, now metav1.Time, limit int) []v1alpha1.HistoryEntry {
	if len(h) > 0 && h[0].SpecHash == SpecHash(spec) {
		return truncateHistory(h, limit)
	}
	out := []v1alpha1.HistoryEntry{newHistoryEntry(spec, now)}
	for _, e := range h {
		if e.Version != spec.Version {
			out = append(out, e)
		}
	}
	return truncateHistory(out, limit)
}

func truncateHistory(h []v1alpha1.HistoryEntry, limit int) []v1alpha1.HistoryEntry {
	if limit > 0 && len(h) > limit {
		return h[:limit]
	}
	return h
}

// setHistory stores h and its two views: lastSuccessfulSpec is the newest
// entry, previousSuccessfulSpec the newest with another version.
func setHistory(st *v1alpha1.OpenMedModelStatus, h []v1alpha1.HistoryEntry) {
	if len(h) == 0 {
		h = nil
	}
	st.History = h
	st.LastSuccessfulSpec, st.PreviousSuccessfulSpec = nil, nil
	if len(h) == 0 {
		return
	}
	st.LastSuccessfulSpec = h[0].Spec.DeepCopy()
	for _, e := range h[1:] {
		if e.Version != h[0].Version {
			st.PreviousSuccessfulSpec = e.Spec.DeepCopy()
			break
		}
	}
}

// findVersion is the newest retained entry with the given version.
func findVersion(h []v1alpha1.HistoryEntry, version string) (v1alpha1.HistoryEntry, bool) {
	for _, e := range h {
		if e.Version == version {
			return e, true
		}
	}
	return v1alpha1.HistoryEntry{}, false
}

// onTarget is retained spec r moved onto the desired spec's target: its
// Deployment, container and ConfigMap base. A rollback restores the model and
// rollout settings that worked, on the Deployment the resource targets now,
// so it never patches a Deployment the operator does not monitor
// (docs/decisions.md, Retarget).
func onTarget(r, desired v1alpha1.NormalizedSpec) v1alpha1.NormalizedSpec {
	out := *r.DeepCopy()
	out.TargetRef = desired.TargetRef
	out.ManifestConfigMapName = desired.ManifestConfigMapName
	return out
}

// AutomaticRollback is the spec an automatic rollback restores when the
// rollout of desired fails, given the retained history of the status at that
// moment: the newest retained spec on the desired target, or false when
// rollbackOnFailure is off or nothing is retained (the resource then fails).
func AutomaticRollback(desired v1alpha1.NormalizedSpec, history []v1alpha1.HistoryEntry) (v1alpha1.NormalizedSpec, bool) {
	if !desired.RolloutStrategy.RollbackOnFailure || len(history) == 0 {
		return v1alpha1.NormalizedSpec{}, false
	}
	return onTarget(history[0].Spec, desired), true
}
