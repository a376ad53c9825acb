package rollout

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// markRollingWithReplicaFailure is the new ReplicaSet's rollout under way
// with the ReplicaFailure the Deployment controller copies from a
// ReplicaSet whose pod create was refused (a quota) at began: both its
// times are the ReplicaSet condition's transition.
func (c *cluster) markRollingWithReplicaFailure(began time.Time) {
	c.setDeploymentStatus(func(d *appsv1.Deployment) {
		n := ptr.Deref(d.Spec.Replicas, 1)
		at := metav1.NewTime(began)
		d.Status = appsv1.DeploymentStatus{
			ObservedGeneration: d.Generation,
			Replicas:           n, UpdatedReplicas: 0, ReadyReplicas: n, AvailableReplicas: n,
			Conditions: []appsv1.DeploymentCondition{
				{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable"},
				{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetCreated"},
				{Type: appsv1.DeploymentReplicaFailure, Status: corev1.ConditionTrue, Reason: "FailedCreate",
					Message:        `pods "openmed-service-7c9d8f6b5-x2xk4" is forbidden: exceeded quota: gpu, requested: requests.nvidia.com/gpu=1, used: requests.nvidia.com/gpu=2, limited: requests.nvidia.com/gpu=2`,
					LastUpdateTime: at, LastTransitionTime: at},
			},
		}
	})
}

// TestReplicaFailure: a ReplicaFailure fails the model's rollout only when
// it is the rollout's (it began no earlier than the operator's apply, by
// the cluster's clocks) and lasted ReplicaFailureGrace; otherwise the
// rollout goes on, and its message carries the Deployment controller's
// (issue 26, item 7; before, the first pass that saw one rolled back with
// "exceeded its deadline").
func TestReplicaFailure(t *testing.T) {
	t.Run("the rollout's, within the grace: progress with the controller's message, one timer", func(t *testing.T) {
		c := newCluster(t)
		c.readyAt(v1)
		c.setVersion(v2)
		c.pass()
		began := time.Now()
		c.markRollingWithReplicaFailure(began)
		c.now = began.Add(5 * time.Second)
		p := c.pass()
		if p.Status.Phase != v1alpha1.PhaseRollingOut || len(p.Events) != 0 {
			t.Fatalf("within the grace: %s events %v %v", p.Status.Phase, eventReasons(p.Events), condSummary(p.Status))
		}
		if m := kstatusMessage(p.Status); !strings.Contains(m, "ReplicaFailure") || !strings.Contains(m, "exceeded quota") {
			t.Errorf("message %q does not say why", m)
		}
		if p.RequeueAfter <= 0 || p.RequeueAfter > ReplicaFailureGrace {
			t.Errorf("requeue after %v, want the end of the grace", p.RequeueAfter)
		}
		if got := kstatusOf(t, c.obj, p.Status); got != "InProgress" {
			t.Errorf("kstatus %s", got)
		}
		// It lasted: a failed rollout, rolled back.
		c.now = began.Add(ReplicaFailureGrace + time.Second)
		if p := c.pass(); p.Status.Phase != v1alpha1.PhaseRolledBack {
			t.Fatalf("past the grace: %s %v", p.Status.Phase, condSummary(p.Status))
		}
	})

	t.Run("the rollout's, cleared within the grace (a surge waiting for an old pod): Ready", func(t *testing.T) {
		c := newCluster(t)
		c.readyAt(v1)
		c.setVersion(v2)
		c.pass()
		began := time.Now()
		c.markRollingWithReplicaFailure(began)
		c.now = began.Add(ReplicaFailureGrace / 2)
		if p := c.pass(); p.Status.Phase != v1alpha1.PhaseRollingOut {
			t.Fatalf("within the grace: %s %v", p.Status.Phase, condSummary(p.Status))
		}
		c.markReady()
		c.now = began.Add(2 * ReplicaFailureGrace)
		if p := c.pass(); p.Status.Phase != v1alpha1.PhaseReady || p.Status.ActiveVersion != v2 {
			t.Fatalf("after it cleared: %s %v", p.Status.Phase, condSummary(p.Status))
		}
	})

	t.Run("an old ReplicaSet's, from before the rollout (an HPA's scale-up hit the quota): progress, however long", func(t *testing.T) {
		c := newCluster(t)
		c.readyAt(v1)
		began := time.Now().Add(-time.Minute)
		c.setVersion(v2)
		c.pass()
		c.markRollingWithReplicaFailure(began)
		c.now = time.Now().Add(10 * ReplicaFailureGrace)
		p := c.pass()
		if p.Status.Phase != v1alpha1.PhaseRollingOut || len(p.Events) != 0 {
			t.Fatalf("an older ReplicaSet's failure: %s events %v %v", p.Status.Phase, eventReasons(p.Events), condSummary(p.Status))
		}
		// The progress deadline, not the ReplicaFailure, fails it.
		c.markFailed()
		if p := c.pass(); p.Status.Phase != v1alpha1.PhaseRolledBack {
			t.Fatalf("the deadline passed: %s %v", p.Status.Phase, condSummary(p.Status))
		}
	})
}
