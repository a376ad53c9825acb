package controllers

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fluxcd/pkg/runtime/events"
	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	kevents "k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/openmed/openmed-operator/health"
	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// EventForwarder forwards the reconciler's events to Flux's
// notification-controller (--events-addr) with Flux's events.Recorder, so
// the payload is Flux's event protocol (an event/v1beta1 Event naming the
// OpenMedModel as its involved object) and notification-controller's
// Alerts route it.
//
// Flux's recorder posts synchronously, retrying a refused or failed post
// four times, 1, 2, 4 and 8 s apart, each with a 5 s timeout: about 15 s
// per event while notification-controller refuses connections, 40 s while
// it does not answer. Called from the reconciler, that would hold a worker,
// and every model behind it, for as long. The forwarder posts from a queue
// of its own instead, one event after the other in the order they were
// recorded; Recorder returns at once. A full queue drops the event
// (openmed_events_forward_dropped_total, cause queue-full), as does
// shutdown with events left or recorded after it (cause shutdown). A post
// that fails after Flux's retries is logged by Flux's recorder ("unable to
// record event"). Events are best effort; status is the record.
type EventForwarder struct {
	webhook events.Recorder
	scheme  *runtime.Scheme
	metrics *Metrics
	log     logr.Logger
	queue   chan forwarded

	// mu guards stopped: once Start has stopped, an event is counted, not
	// queued.
	mu      sync.Mutex
	stopped bool
	// pending counts the events queued or being posted.
	pending atomic.Int64
}

type forwarded struct {
	obj                      *metav1.PartialObjectMetadata
	metadata                 map[string]string
	eventtype, reason, event string
}

// ForwardQueueSize bounds the events waiting to be forwarded.
const ForwardQueueSize = 1024

// eventMetadataPrefix is the annotation prefix Flux's recorder copies from
// the object into the event's metadata (eventv1.Group + "/").
const eventMetadataPrefix = "event.toolkit.fluxcd.io/"

// NewEventForwarder returns a forwarder posting to addr (notification-
// controller's event endpoint, e.g.
// http://notification-controller.flux-system.svc.cluster.local./) as
// controller. Start must run (the manager runs it when added with mgr.Add).
func NewEventForwarder(addr, controller string, scheme *runtime.Scheme, metrics *Metrics, log logr.Logger) (*EventForwarder, error) {
	if log.GetSink() == nil {
		// Flux's recorder reads the sink of its logger (logr.Discard has none).
		log = funcr.New(func(string, string) {}, funcr.Options{})
	}
	// Webhook only: the Kubernetes Event is written by the recorder the
	// forwarder wraps (Recorder).
	rec, err := events.NewRecorder(log, addr, controller, events.WithScheme(scheme))
	if err != nil {
		return nil, err
	}
	return &EventForwarder{webhook: rec, scheme: scheme, metrics: metrics, log: log, queue: make(chan forwarded, ForwardQueueSize)}, nil
}

// Recorder returns a recorder that records each event with kube (the
// Kubernetes Event) and queues it for notification-controller.
func (f *EventForwarder) Recorder(kube kevents.EventRecorder) kevents.EventRecorder {
	return &forwardingRecorder{kube: kube, f: f}
}

// Start posts queued events until ctx ends. Then it refuses new events and
// gives the queue up to a second to drain; every event left, and every one
// recorded after (a reconcile that finishes after the forwarder stopped),
// is counted as dropped. A post in flight is not waited for past that
// second (Flux's client takes no context): shutdown stays bounded.
func (f *EventForwarder) Start(ctx context.Context) error {
	quit := make(chan struct{})
	go func() {
		for {
			select {
			case e := <-f.queue:
				select {
				case <-quit:
					f.drop(e, dropShutdown)
				default:
					f.post(e)
				}
				f.pending.Add(-1)
			case <-quit:
				return
			}
		}
	}()
	<-ctx.Done()
	f.mu.Lock()
	f.stopped = true
	f.mu.Unlock()
	deadline := time.Now().Add(time.Second)
	for f.pending.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	close(quit)
	f.dropQueued()
	return nil
}

