// verify.go: the golden request (spec.verification). A pass plans which
// pods to ask (rollout.Plan.Verify); the verifier asks them off the
// reconcile workers (an answer can take attempts × timeout) and writes
// each verdict as the pod's openmed.ai/verified condition, whose watch
// event wakes the model.

package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kevents "k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/rollout"
	"github.com/openmed/openmed-operator/pkg/verify"
)

// Verification sizes: how many pods are asked at once, and how many wait.
const (
	verifyWorkers = 16
	verifyQueue   = 4096
)

// verifyRetryDelay is the pause between two attempts at one pod;
// verifyQueueFull is when a pass whose pods found the queue full asks
// again.
const (
	verifyRetryDelay = time.Second
	verifyQueueFull  = time.Second
)

// +kubebuilder:rbac:groups="",resources=pods/status,verbs=patch

// verifier sends the golden requests the passes plan and writes their
// verdicts. Only the leader runs it (a manager Runnable); a pod is asked
// by one worker at a time.
type verifier struct {
	// writer writes the verdict and reads a header's Secret, as the
	// model's ServiceAccount (writeAs).
	writer client.Client
	// events records on the model a verdict that could not be written
	// (nil: none).
	events  kevents.EventRecorder
	http    *http.Client
	manager string
	metrics *Metrics
	clock   func() time.Time

	jobs chan verifyJob
	mu   sync.Mutex
	// busy are the pods queued or being asked.
	busy map[types.NamespacedName]bool
	// written are the verdicts this process wrote, by pod, until a pass
	// shows the pod store has them: a pass that read the store before a
	// verdict arrived plans its pod again, on a view older than the
	// verdict, and is not served (a pod is asked once per verdict it
	// needs). Entries older than writtenKept go.
	written map[types.NamespacedName]writtenVerdict
}

// writtenVerdict is a verdict the verifier wrote: its lastProbeTime, and
// when (this process's clock) it was written.
type writtenVerdict struct {
	probed metav1.Time
	at     time.Time
}

// writtenKept is how long a written verdict is remembered: the pod store
// shows it within milliseconds; a pod whose verdict it never shows is gone.
const writtenKept = 2 * time.Minute

// verifyJob is one pod to ask for one model.
type verifyJob struct {
	model types.NamespacedName
	uid   types.UID
	// as is the ServiceAccount the verdict is written and a Secret read
	// as ("" for the operator's own rights).
	as   string
	spec *v1alpha1.Verification
	pod  rollout.PodVerification
}

func newVerifier(writer client.Client, events kevents.EventRecorder, manager string, metrics *Metrics, clock func() time.Time) *verifier {
	return &verifier{
		writer:  writer,
		events:  events,
		manager: manager,
		metrics: metrics,
		clock:   clock,
		// Each request dials the pod's IP: no proxy, no connection kept
		// (a pod is asked once, or once per interval while it bakes).
		http: &http.Client{Transport: &http.Transport{
			Proxy:             nil,
			DisableKeepAlives: true,
			DialContext:       (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		}, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		jobs:    make(chan verifyJob, verifyQueue),
		busy:    map[types.NamespacedName]bool{},
		written: map[types.NamespacedName]writtenVerdict{},
	}
}

// Start runs the workers until ctx ends.
func (v *verifier) Start(ctx context.Context) error {
	var wg sync.WaitGroup
	for range verifyWorkers {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case j := <-v.jobs:
					v.run(ctx, j)
				}
			}
		})
	}
	wg.Wait()
	return nil
}

// enqueue hands the pass's planned pods to the workers; a pod already
// queued or being asked is not queued again. It reports false when the
// queue is full: the pass asks again shortly.
func (v *verifier) enqueue(model types.NamespacedName, uid types.UID, as string, spec *v1alpha1.Verification, pods []rollout.PodVerification) bool {
	if spec != nil {
		spec = spec.DeepCopy()
		spec.Default()
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, p := range pods {
		key := types.NamespacedName{Namespace: model.Namespace, Name: p.Pod}
		if v.busy[key] {
			continue
		}
		if w, ok := v.written[key]; ok {
			if p.Probed.Before(&w.probed) {
				// Planned on a view older than the verdict written since.
				continue
			}
			delete(v.written, key)
		}
		select {
		case v.jobs <- verifyJob{model: model, uid: uid, as: as, spec: spec, pod: p}:
			v.busy[key] = true
		default:
			return false
		}
	}
	return true
}

// done ends the work on the pod key; probed, unless zero, is the
// lastProbeTime of the verdict written. Verdicts remembered longer than
// writtenKept are forgotten.
func (v *verifier) done(key types.NamespacedName, probed metav1.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.busy, key)
	now := time.Now()
	for k, w := range v.written {
		if now.Sub(w.at) > writtenKept {
			delete(v.written, k)
		}
	}
	if !probed.IsZero() {
		v.written[key] = writtenVerdict{probed: probed, at: now}
	}
}

