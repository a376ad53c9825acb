package controllers

import (
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Metrics are the openmed_* metrics of the reconciler. Register them once
// per process (NewMetrics with a registry, or MustRegisterMetrics for
// controller-runtime's registry that the manager serves).
type Metrics struct {
	modelInfo       *prometheus.GaugeVec
	rolloutDuration *prometheus.HistogramVec
	rollbacks       *prometheus.CounterVec
	drift           *prometheus.CounterVec

	mu   sync.Mutex
	info map[string][]string // namespace/name -> the label values set last
}

// NewMetrics builds the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		modelInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "openmed_model_info",
			Help: "The model version and phase of each OpenMedModel (always 1).",
		}, []string{"namespace", "name", "version", "phase"}),
		rolloutDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "openmed_rollout_duration_seconds",
			Help:    "Time from the start of a rollout to the desired version being available.",
			Buckets: []float64{1, 5, 15, 30, 60, 120, 300, 600, 1200, 3600},
		}, []string{"namespace", "name"}),
		rollbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "openmed_rollbacks_total",
			Help: "Rollbacks started, automatic or manual.",
		}, []string{"namespace", "name", "trigger"}),
		drift: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "openmed_drift_corrections_total",
			Help: "Owned target fields corrected after another field manager changed them, by that manager.",
		}, []string{"manager"}),
		info: map[string][]string{},
	}
	reg.MustRegister(m.modelInfo, m.rolloutDuration, m.rollbacks, m.drift)
	return m
}

var (
	defaultMetricsOnce sync.Once
	defaultMetrics     *Metrics
)

// MustRegisterMetrics returns the metrics registered with controller-runtime's
// registry (served on the manager's metrics endpoint), registering them on
// first use.
func MustRegisterMetrics() *Metrics {
	defaultMetricsOnce.Do(func() { defaultMetrics = NewMetrics(crmetrics.Registry) })
	return defaultMetrics
}

func (m *Metrics) setModelInfo(namespace, name, version, phase string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	key := namespace + "/" + name
	labels := []string{namespace, name, version, phase}
	if old, ok := m.info[key]; ok {
		if slices.Equal(old, labels) {
			return
		}
		m.modelInfo.DeleteLabelValues(old...)
	}
	m.modelInfo.WithLabelValues(labels...).Set(1)
	m.info[key] = labels
}

func (m *Metrics) deleteModel(namespace, name string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	key := namespace + "/" + name
	if old, ok := m.info[key]; ok {
		m.modelInfo.DeleteLabelValues(old...)
		delete(m.info, key)
	}
	m.rolloutDuration.DeleteLabelValues(namespace, name)
}

func (m *Metrics) observeRollout(namespace, name string, d time.Duration) {
	if m != nil && d >= 0 {
		m.rolloutDuration.WithLabelValues(namespace, name).Observe(d.Seconds())
	}
}

func (m *Metrics) countRollback(namespace, name, trigger string) {
	if m != nil {
		m.rollbacks.WithLabelValues(namespace, name, trigger).Inc()
	}
}

func (m *Metrics) countDrift(manager string) {
	if m != nil {
		m.drift.WithLabelValues(manager).Inc()
	}
}
