package e2e_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/minicluster"
)

// The tests of this file play a hostile tenant on the local control plane:
// one who may create objects in a namespace of its own, copies what the
// documentation says a model's pod template carries, and reads the
// manifest hash off the model's status (or computes it).

// copyTemplate creates, in namespace ns, a Deployment named as the model's
// target with the target d's pod template (the operator's annotations and
// labels included), changed by mutate: another tenant's copy.
func copyTemplate(t *testing.T, ns string, d *appsv1.Deployment, mutate func(*corev1.PodTemplateSpec)) {
	t.Helper()
	c := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: d.Name},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Selector: d.Spec.Selector.DeepCopy(), Template: *d.Spec.Template.DeepCopy()}}
	// The copy's pods refer to no ConfigMap of the victim's namespace.
	for i := range c.Spec.Template.Spec.Containers {
		c.Spec.Template.Spec.Containers[i].Env = nil
		c.Spec.Template.Spec.Containers[i].EnvFrom = nil
	}
	if mutate != nil {
		mutate(&c.Spec.Template)
	}
	if err := k8s.Create(context.Background(), c); err != nil {
		t.Fatal(err)
	}
}

// TestForgedPodsFromAnotherTenant: another tenant, without a right in the
// model's namespace, runs a Deployment of the same name in its own
// namespace whose pod template copies the model's (owner annotation,
// manifest hash, bake label; so the ReplicaSet and pod-template-hash
// match too).
//
//   - bake: its container restarts (kwok restarts it) while the model bakes
//     v2 on the real Deployment controller: the model is Ready at v2 when
//     the bake ends, retains it and records no RolloutFailed.
//   - pending: its pod asks for more CPU than any node has while the model
//     rolls out a version with whenUnschedulable: ReplaceInPlace: the model
//     neither names that pod nor switches to replacing pods in place.
func TestForgedPodsFromAnotherTenant(t *testing.T) {
	requireCluster(t)
	t.Parallel()

	t.Run("bake", func(t *testing.T) {
		t.Parallel()
		ns, attacker := newNamespace(t), newNamespace(t)
		readyModel(t, ns, v1, "", nil)
		v2Hash := hashOf(t, v2)
		bakeVersion(t, ns, v2)
		s := waitState(t, ns, "v2's baking template applied", func(s state) bool {
			return s.d.Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation] == v2Hash && s.d.Spec.Template.Labels[v1alpha1.BakeLabel] == "true"
		})
		copyTemplate(t, attacker, s.d, func(tmpl *corev1.PodTemplateSpec) {
			tmpl.Annotations[minicluster.RestartContainerAnnotation] = tmpl.Spec.Containers[0].Name
		})
		baking := waitState(t, ns, "baking "+v2+", or rolled back", func(s state) bool {
			return s.m.Status.BakeStartedAt != nil || s.m.Status.Phase == v1alpha1.PhaseRolledBack
		})
		if baking.m.Status.Phase == v1alpha1.PhaseRolledBack {
			t.Fatalf("rolled back to %s: another tenant's pod failed the bake (%s)", baking.m.Status.ActiveVersion, baking)
		}
		bakeEnd := baking.m.Status.BakeStartedAt.Add(bakeSeconds * time.Second)
		// The copy's container restarted before the bake could end: the
		// bake had it to judge.
		var restarted time.Time
		eventually(t, "the copy's container restarted", func() (bool, string) {
			var pods corev1.PodList
			if err := k8s.List(context.Background(), &pods, client.InNamespace(attacker)); err != nil {
				t.Fatal(err)
			}
			for _, p := range pods.Items {
				for _, c := range p.Status.ContainerStatuses {
					if term := c.LastTerminationState.Terminated; term != nil {
						restarted = term.FinishedAt.Time
						return true, ""
					}
				}
			}
			return false, "no restart yet"
		})
		if !restarted.Before(bakeEnd) {
			t.Fatalf("the copy restarted at %s, after the bake's end %s: the test proves nothing", restarted.Format(time.RFC3339), bakeEnd.Format(time.RFC3339))
		}
		ready := waitState(t, ns, "Ready at "+v2+", or rolled back", func(s state) bool {
			return s.m.Status.Phase == v1alpha1.PhaseRolledBack || (s.snap.Observed() && s.m.Status.Phase == v1alpha1.PhaseReady && s.m.Status.ActiveVersion == v2 && settled(s.d))
		})
		if ready.m.Status.Phase == v1alpha1.PhaseRolledBack {
			t.Fatalf("rolled back to %s: another tenant's pod failed the bake (%s)", ready.m.Status.ActiveVersion, ready)
		}
		if h := ready.m.Status.History; len(h) == 0 || h[0].Version != v2 {
			t.Errorf("history %v: v2 not retained", h)
		}
		if msgs := eventMessages(t, ns, v1alpha1.RolloutFailedReason); len(msgs) != 0 {
			t.Errorf("RolloutFailed events %q: another tenant's pod failed the bake", msgs)
		}
	})

	t.Run("pending", func(t *testing.T) {
		t.Parallel()
		ns, attacker := newNamespace(t), newNamespace(t)
		readyModel(t, ns, v1, "", nil)
		brokenHash := hashOf(t, brokenVersion)
		// A version whose pods never turn Ready keeps the rollout in
		// flight past unschedulableSeconds.
		replaceInPlace(t, ns, brokenVersion, 2, 60)
		s := waitState(t, ns, "the never-ready template applied", func(s state) bool {
			return s.d.Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation] == brokenHash
		})
		copyTemplate(t, attacker, s.d, func(tmpl *corev1.PodTemplateSpec) {
			cpu := resource.MustParse("1000")
			tmpl.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: cpu}
			tmpl.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: cpu}
		})
		var copied string
		eventually(t, "the copy's pod reported unschedulable", func() (bool, string) {
			var pods corev1.PodList
			if err := k8s.List(context.Background(), &pods, client.InNamespace(attacker)); err != nil {
				t.Fatal(err)
			}
			for _, p := range pods.Items {
				for _, c := range p.Status.Conditions {
					if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonUnschedulable {
						copied = p.Name
						return true, ""
					}
				}
			}
			return false, "not yet"
		})
		// No event of the copy's pod wakes the model (a pod of another
		// namespace is no model's): a reconcile request makes sure a pass
		// met it, then the next seconds — longer than unschedulableSeconds
		// (2 s) — must not show it either.
		requested := time.Now().Format(time.RFC3339Nano)
		annotate(t, ns, meta.ReconcileRequestAnnotation, requested)
		waitState(t, ns, "the reconcile request handled", func(s state) bool { return s.m.Status.LastHandledReconcileAt == requested })
		deadline := time.Now().Add(8 * time.Second)
		for time.Now().Before(deadline) {
			m := read(t, ns).m
			if m.Status.ReplaceInPlace != nil {
				t.Fatalf("switched to replacing pods in place for another tenant's pod: %+v", m.Status.ReplaceInPlace)
			}
			for _, c := range m.Status.Conditions {
				if c.Reason == v1alpha1.UnschedulableReason || strings.Contains(c.Message, copied) {
					t.Fatalf("%s=%s/%s %q: another tenant's pod is named", c.Type, c.Status, c.Reason, c.Message)
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
}

// TestReplacedManifest: whoever may delete and create ConfigMaps in the
// model's namespace deletes the manifest ConfigMap its Deployment points
// at and creates it again under the same name, owned by the model and
// immutable, with another model's pointer. The operator notices within one
// watch event — the first or second status it writes after the
// replacement (a pass the deletion woke may write its status after the
// replacement landed) says ManifestMismatch —, deletes the replacement and
// writes its manifest again under the same name; the Deployment's pointer
// never changes (no roll), and the model is Ready again.
func TestReplacedManifest(t *testing.T) {
	requireCluster(t)
	t.Parallel()
	ctx := context.Background()
	ns := newNamespace(t)
	readyModel(t, ns, v1, "", nil)
	served := read(t, ns)
	name, generation := served.m.Status.ManifestConfigMapName, served.d.Generation
	rec := watchModelAndManifest(t, ns, name)

	var forged *corev1.ConfigMap
	for attempt := 0; forged == nil; attempt++ {
		if attempt == 10 {
			t.Fatal("the operator wrote its ConfigMap back before every replacement")
		}
		cm := &corev1.ConfigMap{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cm); err != nil {
			t.Fatal(err)
		}
		if err := k8s.Delete(ctx, cm, client.Preconditions{UID: &cm.UID}); client.IgnoreNotFound(err) != nil {
			t.Fatal(err)
		}
		f := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: cm.Labels, Annotations: cm.Annotations,
			OwnerReferences: cm.OwnerReferences}, Immutable: ptr.To(true),
			Data: map[string]string{v1alpha1.PreloadEnvVar: "Someone/else-v9", v1alpha1.ManifestKey: "{}\n"}}
		switch err := k8s.Create(ctx, f); {
		case err == nil:
			forged = f
		case !apierrors.IsAlreadyExists(err):
			t.Fatal(err)
		}
	}
	forgedRV, err := strconv.ParseInt(forged.ResourceVersion, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	s := waitState(t, ns, "the manifest written again and the model Ready", func(s state) bool {
		cm := &corev1.ConfigMap{}
		err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cm)
		return err == nil && cm.UID != forged.UID && cm.Data[v1alpha1.PreloadEnvVar] == v1 &&
			apimeta.IsStatusConditionTrue(s.m.Status.Conditions, v1alpha1.ReadyCondition) && settled(s.d)
	})
	rec.stop()
	// A pass woken by the deletion may write its status after the
	// replacement landed (it decided before): the status after that one
	// at the latest names the replacement.
	mismatch, n := rec.firstModelAfterWith(forgedRV, v1alpha1.ManifestMismatchReason)
	if n == 0 || n > 2 {
		t.Errorf("the status that says ManifestMismatch is the %d. after the replacement (rv %d), want the first or the second", n, forgedRV)
	}
	if !rec.deleted(forged.UID) {
		t.Error("the replacement was not deleted")
	}
	if p := preloadRef(s.d); p != name || s.d.Generation != generation {
		t.Errorf("pointer %q, generation %d (was %d): the Deployment must keep pointing at the name, no roll", p, s.d.Generation, generation)
	}
	t.Logf("replacement at rv %d; ManifestMismatch in the %d. status after it, %s later; written again %s after the replacement",
		forgedRV, n, mismatch.at.Sub(rec.createdAt(forged.UID)).Round(time.Millisecond), rec.rewrittenAt(forged.UID).Sub(rec.createdAt(forged.UID)).Round(time.Millisecond))
	if msgs := recordedEvents(t, ns, v1alpha1.ManifestMismatchReason, 1); !strings.Contains(msgs[0], name) || strings.Contains(msgs[0], "Someone") {
		t.Errorf("ManifestMismatch event %q: want the ConfigMap named, none of its content", msgs[0])
	}
}

