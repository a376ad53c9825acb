package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	eventv1 "github.com/fluxcd/pkg/apis/event/v1beta1"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// receiver is notification-controller's event endpoint as the forwarder
// sees it: it answers 202 to each event, but only once released.
type receiver struct {
	srv     *httptest.Server
	release chan struct{}

	mu     sync.Mutex
	got    []eventv1.Event
	gotOne chan struct{}
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{release: make(chan struct{}), gotOne: make(chan struct{}, 1)}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		var e eventv1.Event
		if err == nil {
			err = json.Unmarshal(body, &e)
		}
		if err != nil {
			t.Errorf("receiver: %v", err)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.got = append(r.got, e)
		r.mu.Unlock()
		select {
		case r.gotOne <- struct{}{}:
		default:
		}
		<-r.release
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(func() {
		select {
		case <-r.release:
		default:
			close(r.release)
		}
		r.srv.Close()
	})
	return r
}

// events are the distinct events received, in the order first seen (a
// post retried after Flux's 5 s client timeout arrives twice).
func (r *receiver) events() []eventv1.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []eventv1.Event
	seen := map[string]bool{}
	for _, e := range r.got {
		if !seen[e.Message] {
			seen[e.Message] = true
			out = append(out, e)
		}
	}
	return out
}

func (r *receiver) messages() []string {
	var out []string
	for _, e := range r.events() {
		out = append(out, e.Message)
	}
	return out
}

// kubeEvents records what the forwarder hands to the Kubernetes recorder.
type kubeEvents struct {
	mu   sync.Mutex
	msgs []string
}

func (k *kubeEvents) Eventf(_, _ runtime.Object, _, _, _, note string, args ...any) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.msgs = append(k.msgs, fmt.Sprintf(note, args...))
}

