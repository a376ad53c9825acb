package e2e_test

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// minReadySeconds slows the target's rollout down (a pod counts as available
// only that long after it is ready), so the operator can be killed while one
// is in flight.
const minReadySeconds = 4

// TestOperatorKilledMidRollout: the operator gets SIGKILL while an upgrade
// rolls out and is started again. The new process resumes from the status
// and the cluster alone: it reaches Ready without touching the pod template
// again (no new Deployment generation, no new ReplicaSet).
func TestOperatorKilledMidRollout(t *testing.T) {
	requireCluster(t)
	t.Parallel()
	ctx := context.Background()
	op, err := launchOperator(ctx, "restart-1", operatorLabel+"=restart")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = op.Kill() })
	ns := newNamespace(t)
	readyModel(t, ns, v1, "restart", func(d *appsv1.Deployment) { d.Spec.MinReadySeconds = minReadySeconds })

	setVersion(t, ns, v2)
	mid := waitState(t, ns, "the upgrade in flight", func(s state) bool {
		return s.snap.Observed() && s.m.Status.Phase == v1alpha1.PhaseRollingOut && s.m.Status.DesiredVersion == v2 &&
			s.d.Status.ObservedGeneration == s.d.Generation && s.d.Status.UpdatedReplicas >= 1 && !settled(s.d)
	})
	if err := op.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := read(t, ns)
	generation := killed.d.Generation
	hash := killed.d.Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation]
	replicaSets := countReplicaSets(t, ns)
	t.Logf("killed the operator at %s", mid)

	// Nobody updates the status while the operator is down.
	time.Sleep(time.Second)
	if s := read(t, ns); s.m.Status.Phase != v1alpha1.PhaseRollingOut {
		t.Fatalf("phase %s with no operator running", s.m.Status.Phase)
	}
	op2, err := launchOperator(ctx, "restart-2", operatorLabel+"=restart")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = op2.Kill() })

	s := waitServing(t, ns, v2)
	if s.d.Generation != generation {
		t.Errorf("Deployment generation %d -> %d: the restarted operator changed the Deployment spec again", generation, s.d.Generation)
	}
	if got := s.d.Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation]; got != hash {
		t.Errorf("template hash %s -> %s after the restart", hash, got)
	}
	if got := countReplicaSets(t, ns); got != replicaSets {
		t.Errorf("%d ReplicaSets after the restart, %d before: the pods rolled again", got, replicaSets)
	}
	if len(s.m.Status.History) != 2 || s.m.Status.History[0].Version != v2 {
		t.Errorf("history after the restart = %+v", s.m.Status.History)
	}
}

func countReplicaSets(t *testing.T, ns string) int {
	t.Helper()
	var list appsv1.ReplicaSetList
	if err := k8s.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	return len(list.Items)
}
