package rollout

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// Replacing pods in place (spec.rolloutStrategy.whenUnschedulable:
// ReplaceInPlace). With the declared strategy a rollout first needs room
// for maxSurge more pods; when a new pod stays unschedulable for
// unschedulableSeconds, the rollout of that spec goes on with maxSurge 0
// and maxUnavailable replicas − minAvailable, so the Deployment controller
// removes an old pod before it creates a new one and never goes below
// minAvailable available pods. Once the rollout completed, the declared
// strategy goes back on. Each step is recorded in status.replaceInPlace
// before the write that makes it, so a pass after a crash finishes what
// the record says:
//
//	no record          -> the pass records {specHash, maxUnavailable}; nothing else is written
//	record             -> the pointer carries the in-place strategy (pointerFor); the apply sets it
//	record, complete   -> the pass records restoring; nothing else is written
//	record, restoring  -> the pointer carries the declared strategy; the apply restores it
//	Ready (or a new spec, or the rollout failed) -> the record goes

// inPlaceStrategy returns spec with the strategy of its rollout in place
// when status.replaceInPlace records one for it (not restoring), else spec.
func (d *decider) inPlaceStrategy(spec v1alpha1.NormalizedSpec) v1alpha1.NormalizedSpec {
	if !d.replacingInPlace(SpecHash(spec)) {
		return spec
	}
	spec.RolloutStrategy.Type = v1alpha1.RollingUpdateRolloutStrategyType
	spec.RolloutStrategy.MaxSurge = intstr.FromInt32(0)
	spec.RolloutStrategy.MaxUnavailable = intstr.FromInt32(d.st.ReplaceInPlace.MaxUnavailable)
	return spec
}

// replacingInPlace reports whether the rollout of the spec hashed
// specHash replaces pods in place now (recorded, not restoring).
func (d *decider) replacingInPlace(specHash string) bool {
	r := d.st.ReplaceInPlace
	return r != nil && !r.Restoring && r.SpecHash == specHash
}

// restoringStrategy reports whether the declared strategy of the spec
// hashed specHash is going back on.
func (d *decider) restoringStrategy(specHash string) bool {
	r := d.st.ReplaceInPlace
	return r != nil && r.Restoring && r.SpecHash == specHash
}

// MinAvailable is the fewest available pods replacing in place keeps for
// spec on a Deployment of replicas: spec.rolloutStrategy.minAvailable, else
// replicas − 1 and at least 1.
func MinAvailable(spec v1alpha1.NormalizedSpec, replicas int32) int32 {
	if m := spec.RolloutStrategy.MinAvailable; m != nil {
		return *m
	}
	return max(1, replicas-1)
}

// switchInPlace decides, for a rollout of spec whose new pod finds no room
// (no node for it, or a quota that refuses it: noRoomSince), whether it
// goes on in place. With ReplaceInPlace, once that has lasted
// unschedulableSeconds and minAvailable leaves
// a pod to replace, it records the switch (the next pass applies it) and
// reports true; otherwise it sets what the message adds (inPlaceNote) and
// when to look again.
func (d *decider) switchInPlace(spec v1alpha1.NormalizedSpec, manifestHash string) bool {
	// The desired spec says what its rollout and a rollback from it do.
	rs := d.desired.RolloutStrategy
	if rs.WhenUnschedulable != v1alpha1.UnschedulableReplaceInPlace || d.obs.Deployment == nil {
		return false
	}
	since, why, ok := d.noRoomSince(manifestHash)
	if !ok {
		return false
	}
	wait := time.Duration(ptr.Deref(rs.UnschedulableSeconds, v1alpha1.DefaultUnschedulableSeconds)) * time.Second
	replicas := ptr.Deref(spec.Replicas, ptr.Deref(d.obs.Deployment.Spec.Replicas, 1))
	least := MinAvailable(d.desired, replicas)
	if replicas-least < 1 {
		d.inPlaceNote = fmt.Sprintf("; pods cannot be replaced in place: minAvailable %d of %d replicas leaves none to replace", least, replicas)
		return false
	}
	if left := since.Add(wait).Sub(d.now.Time); left > 0 {
		d.inPlaceNote = fmt.Sprintf("; pods are replaced in place %ds after a new pod found no room", int(wait.Seconds()))
		d.requeueWithin(left + 100*time.Millisecond)
		return false
	}
	d.st.ReplaceInPlace = &v1alpha1.ReplaceInPlaceStatus{SpecHash: SpecHash(spec), MaxUnavailable: replicas - least, StartedAt: d.now}
	d.event(corev1.EventTypeNormal, v1alpha1.ReplacingInPlaceReason,
		fmt.Sprintf(capitalize(fmt.Sprintf(why, spec.Version))+"; replacing pods in place (maxSurge 0, maxUnavailable %d, at least %d of %d available)",
			replicas-least, least, replicas))
	d.plan.Requeue = true
	return true
}

// restoreStrategy records that the in-place rollout of the spec hashed
// specHash completed: the next pass puts the declared strategy back.
func (d *decider) restoreStrategy() {
	r := *d.st.ReplaceInPlace
	r.Restoring = true
	d.st.ReplaceInPlace = &r
	d.plan.Requeue = true
}

// inPlaceSummary is the Reconciling message while pods are replaced in
// place or the declared strategy goes back on.
func (d *decider) inPlaceSummary(version, target, manifestHash, serving string) string {
	r := d.st.ReplaceInPlace
	if r == nil {
		return ""
	}
	if r.Restoring {
		return fmt.Sprintf("Rolled out %s on Deployment %s in place; restoring its declared strategy%s", version, target, serving)
	}
	return fmt.Sprintf("Replacing the pods of Deployment %s in place for %s (maxSurge 0, maxUnavailable %d): no room for a new pod beside the old ones%s%s",
		target, version, r.MaxUnavailable, d.progress(manifestHash), serving)
}

// declaredStrategy is, in apply-configuration form, the declared strategy
// of the spec whose rollout replaced pods in place on the Deployment named
// target, when the status read says the operator's strategy there is the
// in-place one: a release (a retarget, a deletion) keeps that instead of
// the live value. ok is false otherwise.
func (d *decider) declaredStrategy(target string) (map[string]any, bool) {
	r := d.old.ReplaceInPlace
	if r == nil || r.Restoring {
		return nil, false
	}
	var candidates []v1alpha1.NormalizedSpec
	if d.desired.Version != "" {
		candidates = append(candidates, d.desired)
	} else if n, err := Normalize(d.obj); err == nil {
		// A deletion's pass has not normalized the spec.
		candidates = append(candidates, n)
	}
	if d.old.RollbackSpec != nil {
		candidates = append(candidates, *d.old.RollbackSpec)
	}
	for _, e := range d.old.History {
		candidates = append(candidates, e.Spec)
	}
	for _, c := range candidates {
		if c.TargetRef.Name == target && SpecHash(c) == r.SpecHash {
			return strategyValue(c.RolloutStrategy), true
		}
	}
	return nil, false
}

// inPlaceIsNoDrift drops the strategy from drift while the rollout of the
// spec hashed specHash replaces pods in place or restores its strategy:
// the operator changes it itself (another manager that shares the field,
// such as the chart that set the same value, is no drift).
func (d *decider) inPlaceIsNoDrift(drift []Drift, specHash string) []Drift {
	if r := d.st.ReplaceInPlace; r == nil || r.SpecHash != specHash {
		return drift
	}
	return slices.DeleteFunc(drift, func(x Drift) bool { return x.Field == "spec.strategy" })
}
