package controllers

import (
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/openmed/openmed-operator/controllers/internal/store"
	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/rollout"
	"github.com/openmed/openmed-operator/pkg/verify"
	"github.com/openmed/openmed-operator/pkg/version"
)

// Metric names, documented in docs/monitoring.md and used by
// the dashboard and alerts in examples/monitoring.
const (
	MetricModelInfo          = "openmed_model_info"
	MetricRollouts           = "openmed_rollouts_total"
	MetricRolloutDuration    = "openmed_rollout_duration_seconds"
	MetricRollbacks          = "openmed_rollbacks_total"
	MetricDriftCorrections   = "openmed_drift_corrections_total"
	MetricOwnershipConflicts = "openmed_ownership_conflicts_total"
	MetricReconcileErrors    = "openmed_reconcile_errors_total"
	MetricEventsDropped      = "openmed_events_dropped_total"
	MetricEventsNotForwarded = "openmed_events_forward_dropped_total"
	MetricBakeFailures       = "openmed_bake_failures_total"
	MetricPasses             = "openmed_passes_total"
	MetricBackstopUnchanged  = "openmed_backstop_passes_unchanged_total"
	MetricWakes              = "openmed_wakes_total"
	MetricBuildInfo          = "openmed_build_info"
	MetricVerifications      = "openmed_verification_requests_total"
	MetricVerificationTime   = "openmed_verification_request_duration_seconds"
)

// Metrics are the openmed_* metrics of the reconciler. Only
// openmed_model_info has a series per model (one); the others are labelled
// by namespace, manager, field or reason, so a scrape stays small as the
// number of models grows. Register them once per process (NewMetrics with a
// registry, or MustRegisterMetrics for controller-runtime's registry that
// the manager serves). A nil *Metrics records nothing. openmed_build_info,
// registered with them, says which build serves them (pkg/version).
type Metrics struct {
	modelInfo       *modelInfo
	rollouts        *prometheus.CounterVec
	rolloutDuration prometheus.Histogram
	rollbacks       *prometheus.CounterVec
	drift           *prometheus.CounterVec
	conflicts       *prometheus.CounterVec
	errors          *prometheus.CounterVec
	eventsDropped   *prometheus.CounterVec
	notForwarded    *prometheus.CounterVec
	bakeFailures    *prometheus.CounterVec
	passes          *prometheus.CounterVec
	unchanged       prometheus.Counter
	// passesBy are passes' counters by woken_by, read-only once built.
	passesBy map[string]prometheus.Counter
	wakes    *prometheus.CounterVec
	// verifications and verificationTime are the golden requests sent, by
	// result, and how long each took.
	verifications    *prometheus.CounterVec
	verificationTime prometheus.Histogram
	// wakesBy are wakes' counters by source, read-only once built.
	wakesBy map[string]prometheus.Counter

	// managers and fields bound the manager and field labels (MaxLabelValues).
	managers, fields boundedLabel

	mu sync.Mutex
	// namespaces whose rollout and rollback counters are initialised.
	namespaces map[string]bool
}

