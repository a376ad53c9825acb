package rollout

import (
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The Deployment predicates below read only what the Deployment controller
// wrote about the Deployment's current spec, never what the operator
// remembers, so a lost status write or a restart cannot make a version look
// ready that did not roll out.

// ControllerObserved reports whether the Deployment controller has seen the
// Deployment's current generation: until then its status describes an
// older spec and says nothing about the pointer the operator applied.
func ControllerObserved(d *appsv1.Deployment) bool {
	return d.Status.ObservedGeneration >= d.Generation
}

// RolloutComplete is `kubectl rollout status` success: the controller saw
// the current generation, every desired replica runs the current pod
// template, no pod of an old template is left, and every updated pod is
// available.
func RolloutComplete(d *appsv1.Deployment) bool {
	s := d.Status
	return ControllerObserved(d) && s.UpdatedReplicas >= specReplicas(d) &&
		s.Replicas <= s.UpdatedReplicas && s.AvailableReplicas >= s.UpdatedReplicas
}

// deadlineCondition is the Deployment's Progressing=False condition with
// ProgressDeadlineExceeded for its current generation, or nil.
func deadlineCondition(d *appsv1.Deployment) *appsv1.DeploymentCondition {
	return conditionOf(d, appsv1.DeploymentProgressing)
}

// replicaFailureCondition is the Deployment's ReplicaFailure=True
// condition for its current generation, or nil. The Deployment controller
// copies it from the new ReplicaSet, or from an old one when the new one
// has none; its times are the ReplicaSet condition's transition.
func replicaFailureCondition(d *appsv1.Deployment) *appsv1.DeploymentCondition {
	return conditionOf(d, appsv1.DeploymentReplicaFailure)
}

// conditionOf is the failure condition of type t for the current
// generation, or nil.
func conditionOf(d *appsv1.Deployment, t appsv1.DeploymentConditionType) *appsv1.DeploymentCondition {
	if !ControllerObserved(d) {
		return nil
	}
	for i, c := range d.Status.Conditions {
		if c.Type == t && isFailure(c) {
			return &d.Status.Conditions[i]
		}
	}
	return nil
}

// isFailure reports a condition that says the rollout failed.
func isFailure(c appsv1.DeploymentCondition) bool {
	switch c.Type {
	case appsv1.DeploymentProgressing:
		return c.Status == corev1.ConditionFalse && c.Reason == "ProgressDeadlineExceeded"
	case appsv1.DeploymentReplicaFailure:
		return c.Status == corev1.ConditionTrue
	}
	return false
}

// appliedAt is when manager last changed the Deployment by server-side
// apply: the time of its managedFields entry, which the API server sets by
// its own clock. Zero when there is none (or a cache dropped it).
func appliedAt(d *appsv1.Deployment, manager string) time.Time {
	var at time.Time
	for _, e := range d.ManagedFields {
		if e.Manager == manager && e.Operation == metav1.ManagedFieldsOperationApply && e.Subresource == "" && e.Time != nil && e.Time.After(at) {
			at = e.Time.Time
		}
	}
	return at
}

// progressDeadlineExceeded reports the one failure the Deployment
// controller reports on its own: the current generation made no progress
// within progressDeadlineSeconds (Progressing=False,
// ProgressDeadlineExceeded). gitops-engine (Argo CD) and kstatus call only
// this a failed Deployment.
func progressDeadlineExceeded(d *appsv1.Deployment) bool {
	return deadlineCondition(d) != nil
}

// replicaFailure reports a ReplicaSet that cannot create pods (a quota, an
// admission webhook) for the current generation. Argo CD and kstatus read
// it as progress, and so does the model until the progress deadline
// (refusals.go).
func replicaFailure(d *appsv1.Deployment) bool {
	return replicaFailureCondition(d) != nil
}

// oldTemplatePods reports pods of an older pod template: a rollout of the
// template is under way. Pods missing from the current template alone (a
// scale-up) are not one.
func oldTemplatePods(d *appsv1.Deployment) bool {
	return d.Status.Replicas > d.Status.UpdatedReplicas
}

// specReplicas is the Deployment's desired replica count (1 when unset, the
// API default).
func specReplicas(d *appsv1.Deployment) int32 {
	if d.Spec.Replicas != nil {
		return *d.Spec.Replicas
	}
	return 1
}
