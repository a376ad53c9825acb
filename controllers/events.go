package controllers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/tools/reference"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// EventRecorder writes core/v1 Events for the OpenMedModels. It implements
// client-go's record.EventRecorder, so Flux's events.Recorder wraps it
// (events.WithLegacyEventRecorder) and can forward the same events to
// notification-controller.
//
// It exists because client-go's own recorder gives up at once on any answer
// of the API server (a 429 or 503 is "rejected, will not retry") and retries
// transport errors for two minutes, long after the rollout it reports. Here
// every event is one POST with a name fixed when it is emitted, retried on
// transient failures with a short capped backoff (EventRetries attempts,
// EventBackoffCap apart at most); a retry after a request that took effect
// answers AlreadyExists, which counts as written. An event given up on is
// logged and counted in openmed_events_dropped_total: events are best
// effort, status is the record.
type EventRecorder struct {
	client  client.Client
	scheme  *runtime.Scheme
	source  corev1.EventSource
	metrics *Metrics
	log     logr.Logger
	queue   chan *corev1.Event
	now     func() time.Time

	// mu guards stopped: once Start returned, nobody reads the queue, so
	// an event recorded after that is counted as dropped (shutdown)
	// instead of waiting in it for good.
	mu      sync.Mutex
	stopped bool
}

// Event delivery limits. A wave of rollouts emits events faster than one
// writer posts them, so a few write in parallel from a deep queue.
const (
	EventRetries    = 6
	EventBackoffCap = 4 * time.Second
	eventQueueSize  = 8192
	eventWriters    = 4
)

var _ record.EventRecorder = &EventRecorder{}

// NewEventRecorder returns a recorder posting with c as component. Start
// must run (the manager runs it when added with mgr.Add).
func NewEventRecorder(c client.Client, scheme *runtime.Scheme, component string, metrics *Metrics, log logr.Logger) *EventRecorder {
	return &EventRecorder{
		client:  c,
		scheme:  scheme,
		source:  corev1.EventSource{Component: component},
		metrics: metrics,
		log:     log,
		queue:   make(chan *corev1.Event, eventQueueSize),
		now:     time.Now,
	}
}

// Start posts queued events until ctx ends, then gives the queue a second
// to drain; what is left, and every event recorded after Start returned, is
// counted as dropped.
func (r *EventRecorder) Start(ctx context.Context) error {
	var wg sync.WaitGroup
	for range eventWriters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.write(ctx)
		}()
	}
	wg.Wait()
	r.mu.Lock()
	r.stopped = true
	r.mu.Unlock()
	// What was queued after the writers' last look.
	for {
		select {
		case e := <-r.queue:
			r.drop(e, dropShutdown, nil)
		default:
			return nil
		}
	}
}

func (r *EventRecorder) write(ctx context.Context) {
	for {
		select {
		case e := <-r.queue:
			r.post(ctx, e)
		case <-ctx.Done():
			drain, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			for {
				select {
				case e := <-r.queue:
					r.post(drain, e)
				default:
					return
				}
			}
		}
	}
}

// NeedLeaderElection is false: only the leader reconciles, so only the
// leader emits, and a follower's queue stays empty.
func (r *EventRecorder) NeedLeaderElection() bool { return false }

// Event implements record.EventRecorder.
func (r *EventRecorder) Event(object runtime.Object, eventtype, reason, message string) {
	r.enqueue(object, nil, eventtype, reason, message)
}

// Eventf implements record.EventRecorder.
func (r *EventRecorder) Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	r.enqueue(object, nil, eventtype, reason, fmt.Sprintf(messageFmt, args...))
}

// AnnotatedEventf implements record.EventRecorder.
func (r *EventRecorder) AnnotatedEventf(object runtime.Object, annotations map[string]string, eventtype, reason, messageFmt string, args ...any) {
	r.enqueue(object, annotations, eventtype, reason, fmt.Sprintf(messageFmt, args...))
}

func (r *EventRecorder) enqueue(object runtime.Object, annotations map[string]string, eventtype, reason, message string) {
	ref, err := reference.GetReference(r.scheme, object)
	if err != nil {
		r.log.Error(err, "cannot reference the object of an event", "reason", reason)
		return
	}
	now := metav1.NewTime(r.now())
	e := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{
			// Fixed here, so every retry of this event names the same object.
			Name:        eventName(ref.Name, now.Time),
			Namespace:   ref.Namespace,
			Annotations: annotations,
		},
		InvolvedObject:      *ref,
		Reason:              reason,
		Message:             message,
		Type:                eventtype,
		Source:              r.source,
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
		ReportingController: r.source.Component,
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		r.drop(e, dropShutdown, nil)
		return
	}
	select {
	case r.queue <- e:
	default:
		r.drop(e, dropQueueFull, nil)
	}
}

// post writes e, retrying transient failures.
func (r *EventRecorder) post(ctx context.Context, e *corev1.Event) {
	delay := 200 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := r.client.Create(ctx, e.DeepCopy())
		switch {
		case err == nil || apierrors.IsAlreadyExists(err):
			return
		case !transient(err):
			r.drop(e, dropRejected, err)
			return
		case attempt == EventRetries:
			r.drop(e, dropRetriesExhausted, err)
			return
		}
		if s, ok := apierrors.SuggestsClientDelay(err); ok && time.Duration(s)*time.Second > delay {
			delay = time.Duration(s) * time.Second
		}
		select {
		case <-ctx.Done():
			r.drop(e, dropShutdown, err)
			return
		case <-time.After(min(delay, EventBackoffCap)):
		}
		delay *= 2
	}
}

func (r *EventRecorder) drop(e *corev1.Event, cause string, err error) {
	r.metrics.countDroppedEvent(cause)
	r.log.Info("event dropped", "cause", cause, "reason", e.Reason,
		"OpenMedModel", e.InvolvedObject.Namespace+"/"+e.InvolvedObject.Name, "error", errString(err))
}

// transient reports an error worth retrying: the API server was busy or
// unavailable, the request timed out, or the connection failed.
func transient(err error) bool {
	var netErr net.Error
	switch {
	case apierrors.IsTooManyRequests(err), apierrors.IsServiceUnavailable(err), apierrors.IsInternalError(err),
		apierrors.IsServerTimeout(err), apierrors.IsTimeout(err), apierrors.IsUnexpectedServerError(err):
		return true
	case errors.As(err, &netErr), errors.Is(err, context.DeadlineExceeded):
		return true
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		// Any other answer of the API server is final (forbidden, invalid,
		// not found, conflict). A gateway that answered 502/504 is not.
		code := status.Status().Code
		return code == 502 || code == 504
	}
	// No answer at all: a reset or refused connection, an EOF.
	return true
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// eventName names an event of the object named object at t as client-go's
// recorder does, "<object>.<nanoseconds in hex>", with the object's part cut
// so the name stays a DNS subdomain of at most 253 characters: an object
// named with 253 characters would otherwise give an event the API server
// refuses, and the event would be lost.
func eventName(object string, t time.Time) string {
	suffix := fmt.Sprintf(".%016x", t.UnixNano())
	if max := validation.DNS1123SubdomainMaxLength - len(suffix); len(object) > max {
		// A subdomain's labels end in a letter or digit.
		object = strings.TrimRight(object[:max], ".-")
	}
	return object + suffix
}