// preloadRef is the name of the ConfigMap the target's preload entry
// refers to.
func preloadRef(d *appsv1.Deployment) string {
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, e := range c.Env {
			if e.Name == v1alpha1.PreloadEnvVar && e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil {
				return e.ValueFrom.ConfigMapKeyRef.Name
			}
		}
	}
	return ""
}

// manifestRecorder watches a model's statuses and one manifest ConfigMap
// name.
type manifestRecorder struct {
	mu      sync.Mutex
	models  []modelStatus
	created map[string]time.Time // by UID
	gone    map[string]bool      // by UID
	stops   []func()
}

// modelStatus is one model version a watch event carried: its
// resourceVersion, when it arrived and its Ready reason.
type modelStatus struct {
	rv    int64
	at    time.Time
	ready string
}

func watchModelAndManifest(t *testing.T, ns, name string) *manifestRecorder {
	t.Helper()
	r := &manifestRecorder{created: map[string]time.Time{}, gone: map[string]bool{}}
	for _, list := range []client.ObjectList{&v1alpha1.OpenMedModelList{}, &corev1.ConfigMapList{}} {
		w, err := k8s.Watch(context.Background(), list, client.InNamespace(ns))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			for ev := range w.ResultChan() {
				r.record(ev, name)
			}
		}()
		r.stops = append(r.stops, func() { w.Stop(); <-done })
	}
	t.Cleanup(r.stop)
	return r
}

