package rollout

import (
	"slices"
	"sort"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// Suspend and deletion: a suspended resource is left alone; a deleted one
// releases every Deployment it may have written and its ConfigMaps before
// its finalizer goes.

// suspend leaves the cluster alone and only says so: phase Suspended, no
// Reconciling or Stalled. Nothing is applied or observed, so the status
// marks the current generation observed only when it cannot be wrong about
// it: the spec hash is the one the conditions were evaluated for (setting
// suspend, or any field outside the normalized spec, changes nothing the
// conditions say), and kstatus reads the resource as Current. A spec
// edited together with suspend (or before the first pass) is not
// evaluated: observedGeneration keeps the generation it last described,
// kstatus reads InProgress until the resource resumes, and Ready says the
// change waits (Flux's rules forbid Ready=True over an older generation).
func (d *decider) suspend() {
	d.st.Phase = v1alpha1.PhaseSuspended
	removeCondition(&d.st.Conditions, v1alpha1.ReconcilingCondition)
	removeCondition(&d.st.Conditions, v1alpha1.StalledCondition)
	evaluated := apimeta.FindStatusCondition(d.st.Conditions, v1alpha1.ReadyCondition) != nil
	if n, err := Normalize(d.obj); err == nil && evaluated && d.old.DesiredSpecHash == SpecHash(n) {
		d.st.ObservedGeneration = d.gen
		return
	}
	if !evaluated {
		// Nothing was ever evaluated: the one condition there is describes
		// this generation truthfully.
		d.st.ObservedGeneration = d.gen
	}
	apimeta.SetStatusCondition(&d.st.Conditions, metav1.Condition{
		Type:               v1alpha1.ReadyCondition,
		Status:             metav1.ConditionFalse,
		Reason:             v1alpha1.SuspendedReason,
		Message:            MsgSuspended,
		ObservedGeneration: d.st.ObservedGeneration,
		LastTransitionTime: d.now,
	})
}

// finalize gives everything back at deletion: the pointer on each
// Deployment the resource claimed, and every ConfigMap it owns. It needs no
// valid spec and no target, and then lets the finalizer go. A Deployment
// that names another owner is left alone with a warning; one the resource
// never claimed is not mentioned at all. What is left to release is
// read from the Deployments themselves (releaseLeft), so a release that
// stopped after its first request is finished here, and the finalizer goes
// only with a pass that found or finished all of it.
func (d *decider) finalize() {
	released, skipped := false, false
	consider := func(dep *appsv1.Deployment) *Release {
		switch {
		case dep == nil:
			return nil
		case foreign(dep, d.owner):
			skipped = true
			return nil
		case d.releaseLeft(dep):
			// The pointer is removed by this release: announce it once, not
			// again for a pass that only finishes the managedFields step.
			released = released || d.ours(dep)
			return d.release(dep)
		}
		return nil
	}
	d.plan.Release = consider(d.obs.Deployment)
	for _, prev := range d.obs.PreviousTargets {
		if prev != nil && (d.obs.Deployment == nil || prev.Name != d.obs.Deployment.Name) {
			if rel := consider(prev); rel != nil {
				d.plan.ReleasePrevious = append(d.plan.ReleasePrevious, rel)
			}
		}
	}
	for i := range d.obs.ConfigMaps {
		if cm := &d.obs.ConfigMaps[i]; ownedBy(cm, d.obj) {
			d.plan.PruneConfigMaps = append(d.plan.PruneConfigMaps, cm.Name)
		}
	}
	sort.Strings(d.plan.PruneConfigMaps)
	if released {
		d.event(corev1.EventTypeNormal, v1alpha1.ModelRemovedReason, EventMsgModelRemoved)
	}
	if skipped {
		d.event(corev1.EventTypeWarning, v1alpha1.ModelRemovalSkippedReason, EventMsgRemovalSkipped)
	}
	d.plan.RemoveFinalizer = true
}

// releaseLeft reports whether dep still needs a release by this resource:
// it carries this resource's pointer or owner annotation (ours), or the
// status records it as possibly written (ClaimedTargets) and, with no other
// owner named, any managedFields entry of the operator's field manager is
// still on it: the trace of a release interrupted halfway, work left
// whatever the annotations say. (A release keeps the owner annotation until
// its last request, so the annotation alone normally tells; the entry
// covers a Deployment whose annotations someone removed.) Another
// resource's entry on a Deployment this one never wrote is not its to
// remove.
func (d *decider) releaseLeft(dep *appsv1.Deployment) bool {
	if foreign(dep, d.owner) {
		return false
	}
	return d.ours(dep) || (slices.Contains(ClaimedTargets(d.old), dep.Name) && carriesEntry(dep, d.opts.FieldManager))
}

// ours reports whether dep carries this resource's pointer: an owner
// annotation (Deployment or pod template) names it, or, with both removed,
// the preload entry references one of its own manifest ConfigMaps. Another
// resource's pointer is never ours, even when the annotations are gone.
func (d *decider) ours(dep *appsv1.Deployment) bool {
	if foreign(dep, d.owner) {
		return false
	}
	if dep.Annotations[v1alpha1.ModelResourceAnnotation] == d.owner ||
		dep.Spec.Template.Annotations[v1alpha1.ModelResourceAnnotation] == d.owner {
		return true
	}
	for _, c := range dep.Spec.Template.Spec.Containers {
		name := pointedConfigMap(dep, c.Name)
		for i := range d.obs.ConfigMaps {
			if cm := &d.obs.ConfigMaps[i]; name != "" && cm.Name == name && ownedBy(cm, d.obj) {
				return true
			}
		}
	}
	return false
}