// NewMetrics builds the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		modelInfo: &modelInfo{
			desc: prometheus.NewDesc(MetricModelInfo,
				"One series per OpenMedModel (always 1): its active version, phase, Ready status and reason, and whether it is Stalled.",
				[]string{"namespace", "name", "version", "phase", "ready", "reason", "stalled"}, nil),
			models: map[modelKey]modelState{},
		},
		rollouts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricRollouts,
			Help: "Model rollouts that ended, by result (succeeded or failed).",
		}, []string{"namespace", "result"}),
		rolloutDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    MetricRolloutDuration,
			Help:    "Time from the start of a model rollout to the desired version being available.",
			Buckets: []float64{1, 5, 15, 30, 60, 120, 300, 600, 1200, 3600},
		}),
		rollbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricRollbacks,
			Help: "Rollbacks started, by trigger (automatic or manual).",
		}, []string{"namespace", "trigger"}),
		drift: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricDriftCorrections,
			Help: "Owned target fields corrected or replaced after another field manager set them, by that manager (\"\" when none is on record; \"other\" past the first 32 names).",
		}, []string{"manager"}),
		conflicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricOwnershipConflicts,
			Help: "Ownership conflicts detected: one field manager kept reverting a field the operator owns (\"other\" past the first 32 managers or fields).",
		}, []string{"manager", "field"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricReconcileErrors,
			Help: "Passes that failed, by the reason reported in status (or StatusWriteFailed when the status itself could not be written).",
		}, []string{"reason"}),
		eventsDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricEventsDropped,
			Help: "Kubernetes Events given up on, by cause (rejected, retries-exhausted, queue-full, shutdown).",
		}, []string{"cause"}),
		notForwarded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricEventsNotForwarded,
			Help: "Events not forwarded to notification-controller (--events-addr), by cause (queue-full, shutdown).",
		}, []string{"cause"}),
		bakeFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricBakeFailures,
			Help: "Versions that failed their bake (spec.rolloutStrategy.bakeSeconds), by what the pods showed (ContainerRestarted, OOMKilled, PodUnready).",
		}, []string{"namespace", "reason"}),
		passes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricPasses,
			Help: "Passes started, by what woke them: event (a watch event), backstop (the timer of a rollout in flight that guards against a missed event), timer (a deadline, a bake's end, a grace), follow-up, cache-lag, retry, unclaimed-target.",
		}, []string{"woken_by"}),
		unchanged: prometheus.NewCounter(prometheus.CounterOpts{
			Name: MetricBackstopUnchanged,
			Help: "Passes woken by the backstop timer that found every input as the pass before them read it, before any judgment's timer, and ended without deciding again (they are counted in openmed_passes_total too).",
		}),
		wakes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricWakes,
			Help: "Watch events that woke a model (put it in the queue, or met it there), by the object's kind: model, deployment, manifest-configmap, bake-pod, pending-pod. Several events a model meets in the queue make one pass.",
		}, []string{"source"}),
		verifications: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricVerifications,
			Help: "Golden requests sent to model pods (spec.verification), one per attempt, by namespace and result: " + strings.Join(verificationResults, ", ") + ".",
		}, []string{"namespace", "result"}),
		verificationTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    MetricVerificationTime,
			Help:    "Time from sending a golden request to a model pod to its answer judged (or its timeout).",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
		}),
		namespaces: map[string]bool{},
	}
	reg.MustRegister(buildInfo(version.Get()))
	reg.MustRegister(m.modelInfo, m.rollouts, m.rolloutDuration, m.rollbacks, m.drift, m.conflicts, m.errors, m.eventsDropped, m.notForwarded, m.bakeFailures, m.passes, m.unchanged, m.wakes, m.verifications, m.verificationTime)
	// Counters whose label values are known start at 0, so rate() and
	// increase() see their first increment and alerts cannot miss it.
	for _, reason := range errorReasons {
		m.errors.WithLabelValues(reason)
	}
	for _, cause := range dropCauses {
		m.eventsDropped.WithLabelValues(cause)
	}
	m.passesBy = make(map[string]prometheus.Counter, len(wokenBy))
	for _, cause := range wokenBy {
		m.passesBy[cause] = m.passes.WithLabelValues(cause)
	}
	m.wakesBy = make(map[string]prometheus.Counter, len(wakeSources))
	for _, source := range wakeSources {
		m.wakesBy[source] = m.wakes.WithLabelValues(source)
	}
	for _, cause := range []string{dropQueueFull, dropShutdown} {
		m.notForwarded.WithLabelValues(cause)
	}
	return m
}

// buildInfo is openmed_build_info: always 1, its labels the build's version,
// commit and Go toolchain: which build each replica runs (during an
// upgrade, two), to join other series on.
func buildInfo(i version.Info) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        MetricBuildInfo,
		Help:        "The operator's build (always 1): its version, the commit it was built from and the Go toolchain that built it.",
		ConstLabels: prometheus.Labels{"version": i.Version, "commit": i.Commit, "goversion": i.GoVersion},
	})
	g.Set(1)
	return g
}

// errorReasons are the reasons openmed_reconcile_errors_total counts: the
// failed-step reasons a status reports, and the writes whose failure cannot
// be reported in status.
var errorReasons = []string{
	v1alpha1.ManifestConflictReason, v1alpha1.ManifestMismatchReason, v1alpha1.ManifestFailedReason, v1alpha1.ApplyRejectedReason,
	v1alpha1.ApplyFailedReason, v1alpha1.ReleaseFailedReason, v1alpha1.PruneFailedReason,
	v1alpha1.InternalErrorReason, reasonStatusWriteFailed, reasonFinalizerWriteFailed,
}

// verificationResults are the results openmed_verification_requests_total
// counts: the reason of each attempt's verify.Result.
var verificationResults = []string{
	verify.ReasonPassed, verify.ReasonConditionFalse, verify.ReasonEvaluation, verify.ReasonTimeout,
	verify.ReasonConnection, verify.ReasonTooLarge, verify.ReasonInvalidRequest, verify.ReasonCanceled,
}