func (r *manifestRecorder) record(ev watch.Event, name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch o := ev.Object.(type) {
	case *v1alpha1.OpenMedModel:
		rv, _ := strconv.ParseInt(o.ResourceVersion, 10, 64)
		reason := ""
		if c := apimeta.FindStatusCondition(o.Status.Conditions, v1alpha1.ReadyCondition); c != nil {
			reason = c.Reason
		}
		r.models = append(r.models, modelStatus{rv: rv, at: time.Now(), ready: reason})
	case *corev1.ConfigMap:
		if o.Name != name {
			return
		}
		switch ev.Type {
		case watch.Added:
			r.created[string(o.UID)] = time.Now()
		case watch.Deleted:
			r.gone[string(o.UID)] = true
		}
	}
}

func (r *manifestRecorder) stop() {
	for _, s := range r.stops {
		s()
	}
	r.stops = nil
}

// firstModelAfterWith is the first model version written after rv whose
// Ready reason is reason, and its place among those written after rv (1
// for the first; 0: none).
func (r *manifestRecorder) firstModelAfterWith(rv int64, reason string) (modelStatus, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, m := range r.models {
		if m.rv <= rv {
			continue
		}
		n++
		if m.ready == reason {
			return m, n
		}
	}
	return modelStatus{}, 0
}

func (r *manifestRecorder) deleted(uid any) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gone[fmt.Sprint(uid)]
}

func (r *manifestRecorder) createdAt(uid any) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.created[fmt.Sprint(uid)]
}

// rewrittenAt is when the first ConfigMap of the name created after the
// one of uid arrived.
func (r *manifestRecorder) rewrittenAt(uid any) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	after := r.created[fmt.Sprint(uid)]
	var first time.Time
	for u, at := range r.created {
		if u != fmt.Sprint(uid) && at.After(after) && (first.IsZero() || at.Before(first)) {
			first = at
		}
	}
	return first
}
