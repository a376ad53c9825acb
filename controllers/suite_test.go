package controllers_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/events"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
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

// writeCounter counts the mutating requests a client sends.
type writeCounter struct {
	mu     sync.Mutex
	counts map[string]int
	total  atomic.Int64
}

func (w *writeCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		switch req.Method {
		case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
			w.total.Add(1)
			w.mu.Lock()
			w.counts[req.Method+" "+req.URL.Path]++
			w.mu.Unlock()
		}
		return rt.RoundTrip(req)
	})
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
	cancel   context.CancelFunc
	done     chan error
}

// startOperator runs the reconciler in a fresh manager until stop. Each call
// registers its own openmed_* metrics in a private registry.
func startOperator(t *testing.T) *operator {
	t.Helper()
	writes := &writeCounter{counts: map[string]int{}}
	cfg := rest.CopyConfig(env.Config)
	cfg.WrapTransport = writes.wrap
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:  env.Scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		// Managers are started and stopped many times in one process.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	recorder, err := events.NewRecorder(mgr.GetLogger(), "", controllers.ControllerName, events.WithManager(mgr))
	if err != nil {
		t.Fatal(err)
	}
	registry := prometheus.NewRegistry()
	metrics := controllers.NewMetrics(registry)
	ctx, cancel := context.WithCancel(context.Background())
	r := &controllers.OpenMedModelReconciler{
		Client:          mgr.GetClient(),
		EventRecorder:   recorder,
		ModelMetrics:    metrics,
		RequeueInterval: 2 * time.Second,
	}
	if err := r.SetupWithManager(ctx, mgr, controllers.Options{MaxConcurrentReconciles: 2}); err != nil {
		cancel()
		t.Fatal(err)
	}
	op := &operator{writes: writes, registry: registry, cancel: cancel, done: make(chan error, 1)}
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