// dropCauses are the causes of openmed_events_dropped_total.
var dropCauses = []string{dropQueueFull, dropRejected, dropRetriesExhausted, dropShutdown}

const (
	reasonStatusWriteFailed    = "StatusWriteFailed"
	reasonFinalizerWriteFailed = "FinalizerWriteFailed"

	dropQueueFull        = "queue-full"
	dropRejected         = "rejected"
	dropRetriesExhausted = "retries-exhausted"
	dropShutdown         = "shutdown"

	rolloutSucceeded  = "succeeded"
	rolloutFailed     = "failed"
	rollbackAutomatic = "automatic"
	rollbackManual    = "manual"
)

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

// modelState is what openmed_model_info says about one model.
type modelState struct {
	version, phase, ready, reason string
	stalled                       bool
}

// modelInfo is openmed_model_info: a collector that writes one series per
// model from what the last pass set, at scrape time. A GaugeVec would keep
// a metric with its label pairs per model (about 1.5 KiB each); this keeps
// the model's state (the strings the cached model already holds) and builds
// the series only while a scrape runs.
type modelInfo struct {
	desc   *prometheus.Desc
	mu     sync.RWMutex
	models map[modelKey]modelState
}

type modelKey struct{ namespace, name string }

// infoLabels are openmed_model_info's label names in the order of a
// series' label pairs (sorted by name, as client_golang writes them).
var infoLabels = [...]string{"name", "namespace", "phase", "ready", "reason", "stalled", "version"}

// infoMetric is one series of openmed_model_info while a scrape runs.
// Its label pairs other than the name are shared with every series of the
// scrape that has the same value: a metric's label pairs are immutable by
// client_golang's contract, and its own vectors share theirs between
// scrapes. A scrape of N models so allocates a few arrays of N elements
// instead of a constant metric with seven label pairs and fourteen strings
// each (MustNewConstMetric), all alive until the scrape is written: at
// 10,000 models, 8.5 MB more on the heap's peak and the collector's next
// cycles.
type infoMetric struct {
	desc   *prometheus.Desc
	labels []*dto.LabelPair
	gauge  *dto.Gauge
}

// Desc implements prometheus.Metric.
func (m *infoMetric) Desc() *prometheus.Desc { return m.desc }

// Write implements prometheus.Metric.
func (m *infoMetric) Write(out *dto.Metric) error {
	out.Label, out.Gauge = m.labels, m.gauge
	return nil
}

// Describe implements prometheus.Collector.
func (c *modelInfo) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *modelInfo) Collect(ch chan<- prometheus.Metric) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	n := len(c.models)
	if n == 0 {
		return
	}
	width := len(infoLabels)
	metrics := make([]infoMetric, n)
	labels := make([]*dto.LabelPair, n*width)
	names := make([]dto.LabelPair, n)
	values := make([]string, n)
	one := 1.0
	gauge := &dto.Gauge{Value: &one}
	type shared struct {
		label int
		value string
	}
	pairs := map[shared]*dto.LabelPair{}
	pair := func(label int, value string) *dto.LabelPair {
		k := shared{label, value}
		p, ok := pairs[k]
		if !ok {
			p = &dto.LabelPair{Name: &infoLabels[label], Value: &value}
			pairs[k] = p
		}
		return p
	}
	i := 0
	for k, s := range c.models {
		values[i] = k.name
		names[i].Name, names[i].Value = &infoLabels[0], &values[i]
		l := labels[i*width : (i+1)*width : (i+1)*width]
		l[0] = &names[i]
		l[1], l[2], l[3], l[4] = pair(1, k.namespace), pair(2, s.phase), pair(3, s.ready), pair(4, s.reason)
		l[5], l[6] = pair(5, strconv.FormatBool(s.stalled)), pair(6, s.version)
		metrics[i] = infoMetric{desc: c.desc, labels: l, gauge: gauge}
		ch <- &metrics[i]
		i++
	}
}

// set records s for key and reports whether key is new. A changed state's
// strings are stored once for all models (a pass's are copies).
func (c *modelInfo) set(key modelKey, s modelState) (added bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old, ok := c.models[key]
	if ok && old == s {
		return false
	}
	if !ok {
		key.namespace = store.Intern(key.namespace)
	}
	s.version, s.phase, s.ready, s.reason = store.Intern(s.version), store.Intern(s.phase), store.Intern(s.ready), store.Intern(s.reason)
	c.models[key] = s
	return !ok
}

