package rollout

import (
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

// DeploymentFailed reports a rollout the Deployment controller gave up on
// for the current generation: Progressing is False with
// ProgressDeadlineExceeded, or ReplicaFailure is True. A condition written
// for an older generation never counts.
func DeploymentFailed(d *appsv1.Deployment) bool {
	return failureCondition(d) != nil
}

func failureCondition(d *appsv1.Deployment) *appsv1.DeploymentCondition {
	if !ControllerObserved(d) {
		return nil
	}
	for i, c := range d.Status.Conditions {
		switch {
		case c.Type == appsv1.DeploymentProgressing && c.Status == corev1.ConditionFalse && c.Reason == "ProgressDeadlineExceeded":
			return &d.Status.Conditions[i]
		case c.Type == appsv1.DeploymentReplicaFailure && c.Status == corev1.ConditionTrue:
			return &d.Status.Conditions[i]
		}
	}
	return nil
}

// failedSince reports a failure the Deployment controller wrote at or after
// t: a retry is judged only by what happened after it started.
func failedSince(d *appsv1.Deployment, t metav1.Time) bool {
	c := failureCondition(d)
	return c != nil && !c.LastUpdateTime.Before(&t)
}

// deploymentAvailable reports whether the Deployment serves with at least
// its minimum availability (its Available condition, or, when the
// controller has written none, every desired replica available).
func deploymentAvailable(d *appsv1.Deployment) bool {
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentAvailable {
			return c.Status == corev1.ConditionTrue
		}
	}
	return d.Status.AvailableReplicas >= specReplicas(d)
}

// oldPodsRemain reports pods of an older pod template: a rollout of the
// template is under way.
func oldPodsRemain(d *appsv1.Deployment) bool {
	return d.Status.Replicas > d.Status.UpdatedReplicas || d.Status.UpdatedReplicas < specReplicas(d)
}

// specReplicas is the Deployment's desired replica count (1 when unset, the
// API default).
func specReplicas(d *appsv1.Deployment) int32 {
	if d.Spec.Replicas != nil {
		return *d.Spec.Replicas
	}
	return 1
}
