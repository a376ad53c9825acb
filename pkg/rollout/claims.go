package rollout

// Targets: resolving the desired Deployment, claiming it before the first
// write (status.claimedTargets, recorded ahead of the write), and releasing
// the Deployments a retarget left behind.

import (
	"slices"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// resolveTarget checks the recoverable blockers of the target and plans the
// release of a Deployment the resource pointed at before a retarget. It
// reports whether the pass may go on.
func (d *decider) resolveTarget() bool {
	dep := d.obs.Deployment
	switch {
	case dep == nil:
		d.blocked(targetNotFoundTuple, v1alpha1.PhasePending, reconciling,
			v1alpha1.TargetNotFoundReason, EventMsgTargetNotFound)
		return false
	case findContainer(dep, d.desired.TargetRef.ContainerName) == nil:
		d.blocked(containerNotFoundTuple, v1alpha1.PhaseFailed, stalled,
			v1alpha1.ContainerNotFoundReason, EventMsgContainerNotFound)
		return false
	case foreign(dep, d.owner):
		d.blocked(targetConflictTuple, v1alpha1.PhaseFailed, stalled,
			v1alpha1.TargetConflictReason, EventMsgTargetConflict)
		return false
	}
	d.releasePrevious(dep.Name)
	return true
}

// releasePrevious plans the release of every Deployment other than the
// desired target that the status records as possibly written and that
// still carries anything of the operator's (releaseLeft). A recorded one
// that carries nothing (or no longer exists) leaves the record: the status
// keeps naming a Deployment until a pass sees it released, so an
// interrupted release is found again from there, even after a restart.
func (d *decider) releasePrevious(desired string) {
	_, previous := TargetNames(d.obj)
	for _, name := range previous {
		if prev := d.previousTarget(name); prev != nil && d.releaseLeft(prev) {
			d.plan.ReleasePrevious = append(d.plan.ReleasePrevious, d.release(prev))
			continue
		}
		d.unclaim(name, desired)
	}
}

// previousTarget is the observed Deployment name of PreviousTargets, or nil.
func (d *decider) previousTarget(name string) *appsv1.Deployment {
	for _, dep := range d.obs.PreviousTargets {
		if dep != nil && dep.Name == name {
			return dep
		}
	}
	return nil
}

// claim lists name in status.claimedTargets; a name the status the pass
// read does not list is written ahead of the plan's writes
// (Plan.ClaimTargets).
func (d *decider) claim(name string) {
	d.listClaims()
	if !slices.Contains(ClaimedTargets(d.old), name) && !slices.Contains(d.plan.ClaimTargets, name) {
		d.plan.ClaimTargets = append(d.plan.ClaimTargets, name)
	}
	if !slices.Contains(d.st.ClaimedTargets, name) {
		d.st.ClaimedTargets = append(d.st.ClaimedTargets, name)
		slices.Sort(d.st.ClaimedTargets)
	}
}

// unclaim drops a released Deployment from the record; a status.targetName
// that still names it moves to the desired target.
func (d *decider) unclaim(name, desired string) {
	d.listClaims()
	d.st.ClaimedTargets = slices.DeleteFunc(d.st.ClaimedTargets, func(n string) bool { return n == name })
	if d.st.TargetName == name {
		d.st.TargetName = desired
	}
}

// listClaims makes st.ClaimedTargets the full record before it changes: a
// status written before claimedTargets existed names its one target in
// targetName only. A pass that changes no claim leaves the list as it was.
func (d *decider) listClaims() {
	if !d.claimsListed {
		d.st.ClaimedTargets = ClaimedTargets(d.old)
		d.claimsListed = true
	}
}

// shardLabels returns the model's values of the shard label keys it has,
// and the keys it lacks (Options.ShardLabels).
func (d *decider) shardLabels() (map[string]string, []string) {
	var values map[string]string
	var unset []string
	for _, k := range d.opts.ShardLabels {
		if v, ok := d.obj.Labels[k]; ok {
			if values == nil {
				values = map[string]string{}
			}
			values[k] = v
		} else {
			unset = append(unset, k)
		}
	}
	return values, unset
}

// foreign reports whether the Deployment names another owner.
func foreign(dep *appsv1.Deployment, owner string) bool {
	v := dep.Annotations[v1alpha1.ModelResourceAnnotation]
	return v != "" && v != owner
}