// run asks one pod and writes its verdict.
func (v *verifier) run(ctx context.Context, j verifyJob) {
	key := types.NamespacedName{Namespace: j.model.Namespace, Name: j.pod.Pod}
	var probed metav1.Time
	defer func() { v.done(key, probed) }()
	log := ctrl.LoggerFrom(ctx).WithValues("OpenMedModel", j.model, "Pod", key.Name)
	status, reason, message := v.ask(ctx, j)
	if ctx.Err() != nil {
		return
	}
	// A write the API server did not take is made again twice; after that
	// the pod still has no verdict (or its old one), and the pass that
	// planned it plans it again (rollout's verifyRecheck).
	var err error
	for try := range 3 {
		if try > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Duration(try) * time.Second):
			}
		}
		if probed, err = v.write(ctx, j, status, reason, message); err == nil {
			return
		}
		log.Error(err, "write the verdict of the golden request")
	}
	if v.events != nil && ctx.Err() == nil {
		model := &v1alpha1.OpenMedModel{ObjectMeta: metav1.ObjectMeta{Namespace: j.model.Namespace, Name: j.model.Name, UID: j.uid}}
		v.events.Eventf(model, nil, corev1.EventTypeWarning, v1alpha1.VerdictWriteFailedReason, v1alpha1.VerdictWriteFailedReason,
			"The verdict of the golden request on pod %s could not be written as %s: %s; the pod stays unready until it can (patch on pods/status).",
			j.pod.Pod, identity(j.as), reasonOf(err))
	}
}

// ask sends the golden request up to attempts times and returns the
// verdict: status, reason and a bounded message that holds no header
// value.
func (v *verifier) ask(ctx context.Context, j verifyJob) (corev1.ConditionStatus, string, string) {
	if j.spec == nil || j.pod.Pass {
		return corev1.ConditionTrue, v1alpha1.PodNotVerifiedReason, "The model declares no golden request; the pod passes without one."
	}
	spec := j.spec
	fail := func(msg string) (corev1.ConditionStatus, string, string) {
		return corev1.ConditionFalse, v1alpha1.PodVerificationFailedReason, rollout.Shorten(msg, rollout.MaxRefusalMessage)
	}
	if j.pod.Port == 0 {
		return fail(fmt.Sprintf("the pod has no container port named %q", spec.Request.Port.StrVal))
	}
	if msg := refusedIP(j.pod.IP); msg != "" {
		return fail(msg)
	}
	prog, err := verify.Compile(spec.SuccessCondition)
	if err != nil {
		return fail(err.Error())
	}
	header, err := v.headers(ctx, j)
	if err != nil {
		return fail(err.Error())
	}
	req := verify.Request{
		URL:     "http://" + net.JoinHostPort(j.pod.IP, strconv.Itoa(int(j.pod.Port))) + spec.Request.Path,
		Method:  spec.Request.Method,
		Header:  header,
		Body:    spec.Request.Body,
		Timeout: time.Duration(*spec.Request.TimeoutSeconds) * time.Second,
	}
	var res verify.Result
	for attempt := range int(*spec.Attempts) {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return fail("the operator stopped")
			case <-time.After(verifyRetryDelay):
			}
		}
		sent := time.Now()
		res = verify.Send(ctx, v.http, req, prog)
		if res.Reason == verify.ReasonCanceled {
			return fail("the operator stopped")
		}
		// The whole attempt, answered or not (a timeout counts its wait).
		v.metrics.countVerification(j.model.Namespace, res.Reason, time.Since(sent))
		if res.Passed {
			return corev1.ConditionTrue, v1alpha1.PodVerifiedReason, rollout.Shorten(
				fmt.Sprintf("%s %s %s", spec.Request.Method, spec.Request.Path, res.Message), rollout.MaxRefusalMessage)
		}
	}
	return fail(fmt.Sprintf("%s %s failed %d of %d attempts: %s", spec.Request.Method, spec.Request.Path, *spec.Attempts, *spec.Attempts, res.Message))
}

