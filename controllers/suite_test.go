package controllers_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/events"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/openmed/openmed-operator/controllers"
	"github.com/openmed/openmed-operator/pkg/testenv"
)

// env is the real kube-apiserver and etcd shared by this package's tests. It
// runs no controllers: tests write Deployment status themselves.
var env *testenv.Environment

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	if os.Getenv("OPENMED_TEST_LOG") != "" {
		ctrl.SetLogger(zap.New(zap.UseDevMode(true)))
	}
	testenv.Main(m, func(e *testenv.Environment) { env = e })
}

// writeCounter counts the mutating requests a client sends, keeps their
// bodies, and fails the ones a fault rule selects.
type writeCounter struct {
	mu     sync.Mutex
	counts map[string]int
	bodies map[string][]string
	// codes holds the status code of every answer the API server gave a
	// write (an injected answer is not the API server's and is not kept).
	codes map[string][]int
	// users holds, per write, the user it impersonated ("" for the
	// operator's own identity).
	users  map[string][]string
	faults []*fault
	total  atomic.Int64
	// reads counts the GETs that are not watches, by path (a list's path
	// is the collection's); readQueries keeps their queries.
	reads       map[string]int
	readQueries map[string][]url.Values
	// watchDelay, when not zero, holds each read of a Deployment watch
	// stream that long, so the cache receives events that far apart.
	watchDelay atomic.Int64
}

// slowBody delays every read of a watch stream by the writeCounter's
// watchDelay.
type slowBody struct {
	io.ReadCloser
	w *writeCounter
}

func (b slowBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if d := time.Duration(b.w.watchDelay.Load()); d > 0 && n > 0 {
		time.Sleep(d)
	}
	return n, err
}

// fault answers the writes it matches with status instead of the API
// server, times times (negative: until cleared), before or after the
// request took effect; with reset it answers nothing (the connection is
// reset). before, when set, runs first, as another writer racing the
// request would.
type fault struct {
	match  func(method, path, body string) bool
	status int
	after  bool
	reset  bool
	before func()
	times  int
	hits   atomic.Int64
}

// reasonFor is the Status reason the API server gives with code.
func reasonFor(code int) metav1.StatusReason {
	switch code {
	case http.StatusConflict:
		return metav1.StatusReasonConflict
	case http.StatusTooManyRequests:
		return metav1.StatusReasonTooManyRequests
	case http.StatusInternalServerError:
		return metav1.StatusReasonInternalError
	}
	return metav1.StatusReasonServiceUnavailable
}

// inject adds a fault rule and returns a function that clears it.
func (w *writeCounter) inject(f *fault) func() {
	w.mu.Lock()
	w.faults = append(w.faults, f)
	w.mu.Unlock()
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		for i, x := range w.faults {
			if x == f {
				w.faults = append(w.faults[:i], w.faults[i+1:]...)
				return
			}
		}
	}
}

func (w *writeCounter) faultFor(method, path, body string) *fault {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, f := range w.faults {
		if f.times != 0 && f.match(method, path, body) {
			if f.times > 0 {
				f.times--
			}
			f.hits.Add(1)
			return f
		}
	}
	return nil
}

