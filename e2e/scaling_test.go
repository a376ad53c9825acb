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

	kstatus "github.com/fluxcd/cli-utils/pkg/kstatus/status"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/health"
	"github.com/openmed/openmed-operator/health/argocd"
	"github.com/openmed/openmed-operator/health/flux"
	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// warmUpSeconds is the charts' minReadySeconds in the scaling tests: a new
// pod is Ready at once (kwok) and available that long after, as a model
// server that warms up is.
const warmUpSeconds = 5

// TestScalingIsNotFailing: a Ready model whose chart sets minReadySeconds
// is scaled up, by its own spec.replicas (2 -> 4) and by an HPA-style write
// of the scale subresource (1 -> 4) with replicas left to the HPA. While the
// real Deployment controller brings the pods up (with maxUnavailable 0 it
// calls the Deployment unavailable meanwhile), every version of the model
// the API server stores (a watch, so nothing between two samples is
// missed) is never Degraded in any Argo CD face (Go, Lua) and never Failed
// in kstatus or the CEL expressions; it reads Ready=False/Scaling with
// Reconciling (Progressing, InProgress), as Argo CD and kstatus read the
// Deployment itself, and Ready again only once every pod is available,
// without a RolloutSucceeded event.
func TestScalingIsNotFailing(t *testing.T) {
	requireCluster(t)
	t.Parallel()
	for _, tc := range []struct {
		name      string
		chart     int32
		replicas  *int32
		scaleUp   func(t *testing.T, ns string)
		wantAfter int32
	}{
		{name: "model-replicas-2-to-4", chart: 2, replicas: ptr.To[int32](2), wantAfter: 4, scaleUp: func(t *testing.T, ns string) {
			m := read(t, ns).m
			base := m.DeepCopy()
			m.Spec.Replicas = ptr.To[int32](4)
			if err := k8s.Patch(context.Background(), m, client.MergeFrom(base)); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "hpa-scale-1-to-4", chart: 1, wantAfter: 4, scaleUp: func(t *testing.T, ns string) {
			d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: modelName}}
			scale := &autoscalingv1.Scale{Spec: autoscalingv1.ScaleSpec{Replicas: 4}}
			if err := k8s.SubResource("scale").Update(context.Background(), d, client.WithSubResourceBody(scale), client.FieldOwner("kube-controller-manager")); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ns := newNamespace(t)
			createTarget(t, ns, func(d *appsv1.Deployment) {
				d.Spec.MinReadySeconds = warmUpSeconds
				d.Spec.Replicas = ptr.To(tc.chart)
			})
			m := newModel(t, ns, v1, "")
			m.Spec.Replicas = tc.replicas
			if err := k8s.Create(context.Background(), m); err != nil {
				t.Fatal(err)
			}
			waitServing(t, ns, v1)

			s := startFaceWatch(t, ns)
			deps := startAvailabilityWatch(t, ns)
			start := time.Now()
			tc.scaleUp(t, ns)
			done := waitState(t, ns, "Ready with every pod available", func(st state) bool {
				return st.snap.Observed() && ptr.Deref(st.d.Spec.Replicas, 0) == tc.wantAfter && settled(st.d) &&
					st.m.Status.Phase == v1alpha1.PhaseReady && st.snap.Condition(v1alpha1.ReadyCondition) == "True/RolloutSucceeded"
			})
			took := time.Since(start)
			samples := s.stop(t, done.m.ResourceVersion)
			t.Logf("Ready again after %s; %d stored versions of the model judged", took.Round(100*time.Millisecond), len(samples))
			// What the docs say: Ready=False/Scaling while the
			// pods come up (minReadySeconds makes that last seconds), and
			// Ready=True again only once every pod is available: after the
			// first Scaling, Ready stays False until the last version.
			var readings []string
			scaling := -1
			for i, smp := range samples {
				readings = append(readings, smp.ready)
				if smp.err != "" {
					t.Errorf("%s: a face could not judge the model: %s", smp.summary, smp.err)
				}
				if smp.argo[health.Degraded] || smp.argo[health.Unknown] {
					t.Errorf("an Argo CD face says %v: %s", smp.faces, smp.summary)
				}
				if smp.ks[kstatus.FailedStatus] || smp.ks[kstatus.UnknownStatus] {
					t.Errorf("kstatus or CEL says %v: %s", smp.faces, smp.summary)
				}
				if smp.ready == "False/"+v1alpha1.ScalingReason && scaling < 0 {
					scaling = i
				}
				if scaling >= 0 && i < len(samples)-1 && strings.HasPrefix(smp.ready, "True/") {
					t.Errorf("Ready=%s while the Deployment still scales (version %d of %d): %s", smp.ready, i+1, len(samples), smp.summary)
				}
			}
			t.Logf("Ready, version by version: %s", strings.Join(slices.Compact(readings), " -> "))
			// Ready=True is written only once the Deployment it judged was
			// available at that moment: the Deployment's newest version
			// stored before the model's first Ready=True after the Scaling
			// has every replica updated, ready and available.
			versions := deps.stop(t, done.d.ResourceVersion)
			for _, smp := range samples[max(scaling, 0):] {
				if !strings.HasPrefix(smp.ready, "True/") {
					continue
				}
				var judged *depVersion
				for i := range versions {
					if versions[i].rv < smp.rv {
						judged = &versions[i]
					}
				}
				switch {
				case judged == nil:
					t.Errorf("no version of the Deployment stored before %s", smp.summary)
				case !judged.available:
					t.Errorf("Ready=True at model resourceVersion %d while the Deployment's newest version (%d) was %s", smp.rv, judged.rv, judged.summary)
				default:
					t.Logf("Ready=True at model resourceVersion %d; the Deployment's version %d before it: %s", smp.rv, judged.rv, judged.summary)
				}
				break
			}
			if scaling < 0 {
				t.Errorf("no stored version read Ready=False/Scaling; the last state: %s", done)
			}
			if n := countEvents(t, ns, v1alpha1.RolloutSucceededReason); n != 1 {
				t.Errorf("%d RolloutSucceeded events, want only the first rollout's: a scale-up rolls nothing", n)
			}
		})
	}
}

