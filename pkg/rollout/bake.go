package rollout

import (
	"fmt"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// The bake guard (spec.rolloutStrategy.bakeSeconds): after the model's own
// rollout of a new version completed, the version serves for that long
// before it is Ready and retained. The Kubernetes API already says when the
// containers of a new version restart; no metrics stack is needed.
//
// What the bake judges: the pods of the target Deployment's ReplicaSets
// in the model's namespace (by their controller owner reference and its
// UID, verified against the Deployment's, not by annotation alone: a
// previous target's pods carry the same manifest hash, and anyone may copy
// the pod template into another namespace) whose pod template carries
// the version's manifest hash, and of each the model's own container
// (targetRef.containerName). Other containers (a log shipper, a mesh
// proxy) and native sidecars (initContainerStatuses) are not the version's:
// the version changes only the model container's preload pointer. What
// fails a bake, for such a pod that is not being deleted:
//   - the model container terminated (a restart, an OOM kill), at any
//     time since the pod of the version started — between Ready and the
//     pass that begins the bake too — or, for a reset that retries the
//     version on the same pods, after the reset;
//   - the pod turned unready during the bake on a node that is Ready and
//     stayed unready for BakeUnreadyGrace (a pod that was unready when the
//     bake began counts from then);
//   - the Deployment reporting its progress deadline passed (the same
//     failure as during the rollout).
//
// What does not: the cluster's failures, never the version's — a pod whose
// node is not Ready (lost, unreachable: the node lifecycle controller
// marks its pods unready long before it evicts them), a pod the kubelet
// evicted or stopped for a node shutdown (phase Failed), a pod with a
// DisruptionTarget condition (an eviction, a preemption, a taint
// eviction); pods created after the bake began being unready while they
// start (a scale-up); pods of another pod template or Deployment; pods
// being deleted (a drain, a scale-down) and pods that are gone.
//
// The passes during a bake judge the pods a store of the reconciler keeps
// (a watch); the pass that ends it reads them from the API server first
// (Plan.ReadPods, BakePodSelector): a restart the store has not received
// yet — its watch broken and not yet re-established — never makes a
// version Ready and retained.

// BakeUnreadyGrace is how long a pod of the baking version may stay unready
// before the bake fails: a readiness probe that fails once is no failure.
const BakeUnreadyGrace = 10 * time.Second

// HiddenPodsRecheck is how often a bake whose pods the pod store cannot
// see (Observed.PodsHidden) reads them again.
const HiddenPodsRecheck = 10 * time.Second

// Bake failures, by what the pods showed. They name the reason of the
// RolloutFailed event and the label of openmed_bake_failures_total.
const (
	BakeContainerRestarted = "ContainerRestarted"
	BakeOOMKilled          = "OOMKilled"
	BakePodUnready         = "PodUnready"
)

// BakeFailures lists every bake failure reason.
var BakeFailures = []string{BakeContainerRestarted, BakeOOMKilled, BakePodUnready}

// Bakes reports whether a rollout of desired, whose manifest hash is
// manifestHash, bakes before it is Ready: it asks for a bake and is not a
// retained version of its target (one that served from it). history is the
// retained versions, newest first.
func Bakes(desired v1alpha1.NormalizedSpec, manifestHash string, history []v1alpha1.HistoryEntry) bool {
	if desired.RolloutStrategy.BakeSeconds <= 0 {
		return false
	}
	// A version retained from this target (the last one, or an older one
	// the spec went back to) served already: it does not bake again.
	return !slices.ContainsFunc(history, func(h v1alpha1.HistoryEntry) bool {
		return h.ManifestHash == manifestHash && h.Spec.TargetRef == desired.TargetRef
	})
}

// bakeRequired reports whether the desired spec bakes before it is Ready.
func (d *decider) bakeRequired() bool {
	return Bakes(d.desired, d.st.ManifestHash, d.history)
}

// bakeRecorded reports whether the status records the bake of the desired spec.
func (d *decider) bakeRecorded() bool {
	return d.st.BakeStartedAt != nil && d.st.AppliedSpecHash == d.hash && d.bakeRequired()
}

// judgeBake judges the desired spec once its rollout completed: the bake
// begins when a pod of the version is Ready where the operator sees it
// (none with replicas 0, or pods the pod store cannot see: the model waits
// and says so instead of passing), fails on what the pods show, is Ready
// once bakeSeconds passed with the Deployment complete and a pod of the
// version Ready, and otherwise waits for the end of the bake (one timer) or
// a pod's grace. It ends only on pods read from the API server in the pass
// (Observed.PodsRead); otherwise the plan asks for that read (ReadPods).
func (d *decider) judgeBake(complete bool) {
	d.plan.WatchesPods = true
	if d.obs.PodsHidden {
		if !d.obs.PodsRead {
			d.plan.ReadPods = true
			return
		}
		d.requeueWithin(HiddenPodsRecheck)
	}
	started := d.bakeRecorded()
	start := d.now.Time
	if started {
		start = d.st.BakeStartedAt.Time
	}
	if r := d.st.RetryStartedAt; r != nil && r.After(start) {
		start = r.Time
	}
	verdict := d.bakeVersion().Judge(d.obs.Pods, start, d.now.Time)
	if verdict.Failure != "" {
		// Judged: the rollback that follows reads no pods.
		d.plan.WatchesPods = false
		d.bakeFailed(verdict.Failure)
		return
	}
	if !started && verdict.Serving {
		now := d.now
		d.st.BakeStartedAt = &now
		// The target carries the desired pointer (rollout checked it):
		// the bake is of that spec. Without this, a pass whose Deployment
		// completed before any status recorded the apply (the apply's
		// status write was lost) would begin the bake again every pass.
		d.st.AppliedSpecHash = d.hash
		started = true
	}
	if d.old.Phase != v1alpha1.PhaseRollingOut || !conditionIs(d.old, v1alpha1.ReconcilingCondition, metav1.ConditionTrue, v1alpha1.BakingReason) {
		d.event(corev1.EventTypeNormal, v1alpha1.BakingReason, EventMsgBaking)
	}
	d.st.Phase = v1alpha1.PhaseRollingOut
	switch {
	case !started:
		d.st.BakeStartedAt = nil
		// No timer: the pod that turns Ready wakes the model through the
		// pod store's watch.
		d.bakeWait = bakeWaitNoPods
		d.conditions(bakingNoPodsTuple, reconciling)
		return
	case verdict.NodeNotReady:
		d.bakeWait = bakeWaitNode
		d.conditions(bakingNodeNotReadyTuple, reconciling)
	case !verdict.Serving:
		d.bakeWait = bakeWaitNoPods
		d.conditions(bakingNoPodsTuple, reconciling)
	default:
		d.conditions(bakingTuple, reconciling)
	}
	end := d.st.BakeStartedAt.Add(time.Duration(d.desired.RolloutStrategy.BakeSeconds) * time.Second)
	if !d.now.Before(&metav1.Time{Time: end}) && complete && d.bakeWait == "" {
		if !d.obs.PodsRead {
			// The version is retained once Ready: the verdict that it
			// served its bake without a failure is taken on the pods as
			// the API server has them now, not as a store that can trail
			// it by a broken watch (Plan.ReadPods).
			d.plan.ReadPods = true
			return
		}
		// The version served its bake: a Ready version reads no pods.
		d.plan.WatchesPods = false
		d.rolloutSucceeded()
		return
	}
	// No polling: the end of the bake, or the end of a pod's grace; every
	// pod change wakes the resource through its watch.
	if wait := end.Sub(d.now.Time); wait > 0 {
		// The status keeps the start to the second, earlier than it was:
		// the pass this wakes finds the bake over.
		d.requeueWithin(wait + 100*time.Millisecond)
	}
	if verdict.Recheck > 0 {
		d.requeueWithin(verdict.Recheck)
	}
}

// What a bake waits for besides its time (decider.bakeWait): the
// Reconciling message says it.
const (
	bakeWaitNoPods = "NoPods"
	bakeWaitNode   = "NodeNotReady"
)

// bakeVersion is the desired version as the bake judges its pods.
func (d *decider) bakeVersion() BakeVersion {
	v := BakeVersion{Namespace: namespaceOf(d.obj), ReplicaSets: d.obs.ReplicaSets, Container: d.desired.TargetRef.ContainerName,
		ManifestHash: d.st.ManifestHash, NotReadyNodes: d.obs.NotReadyNodes}
	if r := d.st.RetryStartedAt; r != nil {
		v.RetryStartedAt = r.Time
	}
	return v
}

// bakeFailed is a failed bake: a failed rollout, rolled back to the newest
// retained version (which the baking version is not yet), with the reason
// in the event, the Degraded condition and the plan.
func (d *decider) bakeFailed(reason string) {
	d.plan.BakeFailure = reason
	d.rolloutFailedWith(fmt.Sprintf(EventMsgBakeFailed, reason), v1alpha1.BakeFailedReason, MsgBakeFailed)
}

// BakeVersion is the version a bake judges: the target Deployment, the
// model's container in it and the version's manifest hash.
type BakeVersion struct {
	// Namespace is the model's namespace and ReplicaSets the target
	// Deployment's ReplicaSets (Observed.ReplicaSets): only pods of that
	// namespace one of them controls count (OwnedByTarget).
	Namespace   string
	ReplicaSets []types.UID
	// Container is the model's container (targetRef.containerName).
	Container string
	// ManifestHash is the baking version's manifest hash (the pod
	// template's openmed.ai/model-manifest-hash annotation).
	ManifestHash string
	// NotReadyNodes are the nodes the reconciler found not Ready (or
	// unreachable) among those of the version's unready pods.
	NotReadyNodes []string
	// RetryStartedAt is when a reset retried the version (zero: no
	// retry). A termination of the model container that finished before
	// it is the failure the reset retries; without a retry every
	// termination of a pod of the version counts, however soon after
	// Ready it came (before the pass that begins the bake, too).
	RetryStartedAt time.Time
}

// BakeVerdict is what the pods say of a bake at one moment.
type BakeVerdict struct {
	// Failure is the reason the bake fails (BakeContainerRestarted,
	// BakeOOMKilled, BakePodUnready), or "".
	Failure string
	// Recheck is how long until a pod's unready grace ends (0: none
	// pending).
	Recheck time.Duration
	// NodeNotReady is true while a pod of the version is unready on a node
	// that is not Ready: the cluster's failure, which the bake waits out.
	NodeNotReady bool
	// Serving is true when a pod of the version is Ready: a bake neither
	// begins nor ends without one (replicas 0, or pods the pod store
	// cannot see, bake nothing).
	Serving bool
}

// OwnedByTarget reports whether the pod belongs to the target Deployment
// as Kubernetes' own controllers decide it: it is in namespace (the
// model's) and its controller reference is a ReplicaSet whose UID is among
// replicaSets, the target's ReplicaSets (Observed.ReplicaSets, each
// verified to be controlled by the Deployment's UID). A pod that only
// carries the model's annotations, the template's labels or a ReplicaSet's
// name — a copy of the pod template in another namespace, say — does not.
func OwnedByTarget(p *corev1.Pod, namespace string, replicaSets []types.UID) bool {
	if p.Namespace != namespace {
		return false
	}
	ref := metav1.GetControllerOfNoCopy(p)
	return ref != nil && ref.Kind == "ReplicaSet" && ref.APIVersion == appsv1.SchemeGroupVersion.String() && slices.Contains(replicaSets, ref.UID)
}

// BakePodSelector selects the pods the pass that ends a bake reads from
// the API server (Plan.ReadPods): those targetPods (the target
// Deployment's spec.selector; nil: not known) selects, with the bake label
// and the pod template hash of the pods among pods (the pods the pass
// judged) that carry manifestHash and belong to the target
// (OwnedByTarget with namespace and replicaSets). The target's selector
// keeps the read to its own pods: Deployments of the same pod template
// share the hash. It returns nil when pods has none: no pod of the version
// is Ready, and the bake does not end.
func BakePodSelector(targetPods labels.Selector, pods []corev1.Pod, namespace string, replicaSets []types.UID, manifestHash string) labels.Selector {
	var hashes []string
	for i := range pods {
		p := &pods[i]
		hash := p.Labels[appsv1.DefaultDeploymentUniqueLabelKey]
		if hash != "" && p.Annotations[v1alpha1.ManifestHashAnnotation] == manifestHash && OwnedByTarget(p, namespace, replicaSets) {
			hashes = append(hashes, hash)
		}
	}
	if len(hashes) == 0 {
		return nil
	}
	slices.Sort(hashes)
	hash, err := labels.NewRequirement(appsv1.DefaultDeploymentUniqueLabelKey, selection.In, slices.Compact(hashes))
	if err != nil {
		return nil
	}
	if sel := TargetBakePodSelector(targetPods); sel != nil {
		return sel.Add(*hash)
	}
	return nil
}

// TargetBakePodSelector selects the pods a pass reads from the API server
// when the pod store cannot see the target's pods (Observed.PodsHidden):
// those targetPods (the target's spec.selector; nil: not known) selects
// that carry the bake label.
func TargetBakePodSelector(targetPods labels.Selector) labels.Selector {
	bake, err := labels.NewRequirement(v1alpha1.BakeLabel, selection.Equals, []string{"true"})
	if err != nil {
		return nil
	}
	if targetPods == nil {
		targetPods = labels.NewSelector()
	}
	return targetPods.Add(*bake)
}

// retried reports whether a termination that finished at finished is from
// before the reset that retries the version. Both times have a resolution
// of a second (finishedAt from the kubelet, RetryStartedAt as the status
// keeps it): a termination in the reset's own second is the failure the
// reset retries — the person asked for the retry after seeing it.
func (v BakeVersion) retried(finished time.Time) bool {
	if v.RetryStartedAt.IsZero() || finished.IsZero() {
		return false
	}
	return !finished.Truncate(time.Second).After(v.RetryStartedAt.Truncate(time.Second))
}

// Judge returns what the pods of v say of the bake that began at start
// (the bake's own start, or the retry's): see docs/bake-guard.md for what
// counts.
func (v BakeVersion) Judge(pods []corev1.Pod, start, now time.Time) BakeVerdict {
	var out BakeVerdict
	for i := range pods {
		p := &pods[i]
		if p.DeletionTimestamp != nil || p.Annotations[v1alpha1.ManifestHashAnnotation] != v.ManifestHash || !OwnedByTarget(p, v.Namespace, v.ReplicaSets) {
			continue
		}
		if p.Status.Phase == corev1.PodFailed || disrupted(p) {
			// The kubelet evicted the pod or stopped it for a node
			// shutdown, or the pod is about to go (a DisruptionTarget):
			// its ReplicaSet replaces it; its containers did not fail.
			continue
		}
		for _, c := range p.Status.ContainerStatuses {
			if c.Name != v.Container {
				continue
			}
			for _, t := range []*corev1.ContainerStateTerminated{c.LastTerminationState.Terminated, c.State.Terminated} {
				if t == nil || v.retried(t.FinishedAt.Time) {
					// Before the reset that retries the version: the
					// failure it retries, judged by the bake that failed.
					continue
				}
				if t.Reason == "OOMKilled" {
					out.Failure = BakeOOMKilled
				} else {
					out.Failure = BakeContainerRestarted
				}
				return out
			}
		}
		ready := readyCondition(p)
		if ready == nil {
			continue
		}
		if ready.Status == corev1.ConditionTrue {
			out.Serving = true
			continue
		}
		if p.Spec.NodeName != "" && slices.Contains(v.NotReadyNodes, p.Spec.NodeName) {
			out.NodeNotReady = true
			continue
		}
		since := ready.LastTransitionTime.Time
		if !p.CreationTimestamp.Time.Before(start) && !readyOnce(p, ready) {
			// Started during the bake (a scale-up) and never Ready yet:
			// warming up is no failure. Both times have a resolution of a
			// second; a pod of the same second counts as new.
			continue
		}
		if since.Before(start) {
			// Unready when the bake began (the pod store can lag the
			// Deployment the bake started on): the grace counts from the
			// start.
			since = start
		}
		if left := since.Add(BakeUnreadyGrace).Sub(now); left > 0 {
			if out.Recheck == 0 || left < out.Recheck {
				out.Recheck = left
			}
			continue
		}
		out.Failure = BakePodUnready
		return out
	}
	return out
}

// PodReady reports whether the pod's Ready condition is True.
func PodReady(p *corev1.Pod) bool {
	c := readyCondition(p)
	return c != nil && c.Status == corev1.ConditionTrue
}

// readyCondition is the pod's Ready condition, or nil.
func readyCondition(p *corev1.Pod) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == corev1.PodReady {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// readyOnce reports whether an unready pod was Ready before: its model
// container started and the Ready condition turned False after the
// container began running, which a pod that is still starting never shows.
func readyOnce(p *corev1.Pod, ready *corev1.PodCondition) bool {
	for _, c := range p.Status.ContainerStatuses {
		if r := c.State.Running; r != nil && c.Started != nil && *c.Started && ready.LastTransitionTime.Time.After(r.StartedAt.Time) {
			return true
		}
	}
	return false
}

// disrupted reports a DisruptionTarget condition: the pod is about to be
// deleted by an eviction, a preemption or the taint eviction controller,
// or the kubelet stopped it.
func disrupted(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}
