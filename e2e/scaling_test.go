package e2e_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	kstatus "github.com/fluxcd/cli-utils/pkg/kstatus/status"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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
// calls the Deployment unavailable meanwhile), the model, sampled every
// 100 ms, is never Degraded in any Argo CD face (Go, Lua) and never Failed
// in kstatus or the CEL expressions; it reads Ready=False/Scaling with
// Reconciling (Progressing, InProgress), as Argo CD and kstatus read the
// Deployment itself, and Ready again once every pod is available.
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

			s := startFaceSampler(t, ns, 100*time.Millisecond)
			start := time.Now()
			tc.scaleUp(t, ns)
			done := waitState(t, ns, "Ready with every pod available", func(st state) bool {
				return st.snap.Observed() && ptr.Deref(st.d.Spec.Replicas, 0) == tc.wantAfter && settled(st.d) &&
					st.m.Status.Phase == v1alpha1.PhaseReady && st.snap.Condition(v1alpha1.ReadyCondition) == "True/RolloutSucceeded"
			})
			took := time.Since(start)
			time.Sleep(300 * time.Millisecond)
			samples := s.stop()
			var gap time.Duration
			for i := 1; i < len(samples); i++ {
				gap = max(gap, samples[i].at.Sub(samples[i-1].at))
			}
			t.Logf("Ready again after %s; %d samples, at most %s apart", took.Round(100*time.Millisecond), len(samples), gap.Round(time.Millisecond))
			scaling := 0
			for _, smp := range samples {
				if smp.argo[health.Degraded] || smp.argo[health.Unknown] {
					t.Errorf("%s: an Argo CD face says %v: %s", smp.at.Format(time.RFC3339Nano), smp.faces, smp.summary)
				}
				if smp.ks[kstatus.FailedStatus] || smp.ks[kstatus.UnknownStatus] {
					t.Errorf("%s: kstatus or CEL says %v: %s", smp.at.Format(time.RFC3339Nano), smp.faces, smp.summary)
				}
				if smp.ready == "False/"+v1alpha1.ScalingReason {
					scaling++
				}
			}
			// What the README documents: Ready=False/Scaling while the
			// pods come up (minReadySeconds makes that last seconds).
			if scaling == 0 {
				t.Errorf("no sample read Ready=False/Scaling; the last state: %s", done)
			}
		})
	}
}

// faceSample is one reading of the model by every health face.
type faceSample struct {
	at      time.Time
	argo    map[health.Code]bool
	ks      map[kstatus.Status]bool
	faces   []string
	ready   string
	summary string
}

type faceSampler struct {
	mu      sync.Mutex
	samples []faceSample
	stopc   chan struct{}
	done    chan struct{}
}

// startFaceSampler reads the model of ns every period and judges it with
// the Go health check, health.lua (as argocd-cm runs it), kstatus and the
// published CEL expressions.
func startFaceSampler(t *testing.T, ns string, period time.Duration) *faceSampler {
	t.Helper()
	cel, err := flux.NewStatusEvaluator()
	if err != nil {
		t.Fatal(err)
	}
	s := &faceSampler{stopc: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			select {
			case <-s.stopc:
				return
			case <-tick.C:
			}
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("OpenMedModel"))
			if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: modelName}, u); err != nil {
				continue
			}
			smp := faceSample{at: time.Now(), argo: map[health.Code]bool{}, ks: map[kstatus.Status]bool{}}
			record := func(face string, v fmt.Stringer) { smp.faces = append(smp.faces, face+"="+v.String()) }
			goFace := health.Assess(u)
			smp.argo[goFace.Code] = true
			record("go", stringer(goFace.Code))
			if lua, err := argocd.LuaHealth(u); err == nil {
				smp.argo[health.Code(lua.Status)] = true
				record("lua", stringer(lua.Status))
			} else {
				smp.argo[health.Unknown] = true
				record("lua", stringer(err.Error()))
			}
			if r, err := kstatus.Compute(u); err == nil {
				smp.ks[r.Status] = true
				record("kstatus", r.Status)
			}
			if r, err := cel.Evaluate(context.Background(), u); err == nil {
				smp.ks[r.Status] = true
				record("cel", r.Status)
			}
			conditions, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			for _, item := range conditions {
				if c, ok := item.(map[string]any); ok && c["type"] == v1alpha1.ReadyCondition {
					smp.ready = fmt.Sprintf("%v/%v", c["status"], c["reason"])
				}
			}
			smp.summary = fmt.Sprintf("Ready=%s %s", smp.ready, goFace.Message)
			s.mu.Lock()
			s.samples = append(s.samples, smp)
			s.mu.Unlock()
		}
	}()
	t.Cleanup(func() { s.stop() })
	return s
}

// stop ends the sampling (once) and returns the samples.
func (s *faceSampler) stop() []faceSample {
	select {
	case <-s.stopc:
	default:
		close(s.stopc)
	}
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]faceSample(nil), s.samples...)
}

type stringer string

func (s stringer) String() string { return string(s) }
