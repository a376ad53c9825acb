package e2e_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	kstatus "github.com/fluxcd/cli-utils/pkg/kstatus/status"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/health"
	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// availability watches a Deployment and records the lowest
// availableReplicas and whether it reported ProgressDeadlineExceeded. A watch
// sees every state the API server stores, so a short dip cannot slip between
// two polls.
type availability struct {
	mu               sync.Mutex
	minAvailable     int32
	events           int
	deadlineExceeded bool
	stop             func()
	done             chan struct{}
}

func watchAvailability(t *testing.T, ns, name string) *availability {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := k8s.Watch(ctx, &appsv1.DeploymentList{}, client.InNamespace(ns), client.MatchingFields{"metadata.name": name})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	a := &availability{minAvailable: -1, done: make(chan struct{})}
	a.stop = func() { cancel(); w.Stop(); <-a.done }
	t.Cleanup(a.stop)
	go func() {
		defer close(a.done)
		for ev := range w.ResultChan() {
			d, ok := ev.Object.(*appsv1.Deployment)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			a.mu.Lock()
			a.events++
			if a.minAvailable < 0 || d.Status.AvailableReplicas < a.minAvailable {
				a.minAvailable = d.Status.AvailableReplicas
			}
			for _, c := range d.Status.Conditions {
				if c.Type == appsv1.DeploymentProgressing && c.Reason == v1alpha1.ProgressDeadlineExceededReason {
					a.deadlineExceeded = true
				}
			}
			a.mu.Unlock()
		}
	}()
	return a
}

// result stops the watch and returns what it saw.
func (a *availability) result() (minAvailable int32, events int, deadlineExceeded bool) {
	a.stop()
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.minAvailable, a.events, a.deadlineExceeded
}

// TestAutomaticRollback: a version whose pods never become ready makes the
// real deployment controller report ProgressDeadlineExceeded; the operator
// restores the last good pointer. With maxUnavailable 0 the old pods serve
// throughout: availableReplicas never drops below the desired 2.
func TestAutomaticRollback(t *testing.T) {
	requireCluster(t)
	t.Parallel()
	ns := newNamespace(t)
	readyModel(t, ns, v1, "", nil)
	good := read(t, ns)
	goodHash := good.d.Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation]
	goodCM := pointerConfigMap(t, good.d).Name

	watcher := watchAvailability(t, ns, modelName)
	setVersion(t, ns, brokenVersion)
	waitState(t, ns, "the broken version rolling out", func(s state) bool {
		return s.snap.Observed() && s.m.Status.Phase == v1alpha1.PhaseRollingOut &&
			s.d.Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation] != goodHash
	})
	s := waitState(t, ns, "rolled back and held", func(s state) bool {
		return s.snap.Observed() && s.m.Status.Phase == v1alpha1.PhaseRolledBack && s.snap.KStatus == kstatus.FailedStatus && settled(s.d)
	})
	minAvailable, events, deadlineExceeded := watcher.result()

	if !deadlineExceeded {
		t.Error("the Deployment never reported ProgressDeadlineExceeded")
	}
	if events == 0 || minAvailable < 2 {
		t.Errorf("availableReplicas fell to %d during the failed rollout (%d watch events), want never below 2", minAvailable, events)
	}
	for cond, want := range map[string]string{
		v1alpha1.ReadyCondition:      "False/" + v1alpha1.RolledBackReason,
		v1alpha1.StalledCondition:    "True/" + v1alpha1.RolledBackReason,
		v1alpha1.RolledBackCondition: "True/" + v1alpha1.RollbackSucceededReason,
	} {
		if got := s.snap.Condition(cond); got != want {
			t.Errorf("%s = %s, want %s", cond, got, want)
		}
	}
	if s.snap.Health.Code != health.Degraded {
		t.Errorf("Argo CD health = %s, want Degraded", s.snap.Health.Code)
	}
	if s.m.Status.ActiveVersion != v1 || s.m.Status.FailedSpecHash == "" {
		t.Errorf("active %q failed spec hash %q, want v1 active and the broken spec recorded", s.m.Status.ActiveVersion, s.m.Status.FailedSpecHash)
	}
	if got := s.d.Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation]; got != goodHash {
		t.Errorf("template hash after the rollback = %s, want v1's %s", got, goodHash)
	}
	if name := pointerConfigMap(t, s.d).Name; name != goodCM {
		t.Errorf("pointer after the rollback = %s, want %s", name, goodCM)
	}
	eventually(t, "only v1 pods left", func() (bool, string) {
		got := podHashes(t, ns)
		return got[goodHash] == 2 && len(got) == 1, fmt.Sprint(got)
	})

	// Reverting the spec in Git clears the failure.
	setVersion(t, ns, v1)
	waitServing(t, ns, v1)
}

// TestManualRollback: the rollback-to annotation rolls the pods back to a
// retained version and holds them there; removing it serves the desired spec
// again.
func TestManualRollback(t *testing.T) {
	requireCluster(t)
	t.Parallel()
	ns := newNamespace(t)
	readyModel(t, ns, v1, "", nil)
	v1Hash := read(t, ns).d.Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation]
	setVersion(t, ns, v2)
	v2Hash := waitServing(t, ns, v2).d.Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation]

	annotate(t, ns, v1alpha1.RollbackToAnnotation, v1)
	// Held: the Deployment settled on v1 and the model says the rollback
	// succeeded (the pass that sees the Deployment settle comes a moment
	// after the Deployment does).
	s := waitState(t, ns, "held at v1", func(s state) bool {
		return s.snap.Observed() && s.m.Status.Phase == v1alpha1.PhaseRolledBack && s.m.Status.ActiveVersion == v1 && settled(s.d) &&
			s.snap.Condition(v1alpha1.RolledBackCondition) == "True/"+v1alpha1.RollbackSucceededReason
	})
	if got := s.d.Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation]; got != v1Hash {
		t.Errorf("template hash = %s, want v1's %s", got, v1Hash)
	}
	if cm := pointerConfigMap(t, s.d); cm.Data[v1alpha1.PreloadEnvVar] != v1 {
		t.Errorf("pointer names %q, want v1", cm.Data[v1alpha1.PreloadEnvVar])
	}
	eventually(t, "every pod back on v1", func() (bool, string) {
		got := podHashes(t, ns)
		return got[v1Hash] == 2 && len(got) == 1, fmt.Sprint(got)
	})

	annotate(t, ns, v1alpha1.RollbackToAnnotation, "")
	s = waitServing(t, ns, v2)
	if got := s.d.Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation]; got != v2Hash {
		t.Errorf("after the release the template hash = %s, want v2's %s", got, v2Hash)
	}
}