// TestEventForwarder: --events-addr forwards each event to
// notification-controller in Flux's event protocol (involved object the
// OpenMedModel, Warning as severity error), in order, without the reconciler
// waiting for it: Eventf returns while the receiver holds the first post,
// and the Kubernetes Event is recorded at once. Past ForwardQueueSize
// waiting events, each further one is counted as not forwarded, never
// blocks; at shutdown, what is left is posted or counted, and so is an
// event recorded after it.
func TestEventForwarder(t *testing.T) {
	scheme := testScheme(t)
	rcv := newReceiver(t)
	metrics := NewMetrics(prometheus.NewRegistry())
	f, err := NewEventForwarder(rcv.srv.URL+"/", ControllerName, scheme, metrics, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		_ = f.Start(ctx)
	}()
	defer func() {
		cancel()
		<-stopped
	}()

	// As the cache hands it over: no TypeMeta.
	model := &v1alpha1.OpenMedModel{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "openmed-service", UID: "u-1",
		Annotations: map[string]string{"event.toolkit.fluxcd.io/revision": "main@sha1:abc", "note": "not forwarded"}},
		Spec: v1alpha1.OpenMedModelSpec{Version: "v3-broken"},
		Status: v1alpha1.OpenMedModelStatus{ObservedGeneration: 2, ActiveVersion: "v2", Conditions: []metav1.Condition{
			{Type: v1alpha1.StalledCondition, Status: metav1.ConditionTrue, Reason: "RolledBack", ObservedGeneration: 2,
				Message: "v3-broken failed on Deployment openmed-service; serving the retained v2"}}}}
	model.Generation = 2
	kube := &kubeEvents{}
	rec := f.Recorder(kube)

	sent := []struct{ eventtype, reason, msg string }{
		{corev1.EventTypeNormal, v1alpha1.RolloutStartedReason, "Rolling out v2"},
		{corev1.EventTypeWarning, v1alpha1.RollbackStartedReason, "v2 failed: rolling back to v1"},
		{corev1.EventTypeNormal, "RolledBack", "Serving v1"},
	}
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		for _, e := range sent {
			rec.Eventf(model, nil, e.eventtype, e.reason, e.reason, "%s", e.msg)
		}
	}()
	select {
	case <-returned:
	case <-time.After(time.Minute):
		t.Fatal("Eventf waits for notification-controller")
	}
	if len(kube.msgs) != len(sent) {
		t.Fatalf("Kubernetes Events recorded before the forward: %q", kube.msgs)
	}
	select {
	case <-rcv.gotOne:
	case <-time.After(time.Minute):
		t.Fatal("nothing forwarded")
	}
	if got := rcv.messages(); len(got) != 1 || got[0] != sent[0].msg {
		t.Fatalf("received while the first post is held: %q, want only the first event", got)
	}

	// The worker holds the first post and the queue the other two: it
	// takes ForwardQueueSize-2 more, and the next one is dropped and
	// counted, at once.
	fillers := ForwardQueueSize - (len(sent) - 1)
	for i := range fillers {
		rec.Eventf(model, nil, corev1.EventTypeNormal, "Filler", "Filler", "filler %d", i)
	}
	rec.Eventf(model, nil, corev1.EventTypeNormal, "Filler", "Filler", "one too many")
	dropped := testutil.ToFloat64(metrics.notForwarded.WithLabelValues(dropQueueFull))
	if dropped != 1 {
		t.Errorf("%s{cause=%q} = %v, want 1", MetricEventsNotForwarded, dropQueueFull, dropped)
	}

	// Shutdown while the post is held, then the receiver answers: the
	// forwarder posts for a second, every event left is counted.
	cancel()
	close(rcv.release)
	<-stopped
	got := rcv.messages()
	for i, e := range sent {
		if i >= len(got) || got[i] != e.msg {
			t.Fatalf("forwarded in this order: %q, want the three events first, in order", got[:min(len(got), 3)])
		}
	}
	shutdown := testutil.ToFloat64(metrics.notForwarded.WithLabelValues(dropShutdown))
	if posted := len(got) - len(sent); float64(posted)+shutdown != float64(fillers) {
		t.Errorf("after shutdown: %d fillers posted + %v counted (cause shutdown), want %d", posted, shutdown, fillers)
	}
	for _, m := range got {
		if m == "one too many" {
			t.Error("the dropped event was forwarded")
		}
	}
	// A reconcile that finishes after the forwarder stopped: the Kubernetes
	// Event is recorded, the forward counted, not lost in the queue.
	rec.Eventf(model, nil, corev1.EventTypeWarning, "Late", "Late", "after shutdown")
	if after := testutil.ToFloat64(metrics.notForwarded.WithLabelValues(dropShutdown)); after != shutdown+1 || kube.msgs[len(kube.msgs)-1] != "after shutdown" {
		t.Errorf("an event after shutdown: counted %v (was %v), last Kubernetes Event %q", after, shutdown, kube.msgs[len(kube.msgs)-1])
	}

	events := rcv.events()
	for _, e := range events[:3] {
		o := e.InvolvedObject
		if o.Kind != "OpenMedModel" || o.APIVersion != "openmed.ai/v1alpha1" || o.Namespace != "team-a" || o.Name != "openmed-service" || o.UID != "u-1" {
			t.Errorf("involved object %+v, want the OpenMedModel team-a/openmed-service", o)
		}
		if e.ReportingController != ControllerName {
			t.Errorf("reporting controller %q", e.ReportingController)
		}
		want := map[string]string{"event.toolkit.fluxcd.io/revision": "main@sha1:abc",
			MetaRevision: "v3-broken", MetaServing: "v2", MetaHealth: "Degraded",
			MetaHealthMessage: "v3-broken failed on Deployment openmed-service; serving the retained v2"}
		if fmt.Sprint(e.Metadata) != fmt.Sprint(want) {
			t.Errorf("metadata %v, want %v (the version, the serving one, the health as Argo CD shows it and Flux's annotations)", e.Metadata, want)
		}
	}
	for i, want := range []string{eventv1.EventSeverityInfo, eventv1.EventSeverityError, eventv1.EventSeverityInfo} {
		if events[i].Severity != want || events[i].Reason != sent[i].reason {
			t.Errorf("event %d: severity %s reason %s, want %s %s", i, events[i].Severity, events[i].Reason, want, sent[i].reason)
		}
	}
}