// headers resolves the request's headers; a value from a Secret is read
// as the model's ServiceAccount, at request time, and kept nowhere.
func (v *verifier) headers(ctx context.Context, j verifyJob) (http.Header, error) {
	h := http.Header{}
	for _, hd := range j.spec.Request.Headers {
		switch {
		case hd.Value != nil:
			h.Set(hd.Name, *hd.Value)
		case hd.ValueFrom != nil:
			ref := hd.ValueFrom.SecretKeyRef
			s := &corev1.Secret{}
			if err := v.writer.Get(writeAs(ctx, j.model.Namespace, j.as), types.NamespacedName{Namespace: j.model.Namespace, Name: ref.Name}, s); err != nil {
				return nil, fmt.Errorf("header %s: read Secret %s as %s: %s", hd.Name, ref.Name, identity(j.as), reasonOf(err))
			}
			val, ok := s.Data[ref.Key]
			if !ok {
				return nil, fmt.Errorf("header %s: Secret %s has no key %s", hd.Name, ref.Name, ref.Key)
			}
			h.Set(hd.Name, string(val))
		}
	}
	return h, nil
}

// refusedIP says why the verifier does not dial ip, or "". A pod's IP is
// its status's, which whoever may patch the pod's status can write: the
// addresses no pod has — link-local ones (a cloud's metadata service at
// 169.254.169.254), multicast, unspecified — are never dialled.
func refusedIP(ip string) string {
	a, err := netip.ParseAddr(ip)
	switch {
	case err != nil:
		return fmt.Sprintf("the pod's IP %q is no IP address", ip)
	case a.IsLinkLocalUnicast(), a.IsLinkLocalMulticast(), a.IsMulticast(), a.IsUnspecified(), a.IsInterfaceLocalMulticast():
		return fmt.Sprintf("the pod's IP %s is no pod's address (link-local, multicast or unspecified): not dialled", ip)
	}
	return ""
}

// identity names who a request is made as, for a message.
func identity(as string) string {
	if as == "" {
		return "the operator"
	}
	return "ServiceAccount " + as
}

// reasonOf is the API server's short reason for err (Forbidden, NotFound,
// ...), never its message, which can be long.
func reasonOf(err error) string {
	if s, ok := err.(interface{ Status() metav1.Status }); ok && s.Status().Reason != "" {
		return string(s.Status().Reason)
	}
	return "request failed"
}

// write sets the pod's verified condition by server-side apply of that
// one condition on pods/status, as the model's ServiceAccount: the
// kubelet's conditions and anyone else's stay theirs.
func (v *verifier) write(ctx context.Context, j verifyJob, status corev1.ConditionStatus, reason, message string) (metav1.Time, error) {
	now := metav1.NewTime(v.clock()).Rfc3339Copy()
	since := now
	if j.pod.Was == status && !j.pod.Since.IsZero() {
		since = j.pod.Since
	}
	body, err := json.Marshal(map[string]any{
		"apiVersion": "v1",
		"kind":       "Pod",
		"metadata":   map[string]any{"name": j.pod.Pod, "namespace": j.model.Namespace},
		"status": map[string]any{"conditions": []any{map[string]any{
			"type":               v1alpha1.VerifiedCondition,
			"status":             string(status),
			"reason":             reason,
			"message":            message,
			"lastProbeTime":      now,
			"lastTransitionTime": since,
		}}},
	})
	if err != nil {
		return metav1.Time{}, err
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: j.model.Namespace, Name: j.pod.Pod}}
	if err := v.writer.Status().Patch(writeAs(ctx, j.model.Namespace, j.as), pod, client.RawPatch(types.ApplyPatchType, body),
		client.FieldOwner(v.manager), client.ForceOwnership); err != nil {
		return metav1.Time{}, err
	}
	return now, nil
}