// faceSample is one stored version of the model judged by every health
// face.
type faceSample struct {
	argo    map[health.Code]bool
	ks      map[kstatus.Status]bool
	faces   []string
	ready   string
	summary string
	// messages are the Go and Lua health checks' messages.
	messages []string
	// rv is the version's resourceVersion (the API server's etcd
	// revision, which orders it with the Deployment's versions).
	rv int64
	// generation is the version's metadata.generation; retained the
	// versions of its status.history (retained after their bake).
	generation int64
	retained   []string
	// err says which face could not judge the version.
	err string
	// written is when the version's status was written: the newest time
	// of the managedFields entries of the status subresource (the API
	// server's clock, to the second).
	written time.Time
}

type faceWatch struct {
	mu       sync.Mutex
	samples  []faceSample
	versions map[string]bool
	w        watch.Interface
	done     chan struct{}
}

// startFaceWatch judges every version of the model of ns the API server
// stores from now on — no sampling period, so no state, however short, is
// missed — with the Go health check, health.lua (as argocd-cm runs it),
// kstatus and the published CEL expressions.
func startFaceWatch(t *testing.T, ns string) *faceWatch {
	t.Helper()
	cel, err := flux.NewStatusEvaluator()
	if err != nil {
		t.Fatal(err)
	}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("OpenMedModelList"))
	if err := k8s.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	w, err := k8s.Watch(context.Background(), list, client.InNamespace(ns),
		&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.GetResourceVersion()}})
	if err != nil {
		t.Fatal(err)
	}
	s := &faceWatch{versions: map[string]bool{}, w: w, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for ev := range w.ResultChan() {
			u, ok := ev.Object.(*unstructured.Unstructured)
			if !ok || u.GetName() != modelName {
				continue
			}
			smp := faceSample{argo: map[health.Code]bool{}, ks: map[kstatus.Status]bool{}}
			record := func(face string, v fmt.Stringer) { smp.faces = append(smp.faces, face+"="+v.String()) }
			goFace := health.Assess(u)
			smp.argo[goFace.Code] = true
			record("go", stringer(goFace.Code))
			smp.messages = append(smp.messages, goFace.Message)
			if lua, err := argocd.LuaHealth(u); err == nil {
				smp.argo[health.Code(lua.Status)] = true
				record("lua", stringer(lua.Status))
				smp.messages = append(smp.messages, lua.Message)
			} else {
				smp.err += "lua: " + err.Error() + "; "
			}
			if r, err := kstatus.Compute(u); err == nil {
				smp.ks[r.Status] = true
				record("kstatus", r.Status)
			} else {
				smp.err += "kstatus: " + err.Error() + "; "
			}
			if r, err := cel.Evaluate(context.Background(), u); err == nil {
				smp.ks[r.Status] = true
				record("cel", r.Status)
			} else {
				smp.err += "cel: " + err.Error() + "; "
			}
			conditions, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			for _, item := range conditions {
				if c, ok := item.(map[string]any); ok && c["type"] == v1alpha1.ReadyCondition {
					smp.ready = fmt.Sprintf("%v/%v", c["status"], c["reason"])
				}
			}
			smp.summary = fmt.Sprintf("resourceVersion %s Ready=%s %s", u.GetResourceVersion(), smp.ready, goFace.Message)
			smp.rv, _ = strconv.ParseInt(u.GetResourceVersion(), 10, 64)
			smp.generation = u.GetGeneration()
			history, _, _ := unstructured.NestedSlice(u.Object, "status", "history")
			for _, item := range history {
				if h, ok := item.(map[string]any); ok {
					if v, ok := h["version"].(string); ok {
						smp.retained = append(smp.retained, v)
					}
				}
			}
			for _, e := range u.GetManagedFields() {
				if e.Subresource == "status" && e.Time != nil && e.Time.After(smp.written) {
					smp.written = e.Time.Time
				}
			}
			s.mu.Lock()
			s.samples = append(s.samples, smp)
			s.versions[u.GetResourceVersion()] = true
			s.mu.Unlock()
		}
	}()
	t.Cleanup(func() { w.Stop(); <-s.done })
	return s
}

