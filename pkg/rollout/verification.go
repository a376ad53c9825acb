package rollout

import (
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// Verification: the golden request (spec.verification). The pod template
// of a model that declares one carries the readiness gate
// v1alpha1.VerifiedCondition (withGate): its pods are not Ready, not in
// their Services' endpoints and not available to the Deployment until the
// operator sets the condition. The core decides which pods to ask
// (Plan.Verify) and judges the verdicts the pods carry; the reconciler
// sends the requests and writes the verdicts.

// PodVerification is a pod the reconciler sends the golden request to.
type PodVerification struct {
	// Pod is the pod's name, in the model's namespace.
	Pod string
	// IP is the pod's IP and Port the port the request goes to (the
	// spec's number, or its name resolved among the pod's container
	// ports); 0 when the name matches no port, which fails the pod.
	IP   string
	Port int32
	// ManifestHash is the version the pod runs.
	ManifestHash string
	// Pass is true when the model no longer declares a golden request
	// while the pod carries the gate: the pod passes without one
	// (v1alpha1.PodNotVerifiedReason).
	Pass bool
	// Was is the status of the pod's verdict before ("" for none) and
	// Since when it last changed: a verdict of the same status keeps it.
	// Probed is the verdict's lastProbeTime (zero for none): the pass's
	// view of the pod, which the reconciler compares with the verdicts it
	// wrote since.
	Was    corev1.ConditionStatus
	Since  metav1.Time
	Probed metav1.Time
}

// TemplateGated reports whether d's pod template carries the operator's
// readiness gate: its pods wait for a verdict.
func TemplateGated(d *appsv1.Deployment) bool { return d != nil && hasGate(d) }

// Gated reports whether the pod carries the operator's readiness gate.
func Gated(p *corev1.Pod) bool {
	for _, g := range p.Spec.ReadinessGates {
		if g.ConditionType == v1alpha1.VerifiedCondition {
			return true
		}
	}
	return false
}

// VerifiedCondition returns the pod's v1alpha1.VerifiedCondition, or nil.
func VerifiedCondition(p *corev1.Pod) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == v1alpha1.VerifiedCondition {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// containersReady reports whether the pod's ContainersReady condition is
// True: the kubelet's readiness probes pass, and only the gate holds it.
func containersReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.ContainersReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// verifiable reports whether p is a pod of the target, of the version
// manifestHash, gated, alive and with an IP: one the golden request can
// judge.
func (d *decider) verifiable(p *corev1.Pod, manifestHash string) bool {
	return p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodFailed && Gated(p) && p.Status.PodIP != "" &&
		p.Annotations[v1alpha1.ManifestHashAnnotation] == manifestHash &&
		OwnedByTarget(p, namespaceOf(d.obj), d.obs.ReplicaSets)
}

// verifications plans the golden requests of the pass (Plan.Verify): to
// every pod of the version the target's template carries whose containers
// are ready and that has no verdict yet; while that version bakes, again
// to each pod every intervalSeconds; and, once the version serves, again
// to a pod that failed (a failure of the version's rollout is final: the
// version is rolled back). A timer wakes the pass when the next one is
// due. Nothing is asked of a template without the gate: a model that
// serves and is verified asks nothing.
func (d *decider) verifications() {
	dep := d.obs.Deployment
	if dep == nil || !hasGate(dep) {
		return
	}
	hash := dep.Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation]
	var spec *v1alpha1.Verification
	if v := d.obj.Spec.Verification; v != nil {
		spec = v.DeepCopy()
		spec.Default()
	}
	baking := d.st.Phase == v1alpha1.PhaseRollingOut && d.st.BakeStartedAt != nil && hash == d.st.ManifestHash
	serving := d.st.Phase == v1alpha1.PhaseReady
	for i := range d.obs.Pods {
		p := &d.obs.Pods[i]
		if !d.verifiable(p, hash) || !containersReady(p) {
			continue
		}
		c := VerifiedCondition(p)
		var due time.Time
		switch {
		case c == nil:
			due = d.now.Time
		case spec == nil:
			continue
		case c.Status == corev1.ConditionTrue && baking, c.Status != corev1.ConditionTrue && serving:
			due = c.LastProbeTime.Add(time.Duration(*spec.IntervalSeconds) * time.Second)
		default:
			continue
		}
		if wait := due.Sub(d.now.Time); wait > 0 {
			d.requeueWithin(wait)
			continue
		}
		pv := PodVerification{Pod: p.Name, IP: p.Status.PodIP, ManifestHash: hash, Pass: spec == nil}
		if c != nil {
			pv.Was, pv.Since, pv.Probed = c.Status, c.LastTransitionTime, c.LastProbeTime
		}
		if spec != nil {
			pv.Port = resolvePort(p, spec.Request.Port.IntVal, spec.Request.Port.StrVal)
		}
		d.plan.Verify = append(d.plan.Verify, pv)
	}
	if len(d.plan.Verify) > 0 {
		// The verdicts decide the rollout: their watch events wake it. A
		// verdict that never came (its write failed, the process stopped)
		// is asked for again by the pass the timer wakes; the reconciler
		// does not ask a pod it is still asking.
		d.plan.WatchesPods = true
		d.requeueWithin(verifyRecheck(spec))
	}
}

// verifyRecheck is when a pass that planned golden requests looks again:
// every attempt's timeout and pause, and some more.
func verifyRecheck(spec *v1alpha1.Verification) time.Duration {
	if spec == nil {
		return 10 * time.Second
	}
	return time.Duration(*spec.Attempts)*(time.Duration(*spec.Request.TimeoutSeconds)*time.Second+time.Second) + 10*time.Second
}

// resolvePort is the request's port on p: number, or the container port
// named name; 0 when none is.
func resolvePort(p *corev1.Pod, number int32, name string) int32 {
	if name == "" {
		return number
	}
	for _, c := range p.Spec.Containers {
		for _, port := range c.Ports {
			if port.Name == name {
				return port.ContainerPort
			}
		}
	}
	return 0
}

// oldestVerifiable is the oldest pod (by creation, then name) of the
// version manifestHash that verifiable admits and match selects, or nil.
func (d *decider) oldestVerifiable(manifestHash string, match func(*corev1.Pod) bool) *corev1.Pod {
	var oldest *corev1.Pod
	for i := range d.obs.Pods {
		p := &d.obs.Pods[i]
		if !d.verifiable(p, manifestHash) || !match(p) {
			continue
		}
		if oldest == nil || p.CreationTimestamp.Before(&oldest.CreationTimestamp) ||
			(p.CreationTimestamp.Equal(&oldest.CreationTimestamp) && p.Name < oldest.Name) {
			oldest = p
		}
	}
	return oldest
}

// verificationFailure returns, for the version manifestHash, the oldest
// pod whose verdict is a failure and the verdict's message; "" for none.
func (d *decider) verificationFailure(manifestHash string) (pod, message string) {
	p := d.oldestVerifiable(manifestHash, func(p *corev1.Pod) bool {
		c := VerifiedCondition(p)
		return c != nil && c.Status == corev1.ConditionFalse && c.Reason == v1alpha1.PodVerificationFailedReason
	})
	if p == nil {
		return "", ""
	}
	return p.Name, Shorten(VerifiedCondition(p).Message, MaxRefusalMessage)
}

// failedVerification fails the desired version's rollout (or bake) at
// once when a pod of it failed the golden request, and reports whether it
// did: the event and Degraded name the pod and what its answer lacked.
func (d *decider) failedVerification() bool {
	pod, message := d.verificationFailure(d.st.ManifestHash)
	if pod == "" {
		return false
	}
	d.verificationFailed(pod, message)
	return true
}

// verificationStopped is tp for a rollout the golden request stopped:
// Progressing, which a failed rollout's tuple gives the Deployment's
// deadline, says the request's failure instead; the deadline did not pass.
func verificationStopped(tp tuple) tuple {
	if tp.degraded.reason == v1alpha1.VerificationFailedReason && tp.progressing.reason == v1alpha1.ProgressDeadlineExceededReason {
		tp.progressing = f(v1alpha1.VerificationFailedReason, MsgVerificationStopped)
	}
	return tp
}

// verificationFailed fails the desired version's rollout on pod's
// failure, message being its verdict.
func (d *decider) verificationFailed(pod, message string) {
	cause := fmt.Sprintf("pod %s of %s failed the golden request: %s", pod, d.desired.Version, message)
	d.plan.WatchesPods = false
	d.rolloutFailedWith(EventMsgVerificationFailedPrefix+cause, v1alpha1.VerificationFailedReason, MsgVerificationFailedPrefix+cause)
}

// verifyingPod is the oldest pod of the version manifestHash that is
// ready but for the gate and has no verdict yet: the one a rollout waits
// on. "" for none.
func (d *decider) verifyingPod(manifestHash string) string {
	p := d.oldestVerifiable(manifestHash, func(p *corev1.Pod) bool { return containersReady(p) && VerifiedCondition(p) == nil })
	if p == nil {
		return ""
	}
	return p.Name
}

// verifyingNote is what a rollout's or rollback's message adds while a
// pod of the template carrying manifestHash waits for its verdict.
func (d *decider) verifyingNote(manifestHash string) string {
	if pod := d.verifyingPod(manifestHash); pod != "" {
		return fmt.Sprintf("; verifying pod %s", pod)
	}
	return ""
}