func (c *modelInfo) delete(key modelKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.models, key)
}

func (m *Metrics) setModelInfo(namespace, name string, s modelState) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.modelInfo.set(modelKey{namespace, name}, s) || m.namespaces[namespace] {
		return
	}
	// The namespace's first model: its rollout, rollback, bake failure and
	// golden request counters start at 0 (they stay when the models go:
	// counters do not reset).
	m.namespaces[namespace] = true
	for _, result := range []string{rolloutSucceeded, rolloutFailed} {
		m.rollouts.WithLabelValues(namespace, result)
	}
	for _, trigger := range []string{rollbackAutomatic, rollbackManual} {
		m.rollbacks.WithLabelValues(namespace, trigger)
	}
	for _, reason := range rollout.BakeFailures {
		m.bakeFailures.WithLabelValues(namespace, reason)
	}
	for _, result := range verificationResults {
		m.verifications.WithLabelValues(namespace, result)
	}
}

func (m *Metrics) deleteModel(namespace, name string) {
	if m == nil {
		return
	}
	m.modelInfo.delete(modelKey{namespace, name})
}

func (m *Metrics) rolloutEnded(namespace, result string, d time.Duration) {
	if m == nil {
		return
	}
	m.rollouts.WithLabelValues(namespace, result).Inc()
	if d >= 0 && result == rolloutSucceeded {
		m.rolloutDuration.Observe(d.Seconds())
	}
}

func (m *Metrics) countRollback(namespace, trigger string) {
	if m != nil {
		m.rollbacks.WithLabelValues(namespace, trigger).Inc()
	}
}

func (m *Metrics) countBakeFailure(namespace, reason string) {
	if m != nil {
		m.bakeFailures.WithLabelValues(namespace, reason).Inc()
	}
}

func (m *Metrics) countDrift(manager string) {
	if m != nil {
		m.drift.WithLabelValues(m.managers.value(manager)).Inc()
	}
}

func (m *Metrics) countConflict(manager, field string) {
	if m != nil {
		m.conflicts.WithLabelValues(m.managers.value(manager), m.fields.value(field)).Inc()
	}
}

// MaxLabelValues is how many distinct values the manager label of
// openmed_drift_corrections_total and openmed_ownership_conflicts_total,
// and the field label of the latter, take: the first ones seen by the
// process; any other is counted as OtherLabelValue. A field manager's name
// is whatever a client sends (kubectl --field-manager), so a loop of
// patches under new names would otherwise add a series each.
const MaxLabelValues = 32

// OtherLabelValue stands for the label values past the first MaxLabelValues.
const OtherLabelValue = "other"

// boundedLabel hands out a label's values: the first MaxLabelValues it is
// given as they are, every later one as OtherLabelValue.
type boundedLabel struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (b *boundedLabel) value(v string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.seen[v] {
		return v
	}
	if len(b.seen) >= MaxLabelValues {
		return OtherLabelValue
	}
	if b.seen == nil {
		b.seen = map[string]bool{}
	}
	b.seen[v] = true
	return v
}

// countPass counts a pass by what woke it (wokenBy).
func (m *Metrics) countPass(wokenBy string) {
	if m != nil {
		m.passesBy[wokenBy].Inc()
	}
}

// countWake counts a watch event of source (wakeSources) that woke a model.
func (m *Metrics) countWake(source string) {
	if m != nil {
		m.wakesBy[source].Inc()
	}
}

// countUnchanged counts a backstop pass that found its inputs unchanged.
func (m *Metrics) countUnchanged() {
	if m != nil {
		m.unchanged.Inc()
	}
}

func (m *Metrics) countError(reason string) {
	if m != nil {
		m.errors.WithLabelValues(reason).Inc()
	}
}

func (m *Metrics) countForwardDropped(cause string) {
	if m != nil {
		m.notForwarded.WithLabelValues(cause).Inc()
	}
}

func (m *Metrics) countDroppedEvent(cause string) {
	if m != nil {
		m.eventsDropped.WithLabelValues(cause).Inc()
	}
}

// countVerification counts one golden request to a pod of namespace, its
// result and how long it took.
func (m *Metrics) countVerification(namespace, result string, took time.Duration) {
	if m == nil {
		return
	}
	m.verifications.WithLabelValues(namespace, result).Inc()
	m.verificationTime.Observe(took.Seconds())
}
