package e2e_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/localrun"
)

// bakeSeconds is the bake of the e2e bake tests.
const bakeSeconds = 20

// TestBake runs the bake guard on the real Deployment controller with kwok
// playing the kubelet: a version whose containers restart 5 s after they
// became Ready is rolled back by the pass that sees the restart and never
// applied again; a healthy version is Ready bakeSeconds after its rollout
// completed; a scale-up during the bake does not fail it.
func TestBake(t *testing.T) {
	requireCluster(t)
	t.Parallel()

	// A crash after warm-up is rolled back by the pass that sees it.
	t.Run("crash-after-warm-up", func(t *testing.T) {
		t.Parallel()
		ns := newNamespace(t)
		readyModel(t, ns, v1, "", nil)
		v1Hash, crashHash := hashOf(t, v1), hashOf(t, crashingVersion)
		rec := watchBake(t, ns, crashHash)
		bakeVersion(t, ns, crashingVersion)
		rolledBack := waitState(t, ns, "rolled back to "+v1, func(s state) bool {
			return s.snap.Observed() && s.m.Status.Phase == v1alpha1.PhaseRolledBack && s.m.Status.ActiveVersion == v1 && settled(s.d) &&
				apimeta.IsStatusConditionTrue(s.m.Status.Conditions, v1alpha1.StalledCondition)
		})
		// Longer than the bake: a failed spec that came back would show.
		time.Sleep((bakeSeconds + 5) * time.Second)
		rec.stop()

		restartRV, restartAt := rec.restart()
		if restartRV == 0 {
			t.Fatal("no restart of the crashing version's pods was seen")
		}
		// The first status the operator wrote after the restart was
		// reported (resourceVersions order etcd's writes) is the rollback:
		// no pass in between went on baking.
		next, ok := rec.firstModelAfter(restartRV)
		if !ok || next.phase != v1alpha1.PhaseRolledBack || next.degraded != v1alpha1.BakeFailedReason {
			t.Errorf("the first status after the restart (rv %d): %+v, want RolledBack with Degraded=%s", restartRV, next, v1alpha1.BakeFailedReason)
		}
		if !rec.sawBaking() {
			t.Error("the model never reported Baking before the restart")
		}
		t.Logf("restart reported %s after the apply; rollback recorded %s after the restart",
			restartAt.Sub(rec.began).Round(100*time.Millisecond), next.at.Sub(restartAt).Round(10*time.Millisecond))
		if got, want := rec.templates(), []string{v1Hash, crashHash, v1Hash}; !slices.Equal(got, want) {
			t.Errorf("pod templates %v, want %v: the failed version must be applied once and never again", got, want)
		}
		st := read(t, ns).m.Status
		if st.History[0].Version != v1 || st.ActiveVersion != v1 || slices.ContainsFunc(st.History, func(h v1alpha1.HistoryEntry) bool { return h.Version == crashingVersion }) {
			t.Errorf("history %v, active %s: the crashing version must not be retained", st.History, st.ActiveVersion)
		}
		if st.FailedSpecHash != st.DesiredSpecHash {
			t.Errorf("failedSpecHash %s, desired %s", st.FailedSpecHash, st.DesiredSpecHash)
		}
		if hashes := podHashes(t, ns); hashes[v1Hash] != int(ptr.Deref(rolledBack.d.Spec.Replicas, 0)) || len(hashes) != 1 {
			t.Errorf("pods by manifest hash %v, want only %s", hashes, v1Hash)
		}
		if msgs := recordedEvents(t, ns, v1alpha1.RolloutFailedReason, 1); len(msgs) != 1 || !strings.Contains(msgs[0], "ContainerRestarted") {
			t.Errorf("RolloutFailed events %q, want one naming ContainerRestarted", msgs)
		}
	})

	// A healthy version is Ready bakeSeconds after its rollout completed.
	t.Run("healthy", func(t *testing.T) {
		t.Parallel()
		ns := newNamespace(t)
		readyModel(t, ns, v1, "", nil)
		rec := watchBake(t, ns, hashOf(t, v2))
		bakeVersion(t, ns, v2)
		s := waitState(t, ns, "Ready at "+v2+" after the bake", func(s state) bool {
			return s.snap.Observed() && s.m.Status.Phase == v1alpha1.PhaseReady && s.m.Status.ActiveVersion == v2 && settled(s.d) &&
				len(s.m.Status.History) > 0 && s.m.Status.History[0].Version == v2
		})
		rec.stop()
		if !rec.sawBaking() {
			t.Error("the model never reported Baking")
		}
		// Both times are the API's (seconds): when the Deployment said its
		// new ReplicaSet is available, and when the model retained v2.
		complete := deploymentCompleteAt(t, s.d)
		baked := s.m.Status.History[0].ReadyAt.Time.Sub(complete)
		t.Logf("rollout complete at %s, Ready and retained %s later", complete.Format(time.RFC3339), baked)
		// Not Ready before the bake ended (both times have a resolution of
		// a second); how much later is the machine's load, not asserted.
		if baked < (bakeSeconds-1)*time.Second {
			t.Errorf("Ready %s after the rollout completed, before the bake of %ds ended", baked, bakeSeconds)
		}
		if n := len(eventMessages(t, ns, v1alpha1.RolloutFailedReason)); n != 0 {
			t.Errorf("%d RolloutFailed events", n)
		}
	})

	// A scale-up during the bake does not fail it.
	t.Run("scale-up-during-bake", func(t *testing.T) {
		t.Parallel()
		ns := newNamespace(t)
		// An HPA owns the replicas: the chart sets 1, the model none, and
		// new pods warm up for 3 s (minReadySeconds).
		createTarget(t, ns, func(d *appsv1.Deployment) {
			d.Spec.Replicas = ptr.To[int32](1)
			d.Spec.MinReadySeconds = 3
		})
		m := newModel(t, ns, v1, "")
		m.Spec.Replicas = nil
		if err := k8s.Create(context.Background(), m); err != nil {
			t.Fatal(err)
		}
		waitServing(t, ns, v1)
		rec := watchBake(t, ns, hashOf(t, v2))
		bakeVersion(t, ns, v2)
		waitState(t, ns, "Baking", func(s state) bool {
			return s.snap.Observed() && s.snap.Condition(v1alpha1.ReconcilingCondition) == "True/"+v1alpha1.BakingReason
		})
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: modelName}}
		scale := &autoscalingv1.Scale{Spec: autoscalingv1.ScaleSpec{Replicas: 3}}
		if err := k8s.SubResource("scale").Update(context.Background(), d, client.WithSubResourceBody(scale), client.FieldOwner("kube-controller-manager")); err != nil {
			t.Fatal(err)
		}
		s := waitState(t, ns, "Ready at "+v2+" with 3 pods", func(s state) bool {
			return s.snap.Observed() && s.m.Status.Phase == v1alpha1.PhaseReady && s.m.Status.ActiveVersion == v2 &&
				ptr.Deref(s.d.Spec.Replicas, 0) == 3 && settled(s.d)
		})
		rec.stop()
		if phases := rec.phases(); slices.Contains(phases, v1alpha1.PhaseRolledBack) || slices.Contains(phases, v1alpha1.PhaseFailed) {
			t.Errorf("phases during the bake: %v", phases)
		}
		if n := len(eventMessages(t, ns, v1alpha1.RolloutFailedReason)); n != 0 {
			t.Errorf("%d RolloutFailed events", n)
		}
		if s.m.Status.History[0].Version != v2 {
			t.Errorf("history[0] = %s", s.m.Status.History[0].Version)
		}
	})
}

