package rollout

import (
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// Rolling out the desired spec: applying the pointer, judging the
// Deployment's progress and the rollout's failure by its deadline, and the
// spec serving (Ready, retained in history).

// pointerFor is the operator's intent for spec on the desired target.
func (d *decider) pointerFor(spec v1alpha1.NormalizedSpec) pointer {
	spec = d.inPlaceStrategy(spec)
	p := newPointer(spec, d.owner)
	p.cmName = d.manifestName(spec)
	p.shard, p.unset = d.shardLabels()
	p.manager = d.opts.FieldManager
	p = p.withLiveGate(d.obs.Deployment).withLive(d.obs.Deployment, Bakes(spec, p.manifestHash, d.history))
	return p.withGate(d.obs.Deployment, d.obj.Spec.Verification != nil, d.served(spec, p.manifestHash))
}

// served reports whether the version manifestHash of spec served from its
// target already (it is retained in history): its template is not rolled
// for the readiness gate alone (withGate).
func (d *decider) served(spec v1alpha1.NormalizedSpec, manifestHash string) bool {
	return slices.ContainsFunc(d.history, func(h v1alpha1.HistoryEntry) bool {
		return h.ManifestHash == manifestHash && h.Spec.TargetRef == spec.TargetRef
	})
}

// apply plans the ConfigMap and the Deployment pointer for spec and records
// them in the status. It reports false when a manifest conflict blocks it.
func (d *decider) apply(spec v1alpha1.NormalizedSpec) bool {
	if _, ok := d.ensureManifest(spec); !ok {
		return false
	}
	dep := d.obs.Deployment
	p := d.pointerFor(spec)
	d.plan.ReleaseReplicas = releasesReplicas(dep, spec.Replicas, d.opts.FieldManager)
	if p.takeoverStrategy(dep) {
		d.plan.Takeover = p.intent(map[string]any{"spec.strategy": takeoverStrategy(dep.Spec.Strategy)})
	}
	d.plan.ApplyDeployment = p.intent(nil)
	d.plan.Claim = dep.Annotations[v1alpha1.ModelResourceAnnotation] == ""
	replaced := p.foreignValues(dep, d.opts.FieldManager)
	if len(replaced) > 0 {
		d.plan.Drift = append(d.plan.Drift, replaced...)
		d.correctionEvent(v1alpha1.FieldReplacedReason, EventMsgFieldReplaced, replaced)
	}
	d.plan.LabelsOnly = d.plan.Takeover == nil && !d.plan.ReleaseReplicas && len(replaced) == 0 && p.onlyBookkeeping(dep)
	d.st.AppliedSpecHash = SpecHash(spec)
	d.st.ManifestConfigMapName = p.cmName
	d.st.TargetName = spec.TargetRef.Name
	// Informational: the generation a template change produces. Readiness
	// is judged by the Deployment itself (ControllerObserved), never by this.
	if p.templateChanged(dep) {
		d.st.TargetDeploymentGeneration = dep.Generation + 1
	}
	return true
}

// proven reports whether the desired model version already served from
// this target: then a rollout or failure of the Deployment is not the
// model's, and a replicas-only spec change is no rollout.
func (d *decider) proven() bool {
	if len(d.history) == 0 {
		return false
	}
	h := d.history[0]
	return h.ManifestHash == d.st.ManifestHash && h.Spec.TargetRef == d.desired.TargetRef
}

// rollout drives the desired spec: apply it when the target does not carry
// it, then judge the Deployment until it is Ready, fails or loses
// availability. retry is true for the pass that handles a reset of a failed
// spec.
func (d *decider) rollout(retry bool) {
	dep := d.obs.Deployment
	p := d.pointerFor(d.desired)
	proven := d.proven()
	switch {
	case p.matches(dep):
	case p.onlyBookkeeping(dep):
		// Only the cache's labels are missing (an upgraded install, a
		// shard move, a label somebody removed): they go back on, and the
		// Deployment, whose generation the write does not move, is judged
		// as if they were there.
		if !d.apply(d.desired) {
			return
		}
	default:
		d.applyDesired(p, proven, retry)
		return
	}
	// The spec stopped setting replicas: give them up at their live value
	// (the pointer already matches, so no apply follows).
	d.plan.ReleaseReplicas = releasesReplicas(dep, d.desired.Replicas, d.opts.FieldManager)
	if retry {
		// The failed pointer is still in place (nothing was retained to
		// roll back to): the retry is judged by what the Deployment reports
		// from now on, within the spec's progress deadline; a version that
		// bakes is judged on its pods as soon as they change.
		d.start(v1alpha1.RetryRequestedReason, false)
		d.plan.WatchesPods = d.bakeRequired()
		return
	}
	ours := !proven || d.old.Phase == v1alpha1.PhaseRollingOut
	switch {
	case ours && dep.Spec.Paused && !RolloutComplete(dep) && !d.bakeRecorded():
		// The owner paused the Deployment: the model's rollout waits for
		// it, whatever the controller has observed (Argo CD calls a paused
		// Deployment Suspended before it looks at anything else). A bake
		// goes on judging its pods: a crash while paused fails it now.
		d.st.Phase = v1alpha1.PhaseRollingOut
		d.conditions(targetPausedTuple, reconciling)
	case !ControllerObserved(dep) && d.bakeRecorded():
		// A scale-up (an HPA) during the bake: the bake goes on, judged
		// by the pods, once the controller has observed the change.
		d.judgeBake(false)
	case !ControllerObserved(dep):
		d.awaitController(ours)
	case !ours:
		d.serving(dep)
	case d.failedVerification():
		// A pod of the version answered the golden request wrongly on
		// every attempt: the rollout (or its bake) fails now, not at the
		// deadline.
	case d.failedNow(dep):
		d.rolloutFailed()
	case proven && progressDeadlineExceeded(dep):
		d.unavailable(stalled)
	case d.replacingInPlace(d.hash) && RolloutComplete(dep):
		// Every pod was replaced in place: the declared strategy goes
		// back on (recorded first; the next pass applies it).
		d.restoreStrategy()
		d.rolling()
	case d.bakeRecorded() || (d.bakeRequired() && RolloutComplete(dep)):
		// The rollout completed: the version bakes before it is Ready. A
		// pod that restarts makes the Deployment incomplete for a moment;
		// the bake, not a new rollout, judges that.
		d.judgeBake(RolloutComplete(dep))
	case RolloutComplete(dep) && proven:
		d.stillServing()
	case RolloutComplete(dep):
		d.rolloutSucceeded()
	default:
		d.rolling()
	}
}

// failedNow reports whether the model's own rollout failed: the
// Deployment gave up on it, or, for a retry of a pointer that was already
// in place, it gave up after the retry started or the deadline passed.
func (d *decider) failedNow(dep *appsv1.Deployment) bool {
	if d.proven() {
		return false
	}
	since := d.st.RetryStartedAt
	if since == nil {
		return d.deploymentFailed(dep, time.Time{})
	}
	if d.deploymentFailed(dep, since.Time) {
		return !RolloutComplete(dep)
	}
	if d.bakeRecorded() {
		// The retried rollout completed and bakes: the retry's deadline
		// was the rollout's; a pod replaced by a drain or an HPA's
		// scale-up during the bake is the bake's to judge.
		return false
	}
	deadline := time.Duration(d.desired.RolloutStrategy.ProgressDeadlineSeconds) * time.Second
	if !d.now.Before(&metav1.Time{Time: since.Add(deadline)}) {
		return !RolloutComplete(dep)
	}
	if !RolloutComplete(dep) {
		d.requeueWithin(since.Add(deadline).Sub(d.now.Time) + time.Second)
	}
	return false
}

// deploymentFailed reports a failure of the model's rollout (or rollback)
// the Deployment controller reports for its current generation, written at
// or after since (zero: any time): its progress deadline passed
// (Progressing=False, ProgressDeadlineExceeded), as gitops-engine and
// kstatus read it. Nothing else fails a rollout before its deadline: a
// ReplicaFailure (a quota, an admission webhook refusing the pods) and a
// scheduling gate are progress that waits (refusals.go), named in the
// status, as a pod that waits for a node is: the Deployment's progress
// deadline runs on and fails them.
//
// The time is the cluster's: the condition's update
// (kube-controller-manager).
func (d *decider) deploymentFailed(dep *appsv1.Deployment, since time.Time) bool {
	c := deadlineCondition(dep)
	return c != nil && !c.LastUpdateTime.Time.Before(since)
}

// applyDesired writes the desired pointer to a target that does not carry
// it: a new spec, the first rollout, a retry, or the correction of another
// manager's change (drift).
func (d *decider) applyDesired(p pointer, proven, retry bool) {
	dep := d.obs.Deployment
	changed := d.old.DesiredSpecHash != d.hash
	wasApplied := d.old.AppliedSpecHash == d.hash &&
		(d.old.Phase == v1alpha1.PhaseRollingOut || d.old.Phase == v1alpha1.PhaseReady)
	var drift []Drift
	if wasApplied && !changed {
		drift = d.inPlaceIsNoDrift(p.drift(dep, d.opts.FieldManager), d.hash)
		// Nothing differs but values the operator set itself: a pass
		// applied another spec and its status write was lost (a crash, or
		// the edit that changed the spec back won the race for the model).
		// The Deployment carries a spec the model no longer asks for: a
		// change of spec, not another manager's drift.
		changed = len(drift) == 0
	}
	rolls := p.templateChanged(dep)
	if !rolls {
		// Replicas, strategy, deadline or the owner annotation only: no pod
		// rolls, so there is no rollout to watch, and a Ready resource stays
		// Ready.
		if !d.apply(d.desired) {
			return
		}
		d.recordDrift(drift)
		switch {
		case proven && d.old.Phase == v1alpha1.PhaseReady && changed && p.specChanged(dep):
			// The model's own replicas, strategy or deadline change the
			// Deployment's generation: what it reports now describes the
			// spec before this apply, so the new generation of the model is
			// not judged until the Deployment controller has observed it
			// (its status update wakes the resource). A correction of
			// another manager's change keeps the verdict the unchanged
			// model already has (awaitController).
			d.st.Phase = v1alpha1.PhaseReady
			d.conditions(waitingTuple, reconciling)
			d.inFlight()
		case proven && d.old.Phase == v1alpha1.PhaseReady && ControllerObserved(dep):
			// Only the owner annotation: the Deployment's status still
			// describes its current spec.
			d.serving(dep)
		case proven && d.old.Phase == v1alpha1.PhaseReady:
			d.awaitController(false)
		default:
			d.rolling()
		}
		return
	}
	switch {
	case retry:
		d.start(v1alpha1.RetryRequestedReason, true)
	case len(drift) > 0:
		if d.start(v1alpha1.DriftCorrectedReason, true) {
			d.recordDrift(drift)
		}
	case changed:
		d.start(v1alpha1.SpecChangedReason, true)
	default:
		d.start(v1alpha1.InitialRolloutReason, true)
	}
}

// start reports the rollout of the desired spec started and, with apply,
// plans the writes that start it. Without apply (a retry of a pointer that
// is already in place) the retry's start time is recorded instead.
func (d *decider) start(reason string, apply bool) bool {
	if apply && !d.apply(d.desired) {
		return false
	}
	d.st.Phase = v1alpha1.PhaseRollingOut
	d.clearFailure()
	d.clearAttempt()
	if !apply {
		now := d.now
		d.st.RetryStartedAt = &now
	}
	d.conditions(startTuple(reason), reconciling)
	d.inFlight()
	if reason != v1alpha1.DriftCorrectedReason {
		d.event(corev1.EventTypeNormal, v1alpha1.RolloutStartedReason, EventMsgRolloutStarted)
	}
	return true
}

// recordDrift reports the drift a pass corrects: the DriftCorrected event,
// the plan's Drift list (the reconciler counts it) and status.corrections.
func (d *decider) recordDrift(drift []Drift) {
	if len(drift) == 0 {
		return
	}
	d.plan.Drift = append(d.plan.Drift, drift...)
	d.correctionEvent(v1alpha1.DriftCorrectedReason, EventMsgDriftCorrected, drift)
}

// correctionEvent emits reason for a correction and counts it in
// status.corrections.
func (d *decider) correctionEvent(reason, message string, drift []Drift) {
	parts := make([]string, len(drift))
	for i, x := range drift {
		parts[i] = x.String()
		d.countCorrection(x)
	}
	d.event(corev1.EventTypeNormal, reason, message+": "+strings.Join(parts, "; ")+".")
}

// awaitController is a pass before the Deployment controller saw the
// target's latest spec: its status still describes an older one, so
// nothing changes until the controller answers (in milliseconds; its
// status update wakes the resource).
func (d *decider) awaitController(ours bool) {
	if ours {
		d.rolling()
		return
	}
	if conditionIs(d.old, v1alpha1.ReadyCondition, metav1.ConditionTrue, "") ||
		conditionIs(d.old, v1alpha1.ReadyCondition, metav1.ConditionFalse, v1alpha1.OwnershipConflictReason) {
		// A settled resource keeps its status while an HPA or another
		// manager changes the Deployment (an ownership conflict is only
		// shown over a Ready one; overlayConflicts).
		return
	}
	d.st.Phase = v1alpha1.PhaseReady
	d.conditions(waitingTuple, reconciling)
	d.inFlight()
}

// rolling reports the model's rollout under way. A status that already
// says so is kept as it is, so a pass writes status during a rollout only
// when the progress in the Reconciling message moved (summarize).
func (d *decider) rolling() {
	d.inFlight()
	pod, msg := d.unschedulable(d.st.ManifestHash)
	refused := d.podRefusal()
	gated, gates := d.gatedPod(d.st.ManifestHash)
	verifying := d.verifyingPod(d.st.ManifestHash)
	switch {
	case d.replacingInPlace(d.hash) || d.restoringStrategy(d.hash) || d.switchInPlace(d.desired, d.st.ManifestHash):
		d.rollingAs(replacingInPlaceTuple)
	case pod != "":
		// A new pod waits for a node: progress, said with the scheduler's
		// reason, once per rollout as an event.
		d.eventOnChange(corev1.EventTypeWarning, v1alpha1.UnschedulableReason,
			fmt.Sprintf("Pod %s of %s cannot be scheduled: %s", pod, d.desired.Version, msg), v1alpha1.UnschedulableReason)
		d.rollingAs(unschedulableTuple)
	case refused != nil:
		// The API server refuses the version's pods (a quota, a
		// webhook): progress that waits until the deadline, said with its
		// answer, once per rollout as an event.
		d.eventOnChange(corev1.EventTypeWarning, v1alpha1.PodCreationRefusedReason,
			fmt.Sprintf("Pods of %s cannot be created: %s", d.desired.Version, refused.message), v1alpha1.PodCreationRefusedReason)
		d.rollingAs(podCreationRefusedTuple)
	case gated != "":
		// A scheduling gate holds a new pod until whatever added it (an
		// admission system) lets it go: progress that waits.
		d.eventOnChange(corev1.EventTypeNormal, v1alpha1.SchedulingGatedReason,
			fmt.Sprintf("Pod %s of %s waits for admission: scheduling gate %s", gated, d.desired.Version, gates), v1alpha1.SchedulingGatedReason)
		d.rollingAs(schedulingGatedTuple)
	case verifying != "":
		// A new pod is ready but for the gate: the operator sends it the
		// golden request; the rollout waits while the old pods serve.
		d.rollingAs(verifyingTuple)
	case d.old.Phase == v1alpha1.PhaseRollingOut && rolloutReported(d.old):
	default:
		d.rollingAs(rollingTuple)
	}
}

// rollingAs reports the desired spec's rollout under way with tp.
func (d *decider) rollingAs(tp tuple) {
	d.st.Phase = v1alpha1.PhaseRollingOut
	d.st.AppliedSpecHash = d.hash
	d.conditions(tp, reconciling)
}

// rolloutReported reports whether st already says the model's rollout is
// under way (a start or its progress), and not a failed step of an earlier
// pass, whose text must not outlive the pass that recovered.
func rolloutReported(st *v1alpha1.OpenMedModelStatus) bool {
	c := apimeta.FindStatusCondition(st.Conditions, v1alpha1.ReconcilingCondition)
	return c != nil && c.Status == metav1.ConditionTrue &&
		(c.Reason == v1alpha1.RolloutStartedReason || c.Reason == v1alpha1.RolloutInProgressReason)
}

// serving judges a target that serves the desired version already, the way
// Kubernetes and Argo CD judge the Deployment itself, never worse: another
// manager's rollout (an image upgrade) is not the model's, a capacity change
// (a scale-up, an HPA, minReadySeconds, a pod replaced) is progress, and
// only a failure the Deployment controller reports (its progress deadline)
// is a failure. Nothing here is rolled back.
func (d *decider) serving(dep *appsv1.Deployment) {
	d.st.Phase = v1alpha1.PhaseReady
	switch {
	case progressDeadlineExceeded(dep):
		d.unavailable(stalled)
	case dep.Spec.Paused && !RolloutComplete(dep):
		// Whatever is under way waits for the owner to resume the
		// Deployment (Argo CD: Suspended).
		d.conditions(targetPausedTuple, reconciling)
	case oldTemplatePods(dep):
		d.conditions(deploymentRollingTuple, reconciling)
	case RolloutComplete(dep):
		d.stillServing()
	case dep.Status.AvailableReplicas == 0 || replicaFailure(dep):
		d.unavailable(reconciling)
	default:
		d.conditions(scalingTuple, reconciling)
		d.inFlight()
	}
}

// rolloutSucceeded reports the desired spec Ready after the model's own
// rollout (and bake) completed: announced (RolloutSucceeded) and counted.
func (d *decider) rolloutSucceeded() { d.serveDesired(true) }

// stillServing reports the desired spec Ready when it was serving already
// (a pass over a steady model, a Deployment that came back): nothing is
// announced.
func (d *decider) stillServing() { d.serveDesired(false) }

// serveDesired records the desired spec as the one serving: the status
// says Ready, the spec joins the history of successful versions, and the
// manifest ConfigMaps no retained version needs are pruned. announce is
// rolloutSucceeded's (a model that was not Ready or rolling out is
// announced too).
func (d *decider) serveDesired(announce bool) {
	created, ok := d.ensureManifest(d.desired)
	if !ok {
		return
	}
	if created && !conditionIs(d.old, v1alpha1.ReadyCondition, metav1.ConditionFalse, v1alpha1.ManifestMismatchReason) {
		// The ConfigMap the pods read was deleted; recreating it under the
		// same content-addressed name needs no rollout. (After a
		// ManifestMismatch the operator deleted it: no drift.)
		d.recordDrift([]Drift{{Field: "configmap " + d.pointerFor(d.desired).cmName, Removed: true}})
	}
	announce = announce || (d.old.Phase != v1alpha1.PhaseReady && d.old.Phase != v1alpha1.PhaseRollingOut)
	d.st.Phase = v1alpha1.PhaseReady
	d.st.ActiveVersion = d.desired.Version
	d.st.AppliedSpecHash = d.hash
	d.st.ManifestConfigMapName = d.pointerFor(d.desired).cmName
	d.st.TargetName = d.desired.TargetRef.Name
	d.clearFailure()
	d.clearAttempt()
	d.st.RollbackCount = 0
	d.history = pushHistory(d.history, d.desired, d.now, d.limit)
	setHistory(d.st, d.history)
	if announce && !conditionIs(d.old, v1alpha1.ReadyCondition, metav1.ConditionTrue, "") {
		d.event(corev1.EventTypeNormal, v1alpha1.RolloutSucceededReason, EventMsgRolloutSucceeded)
	}
	d.conditions(readyTuple, settled)
	d.prune()
}

// unavailable reports a Deployment that lost availability while serving the
// desired spec: nothing is rolled back, and Ready returns with the
// Deployment. A failure reported by Kubernetes stalls; otherwise the
// operator waits.
func (d *decider) unavailable(ks kstatus) {
	d.st.Phase = v1alpha1.PhaseReady
	d.conditions(deploymentUnavailableTuple, ks)
}