// stop waits until the watch has delivered the model's version rv, ends
// it, and returns every version judged, oldest first.
func (s *faceWatch) stop(t *testing.T, rv string) []faceSample {
	t.Helper()
	eventually(t, "the watch delivered resourceVersion "+rv, func() (bool, string) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.versions[rv], fmt.Sprintf("%d versions", len(s.versions))
	})
	s.w.Stop()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]faceSample(nil), s.samples...)
}

// firstWritten returns when the first watched version whose Ready
// condition reads ready ("False/Unschedulable") was written, waiting up to
// 30 s for the watch to deliver one; false if none came.
func (s *faceWatch) firstWritten(ready string) (time.Time, bool) {
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		s.mu.Lock()
		for _, smp := range s.samples {
			if smp.ready == ready {
				s.mu.Unlock()
				return smp.written, !smp.written.IsZero()
			}
		}
		s.mu.Unlock()
	}
	return time.Time{}, false
}

// depVersion is one stored version of the target Deployment.
type depVersion struct {
	rv        int64
	available bool
	summary   string
}

type availabilityWatch struct {
	mu       sync.Mutex
	versions []depVersion
	seen     map[string]bool
	end      func()
}

// startAvailabilityWatch records every version of the target Deployment
// of ns the API server stores from now on, and whether it was available:
// its controller observed its generation and every replica is updated,
// ready and available.
func startAvailabilityWatch(t *testing.T, ns string) *availabilityWatch {
	t.Helper()
	a := &availabilityWatch{seen: map[string]bool{}}
	a.end = watchDeployments(t, ns, func(d *appsv1.Deployment) {
		want := ptr.Deref(d.Spec.Replicas, 1)
		st := d.Status
		v := depVersion{
			available: st.ObservedGeneration == d.Generation && st.Replicas == want && st.UpdatedReplicas == want &&
				st.ReadyReplicas == want && st.AvailableReplicas == want,
			summary: fmt.Sprintf("generation %d observed %d, replicas %d: updated %d ready %d available %d", d.Generation, st.ObservedGeneration,
				want, st.UpdatedReplicas, st.ReadyReplicas, st.AvailableReplicas),
		}
		v.rv, _ = strconv.ParseInt(d.ResourceVersion, 10, 64)
		a.mu.Lock()
		a.versions = append(a.versions, v)
		a.seen[d.ResourceVersion] = true
		a.mu.Unlock()
	})
	return a
}

// stop waits until the watch has delivered the Deployment's version rv,
// ends it, and returns every version, oldest first.
func (a *availabilityWatch) stop(t *testing.T, rv string) []depVersion {
	t.Helper()
	eventually(t, "the Deployment watch delivered resourceVersion "+rv, func() (bool, string) {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.seen[rv], fmt.Sprintf("%d versions", len(a.versions))
	})
	a.end()
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]depVersion(nil), a.versions...)
}

// countEvents counts the model's events with reason.
func countEvents(t *testing.T, ns, reason string) int {
	t.Helper()
	n := 0
	for _, e := range modelEvents(t, ns) {
		if e.Reason == reason {
			n++
		}
	}
	return n
}

type stringer string

func (s stringer) String() string { return string(s) }