// hashOf is the manifest hash of the example model at version.
func hashOf(t *testing.T, version string) string {
	t.Helper()
	m, err := exampleModel()
	if err != nil {
		t.Fatal(err)
	}
	h, err := localrun.ManifestHashOf(m, version)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// bakeVersion commits version with bakeSeconds.
func bakeVersion(t *testing.T, ns, version string) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"version":%q,"rolloutStrategy":{"bakeSeconds":%d}}}`, version, bakeSeconds)
	m := &v1alpha1.OpenMedModel{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: modelName}}
	if err := k8s.Patch(context.Background(), m, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
}

// deploymentCompleteAt is when the Deployment last said its new ReplicaSet
// is available (the Progressing condition's lastUpdateTime).
func deploymentCompleteAt(t *testing.T, d *appsv1.Deployment) time.Time {
	t.Helper()
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentProgressing && c.Reason == "NewReplicaSetAvailable" {
			return c.LastUpdateTime.Time
		}
	}
	t.Fatalf("Deployment not complete: %+v", d.Status.Conditions)
	return time.Time{}
}

// modelWrite is one state of the model a watch event carried.
type modelWrite struct {
	rv       int64
	at       time.Time
	phase    v1alpha1.Phase
	degraded string
	baking   bool
}

// bakeRecorder watches the model, its Deployment and its pods while a
// version bakes.
type bakeRecorder struct {
	began time.Time
	hash  string
	stopc chan struct{}
	wg    sync.WaitGroup

	mu        sync.Mutex
	models    []modelWrite
	restartRV int64
	restartAt time.Time
	tmpl      []string
}

// watchBake starts recording for ns; hash is the baking version's manifest
// hash, whose first container restart it notes.
func watchBake(t *testing.T, ns, hash string) *bakeRecorder {
	t.Helper()
	r := &bakeRecorder{began: time.Now(), hash: hash, stopc: make(chan struct{})}
	for _, list := range []client.ObjectList{&v1alpha1.OpenMedModelList{}, &appsv1.DeploymentList{}, &corev1.PodList{}} {
		w, err := k8s.Watch(context.Background(), list, client.InNamespace(ns))
		if err != nil {
			t.Fatal(err)
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			defer w.Stop()
			for {
				select {
				case <-r.stopc:
					return
				case ev, ok := <-w.ResultChan():
					if !ok {
						return
					}
					if ev.Type != watch.Deleted {
						r.record(ev.Object)
					}
				}
			}
		}()
	}
	t.Cleanup(r.stop)
	return r
}

func (r *bakeRecorder) record(obj any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch o := obj.(type) {
	case *v1alpha1.OpenMedModel:
		rv, _ := strconv.ParseInt(o.ResourceVersion, 10, 64)
		w := modelWrite{rv: rv, at: time.Now(), phase: o.Status.Phase}
		if c := apimeta.FindStatusCondition(o.Status.Conditions, v1alpha1.DegradedCondition); c != nil && c.Status == metav1.ConditionTrue {
			w.degraded = c.Reason
		}
		if c := apimeta.FindStatusCondition(o.Status.Conditions, v1alpha1.ReconcilingCondition); c != nil && c.Reason == v1alpha1.BakingReason {
			w.baking = true
		}
		r.models = append(r.models, w)
	case *appsv1.Deployment:
		h := o.Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation]
		if len(r.tmpl) == 0 || r.tmpl[len(r.tmpl)-1] != h {
			r.tmpl = append(r.tmpl, h)
		}
	case *corev1.Pod:
		if r.restartRV != 0 || o.Annotations[v1alpha1.ManifestHashAnnotation] != r.hash {
			return
		}
		for _, c := range o.Status.ContainerStatuses {
			if c.RestartCount > 0 {
				r.restartRV, _ = strconv.ParseInt(o.ResourceVersion, 10, 64)
				r.restartAt = time.Now()
			}
		}
	}
}

func (r *bakeRecorder) stop() {
	select {
	case <-r.stopc:
	default:
		close(r.stopc)
	}
	r.wg.Wait()
}

func (r *bakeRecorder) restart() (int64, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.restartRV, r.restartAt
}

// firstModelAfter is the first state of the model written after rv.
func (r *bakeRecorder) firstModelAfter(rv int64) (modelWrite, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, w := range r.models {
		if w.rv > rv {
			return w, true
		}
	}
	return modelWrite{}, false
}

func (r *bakeRecorder) sawBaking() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.ContainsFunc(r.models, func(w modelWrite) bool { return w.baking })
}

func (r *bakeRecorder) phases() []v1alpha1.Phase {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []v1alpha1.Phase
	for _, w := range r.models {
		if len(out) == 0 || out[len(out)-1] != w.phase {
			out = append(out, w.phase)
		}
	}
	return out
}

// templates is the sequence of pod templates (manifest hashes) the
// Deployment had, from the one it had when the recorder started.
func (r *bakeRecorder) templates() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.tmpl)
}