// dropQueued counts what is still queued once the worker was told to quit.
func (f *EventForwarder) dropQueued() {
	for {
		select {
		case e := <-f.queue:
			f.drop(e, dropShutdown)
			f.pending.Add(-1)
		default:
			return
		}
	}
}

// NeedLeaderElection is false: only the leader reconciles, so only the
// leader forwards.
func (f *EventForwarder) NeedLeaderElection() bool { return false }

func (f *EventForwarder) post(e forwarded) {
	f.webhook.AnnotatedEventf(e.obj, nil, e.metadata, e.eventtype, e.reason, e.reason, "%s", e.event)
}

func (f *EventForwarder) enqueue(obj runtime.Object, eventtype, reason, message string) {
	o, ok := obj.(client.Object)
	if !ok {
		return
	}
	gvk, err := apiutil.GVKForObject(o, f.scheme)
	if err != nil {
		f.log.Error(err, "cannot reference the object of an event", "reason", reason)
		return
	}
	// The reference and the metadata Flux reads, not the object: the
	// reconciler goes on changing it, and a queued model would hold its
	// spec and status.
	ref := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Name: o.GetName(), Namespace: o.GetNamespace(), UID: o.GetUID(), ResourceVersion: o.GetResourceVersion(),
	}}
	ref.SetGroupVersionKind(gvk)
	for k, v := range o.GetAnnotations() {
		if strings.HasPrefix(k, eventMetadataPrefix) {
			if ref.Annotations == nil {
				ref.Annotations = map[string]string{}
			}
			ref.Annotations[k] = v
		}
	}
	e := forwarded{obj: ref, metadata: ModelEventMetadata(o), eventtype: eventtype, reason: reason, event: message}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		f.drop(e, dropShutdown)
		return
	}
	select {
	case f.queue <- e:
		f.pending.Add(1)
	default:
		f.drop(e, dropQueueFull)
	}
}

func (f *EventForwarder) drop(e forwarded, cause string) {
	f.metrics.countForwardDropped(cause)
	f.log.Info("event not forwarded", "cause", cause, "reason", e.reason, "OpenMedModel", e.obj.Namespace+"/"+e.obj.Name)
}

// Event metadata the forwarder adds for an OpenMedModel. notification-
// controller keeps metadata keys prefixed with the involved object's API
// group and delivers them without the prefix, next to the message (Slack
// fields, the generic webhook's JSON). Its duplicate filter
// (--rate-limit-interval, 5 minutes by default) keys on the message and the
// revision: the model's version, so a second version failing within the
// interval still reaches you.
const (
	// MetaRevision is spec.version, the version the event is about.
	MetaRevision = "openmed.ai/revision"
	// MetaServing is status.activeVersion, the version the Deployment
	// serves once the event's step is done.
	MetaServing = "openmed.ai/serving"
	// MetaHealth is the model's health (health.Assess: Healthy,
	// Progressing, Degraded, Suspended), as Argo CD shows it.
	MetaHealth = "openmed.ai/health"
	// MetaHealthMessage is the health's message, as Argo CD shows it:
	// which version failed, which one serves or is being restored.
	MetaHealthMessage = "openmed.ai/health-message"
)

// ModelEventMetadata is the metadata forwarded with an event of obj, from
// the status written before the event.
func ModelEventMetadata(obj client.Object) map[string]string {
	m, ok := obj.(*v1alpha1.OpenMedModel)
	if !ok {
		return nil
	}
	md := map[string]string{MetaRevision: m.Spec.Version}
	if m.Status.ActiveVersion != "" {
		md[MetaServing] = m.Status.ActiveVersion
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(m)
	if err != nil {
		return md
	}
	h := health.Assess(&unstructured.Unstructured{Object: u})
	md[MetaHealth] = string(h.Code)
	if h.Message != "" {
		md[MetaHealthMessage] = h.Message
	}
	return md
}

// forwardingRecorder records with kube and queues for the forwarder.
type forwardingRecorder struct {
	kube kevents.EventRecorder
	f    *EventForwarder
}

// Eventf implements kevents.EventRecorder.
func (r *forwardingRecorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	r.kube.Eventf(regarding, related, eventtype, reason, action, note, args...)
	r.f.enqueue(regarding, eventtype, reason, fmt.Sprintf(note, args...))
}
