package rollout

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// DeploymentReady is the reference's readiness predicate (§3.6): the
// Deployment has seen generation g and runs replicas updated, ready and
// available pods with none unavailable. It deliberately ignores the
// Deployment's conditions and status.replicas.
func DeploymentReady(d *appsv1.Deployment, replicas int32, g int64) bool {
	s := d.Status
	return d.Generation >= g && s.ObservedGeneration >= g &&
		s.UpdatedReplicas >= replicas && s.ReadyReplicas >= replicas &&
		s.AvailableReplicas >= replicas && s.UnavailableReplicas == 0
}

// DeploymentFailed is the reference's failure predicate (§3.6): Progressing
// is False with ProgressDeadlineExceeded, or ReplicaFailure is True. A status
// older than generation g never counts, so a failure left from before the
// operator's last change is not blamed on it.
func DeploymentFailed(d *appsv1.Deployment, g int64) bool {
	if d.Status.ObservedGeneration < g {
		return false
	}
	for _, c := range d.Status.Conditions {
		switch {
		case c.Type == appsv1.DeploymentProgressing && c.Status == corev1.ConditionFalse && c.Reason == "ProgressDeadlineExceeded":
			return true
		case c.Type == appsv1.DeploymentReplicaFailure && c.Status == corev1.ConditionTrue:
			return true
		}
	}
	return false
}

// desiredReplicas is the replica count readiness waits for: the spec's when
// it manages replicas, else the Deployment's own (1 when unset, the API
// default).
func desiredReplicas(replicas *int32, d *appsv1.Deployment) int32 {
	switch {
	case replicas != nil:
		return *replicas
	case d.Spec.Replicas != nil:
		return *d.Spec.Replicas
	}
	return 1
}