func (w *writeCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		switch req.Method {
		case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		default:
			if req.Method == http.MethodGet && req.URL.Query().Get("watch") != "true" {
				w.mu.Lock()
				if w.reads == nil {
					w.reads = map[string]int{}
				}
				w.reads[req.URL.Path]++
				if w.readQueries == nil {
					w.readQueries = map[string][]url.Values{}
				}
				w.readQueries[req.URL.Path] = append(w.readQueries[req.URL.Path], req.URL.Query())
				w.mu.Unlock()
			}
			resp, err := rt.RoundTrip(req)
			if err == nil && req.URL.Query().Get("watch") == "true" && strings.HasSuffix(req.URL.Path, "/deployments") {
				resp.Body = slowBody{ReadCloser: resp.Body, w: w}
			}
			return resp, err
		}
		var body []byte
		if req.Body != nil {
			body, _ = io.ReadAll(req.Body)
			req.Body = io.NopCloser(bytes.NewReader(body))
		}
		key := req.Method + " " + req.URL.Path
		w.total.Add(1)
		w.mu.Lock()
		w.counts[key]++
		w.bodies[key] = append(w.bodies[key], string(body))
		w.users[key] = append(w.users[key], req.Header.Get("Impersonate-User"))
		w.mu.Unlock()
		f := w.faultFor(req.Method, req.URL.Path, string(body))
		if f == nil {
			return w.answer(rt, req, key)
		}
		if f.before != nil {
			f.before()
			if f.status == 0 && !f.reset {
				return w.answer(rt, req, key)
			}
		}
		if f.after {
			resp, err := rt.RoundTrip(req)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
		if f.reset {
			return nil, syscall.ECONNRESET
		}
		msg := fmt.Sprintf(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"injected","reason":%q,"code":%d}`, reasonFor(f.status), f.status)
		return &http.Response{StatusCode: f.status, Status: http.StatusText(f.status), Request: req,
			Header: http.Header{"Content-Type": []string{"application/json"}}, Body: io.NopCloser(strings.NewReader(msg))}, nil
	})
}

// answer sends req to the API server and keeps the code it answered.
func (w *writeCounter) answer(rt http.RoundTripper, req *http.Request, key string) (*http.Response, error) {
	resp, err := rt.RoundTrip(req)
	if err == nil {
		w.mu.Lock()
		w.codes[key] = append(w.codes[key], resp.StatusCode)
		w.mu.Unlock()
	}
	return resp, err
}

// answered counts the writes to paths containing part that the API server
// answered with code.
func (w *writeCounter) answered(method, part string, code int) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for k, codes := range w.codes {
		if strings.HasPrefix(k, method+" ") && strings.Contains(k, part) {
			for _, c := range codes {
				if c == code {
					n++
				}
			}
		}
	}
	return n
}

// requests returns the bodies of the writes sent to paths ending in suffix.
func (w *writeCounter) requests(method, suffix string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for k, v := range w.bodies {
		if strings.HasPrefix(k, method+" ") && strings.HasSuffix(k, suffix) {
			out = append(out, v...)
		}
	}
	return out
}

// writesAs returns the writes whose path contains part, each as "method
// path as user" with the user it impersonated ("" for the operator's own).
func (w *writeCounter) writesAs(part string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for k, users := range w.users {
		if strings.Contains(k, part) {
			for _, u := range users {
				out = append(out, k+" as "+u)
			}
		}
	}
	sort.Strings(out)
	return out
}

// readsOf returns how many GETs (not watches) were sent to path.
func (w *writeCounter) readsOf(path string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.reads[path]
}

// queriesOf returns the queries of the reads of path, in order.
func (w *writeCounter) queriesOf(path string) []url.Values {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.readQueries[path])
}

func (w *writeCounter) snapshot() (int64, map[string]int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := make(map[string]int, len(w.counts))
	for k, v := range w.counts {
		c[k] = v
	}
	return w.total.Load(), c
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// operator is a controller-runtime manager running the reconciler, with
// every write it sends counted.
type operator struct {
	writes   *writeCounter
	registry *prometheus.Registry
	// cache is the manager's cache and reconciler the operator: what it
	// holds in memory (Deployments: reconciler.HoldsDeployment).
	cache      cache.Cache
	reconciler *controllers.OpenMedModelReconciler
	cancel     context.CancelFunc
	done       chan error
}

// startOperator runs the reconciler in a fresh manager until stop. Each call
// registers its own openmed_* metrics in a private registry.
func startOperator(t *testing.T) *operator {
	t.Helper()
	return startOperatorIn(t, "")
}

// startOperatorIn is startOperator watching namespace only ("" for all):
// the models other tests left behind are not its to reconcile, so its
// metrics count this namespace's passes alone.
func startOperatorIn(t *testing.T, namespace string) *operator {
	t.Helper()
	return startOperatorWith(t, namespace, "")
}

// startOperatorWith is startOperatorIn with the reconciler's
// DefaultServiceAccount (the operator's --default-service-account).
func startOperatorWith(t *testing.T, namespace, defaultServiceAccount string) *operator {
	t.Helper()
	return startOperatorShard(t, namespace, defaultServiceAccount, nil)
}

// startOperatorShard is startOperatorWith for the shard whose models
// selects (the operator's --watch-label-selector; nil for all).
func startOperatorShard(t *testing.T, namespace, defaultServiceAccount string, models labels.Selector) *operator {
	t.Helper()
	return startOperatorOn(t, env.Config, namespace, defaultServiceAccount, models)
}

// startOperatorAs is startOperatorWith on base instead of the
// administrator's config: the operator authenticates as base's user and
// holds only that user's rights.
func startOperatorAs(t *testing.T, base *rest.Config, namespace, defaultServiceAccount string) *operator {
	t.Helper()
	return startOperatorOn(t, base, namespace, defaultServiceAccount, nil)
}

// startOperatorOn is startOperatorShard on base.
func startOperatorOn(t *testing.T, base *rest.Config, namespace, defaultServiceAccount string, models labels.Selector) *operator {
	t.Helper()
	writes := &writeCounter{counts: map[string]int{}, bodies: map[string][]string{}, codes: map[string][]int{}, users: map[string][]string{}}
	cfg := rest.CopyConfig(base)
	cfg.WrapTransport = writes.wrap
	cacheOpts := cache.Options{ByObject: controllers.CacheByObject(models)}
	if namespace != "" {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{namespace: {}}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:  env.Scheme,
		Cache:   cacheOpts,
		Metrics: metricsserver.Options{BindAddress: "0"},
		// Managers are started and stopped many times in one process.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	registry := prometheus.NewRegistry()
	metrics := controllers.NewMetrics(registry)
	kubeEvents := controllers.NewEventRecorder(mgr.GetClient(), env.Scheme, controllers.ControllerName, metrics, mgr.GetLogger())
	if err := mgr.Add(kubeEvents); err != nil {
		t.Fatal(err)
	}
	recorder, err := events.NewRecorder(mgr.GetLogger(), "", controllers.ControllerName,
		events.WithScheme(env.Scheme), events.WithLegacyEventRecorder(kubeEvents))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &controllers.OpenMedModelReconciler{
		Client:          mgr.GetClient(),
		EventRecorder:   recorder,
		ModelMetrics:    metrics,
		RequeueInterval: 2 * time.Second,

		DefaultServiceAccount: defaultServiceAccount,
	}
	if err := r.SetupWithManager(ctx, mgr, controllers.Options{MaxConcurrentReconciles: 2, Namespace: namespace, Models: models}); err != nil {
		cancel()
		t.Fatal(err)
	}
	op := &operator{writes: writes, registry: registry, cache: mgr.GetCache(), reconciler: r, cancel: cancel, done: make(chan error, 1)}
	go func() { op.done <- mgr.Start(ctx) }()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		cancel()
		t.Fatal("cache did not sync")
	}
	t.Cleanup(op.stop)
	return op
}

// stop stops the manager and waits for it; safe to call twice.
func (o *operator) stop() {
	if o.cancel == nil {
		return
	}
	o.cancel()
	o.cancel = nil
	select {
	case err := <-o.done:
		if err != nil {
			fmt.Fprintln(os.Stderr, "manager:", err)
		}
	case <-time.After(30 * time.Second):
		fmt.Fprintln(os.Stderr, "manager did not stop in 30s")
	}
}

// metric sums the samples of a metric family whose labels include want.
func (o *operator) metric(t *testing.T, name string, want map[string]string) float64 {
	t.Helper()
	families, err := o.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	sample:
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue sample
				}
			}
			switch {
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return sum
}
