// Package app wires the OpenMedModel reconciler into a controller-runtime
// manager the way Flux controllers are wired: fluxcd/pkg/runtime option
// structs for the client, logger, leader election, retry delays and watch
// scope, openmed_* (and, with --gotk-metrics, Flux's gotk_*) metrics next
// to controller-runtime's own, served over HTTPS to authenticated and
// authorized scrapers only, as kubebuilder scaffolds it,
// /healthz and /readyz probes, and an events recorder that can forward to
// notification-controller. The openmed-operator binary is a thin shell around
// Run, so tests and other managers can start the same wiring.
package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fluxcd/cli-utils/pkg/flowcontrol"
	runtimectrl "github.com/fluxcd/pkg/runtime/controller"
	"github.com/fluxcd/pkg/runtime/events"
	"github.com/fluxcd/pkg/runtime/leaderelection"
	"github.com/fluxcd/pkg/runtime/logger"
	"github.com/fluxcd/pkg/runtime/metrics"
	"github.com/fluxcd/pkg/runtime/pprof"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	kevents "k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/openmed/openmed-operator/controllers"
	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/metricsauth"
	"github.com/openmed/openmed-operator/pkg/serverclock"
	"github.com/openmed/openmed-operator/pkg/webhook"
)

// LeaderElectionID is the name of the Lease the replicas compete for. A
// shard (a non-empty --watch-label-selector) uses
// leaderelection.GenerateID(LeaderElectionID, selector), so shards never
// share a Lease.
const LeaderElectionID = "openmed-operator-leader-election"

// Options are the operator's settings; BindFlags maps them to flags.
type Options struct {
	// MetricsAddr is where /metrics is served over HTTPS ("0" disables
	// it).
	MetricsAddr string
	// MetricsCertDir holds the metrics endpoint's serving certificate and
	// key (tls.crt, tls.key; reloaded when they change). Empty: a
	// self-signed certificate generated at start.
	MetricsCertDir string
	// EnablePprof serves /debug/pprof beside /metrics, behind the same
	// authentication and authorization.
	EnablePprof bool
	// HealthAddr is where /healthz and /readyz are served.
	HealthAddr string
	// EventsAddr is notification-controller's event endpoint; empty records
	// Kubernetes Events only.
	EventsAddr string
	// DefaultServiceAccount is the ServiceAccount, of a model's namespace,
	// whose identity the writes for a model without spec.serviceAccountName
	// are made with (Flux's multi-tenancy lockdown flag). Empty: those
	// writes use the operator's own rights.
	DefaultServiceAccount string
	// GotkMetrics records Flux's per-object gotk_reconcile_condition and
	// gotk_suspend_status series (four per model) besides openmed_model_info.
	GotkMetrics bool
	// Concurrent is how many OpenMedModels reconcile at once.
	Concurrent int
	// RequeueInterval is the first interval of the backstop timer of a
	// rollout in flight (rollout.Options.RequeueInterval).
	RequeueInterval time.Duration
	// Kubeconfig is a kubeconfig file; empty means $KUBECONFIG, the
	// in-cluster service account, then ~/.kube/config.
	Kubeconfig string
	// WatchNamespace is the one namespace watched when
	// Watch.AllNamespaces is false; empty means $RUNTIME_NAMESPACE.
	WatchNamespace string
	// Webhook is the validating admission webhook ("0" address: off).
	Webhook WebhookOptions

	Client         ClientOptions
	Logger         logger.Options
	LeaderElection leaderelection.Options
	RateLimiter    runtimectrl.RateLimiterOptions
	Watch          runtimectrl.WatchOptions
}

// BindFlags registers the operator's flags on fs with Flux's names and
// defaults.
func (o *Options) BindFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.MetricsAddr, "metrics-addr", ":8443", "The address the metrics endpoint binds to; it serves HTTPS to clients whose bearer token the API server authenticates (TokenReview) and authorizes for get on the path (SubjectAccessReview). \"0\" disables it.")
	fs.StringVar(&o.MetricsCertDir, "metrics-cert-dir", "", "The directory holding the metrics endpoint's certificate and key (tls.crt, tls.key), reloaded when they change; empty uses a self-signed certificate generated at start.")
	fs.BoolVar(&o.EnablePprof, "enable-pprof", false, "Serve /debug/pprof on the metrics endpoint, behind the same authentication and authorization.")
	fs.StringVar(&o.HealthAddr, "health-addr", ":9440", "The address the health endpoint binds to.")
	fs.StringVar(&o.EventsAddr, "events-addr", "", "The address of the events receiver (notification-controller); empty records Kubernetes Events only.")
	fs.StringVar(&o.DefaultServiceAccount, "default-service-account", "", "The ServiceAccount, in a model's namespace, the operator impersonates for the writes of a model without spec.serviceAccountName (multi-tenancy lockdown); empty uses the operator's own rights.")
	fs.IntVar(&o.Concurrent, "concurrent", 4, "The number of concurrent OpenMedModel reconciles.")
	fs.BoolVar(&o.GotkMetrics, "gotk-metrics", false, "Also export Flux's per-object gotk_reconcile_condition and gotk_suspend_status metrics (four series per model; openmed_model_info carries the same Ready status).")
	fs.DurationVar(&o.RequeueInterval, "requeue-interval", 0, "First interval of the backstop timer that re-evaluates a rollout in flight against a missed watch event; it grows with the wait to 8 times this. 0 uses the library default (15s).")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "Path to a kubeconfig. Only required if out-of-cluster.")
	fs.StringVar(&o.WatchNamespace, "watch-namespace", "", "The namespace watched when --watch-all-namespaces=false; defaults to $"+runtimectrl.EnvRuntimeNamespace+".")
	o.Webhook.BindFlags(fs)

	o.Client.BindFlags(fs)
	o.Logger.BindFlags(fs)
	o.LeaderElection.BindFlags(fs)
	o.RateLimiter.BindFlags(fs)
	// A failed pass is retried within seconds, not Flux's 15-minute cap: a
	// model that missed a rollout step must catch up as soon as the API
	// server answers again.
	for name, def := range map[string]string{
		"min-retry-delay": controllers.RetryBaseDelay.String(),
		"max-retry-delay": controllers.RetryMaxDelay.String(),
	} {
		f := fs.Lookup(name)
		_ = f.Value.Set(def)
		f.DefValue = def
	}

	// WatchOptions also binds --watch-configs-label-selector, which selects
	// ConfigMaps and Secrets a Flux controller reads; this operator reads
	// neither from users, so only the two flags it honours are exposed.
	watch := pflag.NewFlagSet("watch", pflag.ContinueOnError)
	o.Watch.BindFlags(watch)
	fs.AddFlag(watch.Lookup("watch-all-namespaces"))
	fs.AddFlag(watch.Lookup("watch-label-selector"))
}

// WebhookOptions are the flags of the validating admission webhook, which
// refuses on admission an OpenMedModel the CRD cannot refuse (a
// spec.verification.successCondition that does not compile). Off unless
// --webhook-addr is set: the shipped Deployment sets it, and of the
// operators a local run starts only the one the configuration names
// serves it.
type WebhookOptions struct {
	// Addr is where the webhook serves HTTPS; "0" disables it.
	Addr string
	// CertDir holds a serving certificate the user provides (tls.crt,
	// tls.key), e.g. from cert-manager; empty: the operator issues one and
	// keeps it in the Secret SecretName of $RUNTIME_NAMESPACE.
	CertDir string
	// SecretName is the Secret the operator keeps the webhook's CA and
	// certificate in.
	SecretName string
	// ServiceName is the Service of the webhook, whose DNS names the
	// certificate is for.
	ServiceName string
	// URL, for an operator outside the cluster, is the https://host:port
	// the API server reaches the webhook at; the configuration is pointed
	// at it instead of the Service.
	URL string
}

// BindFlags registers the --webhook-* flags.
func (o *WebhookOptions) BindFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Addr, "webhook-addr", "0", "The address the validating admission webhook binds to (HTTPS); \"0\" disables it.")
	fs.StringVar(&o.CertDir, "webhook-cert-dir", "", "The directory holding the webhook's certificate and key (tls.crt, tls.key), e.g. from cert-manager, reloaded when they change; empty: the operator issues them and keeps them, with their CA, in --webhook-secret and writes the CA into its ValidatingWebhookConfiguration.")
	fs.StringVar(&o.SecretName, "webhook-secret", "openmed-operator-webhook-cert", "The Secret, in $"+runtimectrl.EnvRuntimeNamespace+", the operator keeps the webhook's CA and certificate in (shared by the replicas).")
	fs.StringVar(&o.ServiceName, "webhook-service", "openmed-operator-webhook", "The Service, in $"+runtimectrl.EnvRuntimeNamespace+", the API server reaches the webhook through; the certificate is for its DNS names.")
	fs.StringVar(&o.URL, "webhook-url", "", "For an operator outside the cluster: the https://host:port the API server reaches the webhook at; the ValidatingWebhookConfiguration is pointed at it instead of the Service.")
}

// ClientOptions are the API client limits, with the flags and defaults of
// fluxcd/pkg/runtime/client.Options. They are declared here because that
// package also holds an impersonating client built on kstatus's poller,
// which links kubectl into the binary: about 25 MiB of resident memory the
// operator never uses.
type ClientOptions struct {
	// QPS is the client-side rate limit, used when the API server has no
	// API Priority and Fairness.
	QPS float32
	// Burst is the client-side burst, likewise.
	Burst int
}

// BindFlags registers --kube-api-qps and --kube-api-burst.
func (o *ClientOptions) BindFlags(fs *pflag.FlagSet) {
	fs.Float32Var(&o.QPS, "kube-api-qps", 50.0, "The maximum queries-per-second of requests sent to the Kubernetes API.")
	fs.IntVar(&o.Burst, "kube-api-burst", 300, "The maximum burst queries-per-second of requests sent to the Kubernetes API.")
}

// Scope is what one operator process watches and which Lease it holds.
type Scope struct {
	// Namespace is the single watched namespace; empty means all.
	Namespace string
	// Selector selects the OpenMedModels of this shard.
	Selector labels.Selector
	// LeaderElectionID names the Lease of this shard.
	LeaderElectionID string
	// LeaderElectionNamespace is where the Lease lives; empty lets
	// controller-runtime use the pod's own namespace.
	LeaderElectionNamespace string
}

// ResolveScope derives the watch scope from the options and the
// RUNTIME_NAMESPACE value (the pod's namespace, from the downward API).
func (o Options) ResolveScope(runtimeNamespace string) (Scope, error) {
	sel, err := runtimectrl.GetWatchSelector(o.Watch)
	if err != nil {
		return Scope{}, fmt.Errorf("invalid --watch-label-selector: %w", err)
	}
	s := Scope{Selector: sel, LeaderElectionID: LeaderElectionID, LeaderElectionNamespace: runtimeNamespace}
	if o.Watch.LabelSelector != "" {
		s.LeaderElectionID = leaderelection.GenerateID(LeaderElectionID, o.Watch.LabelSelector)
	}
	if !o.Watch.AllNamespaces {
		s.Namespace = o.WatchNamespace
		if s.Namespace == "" {
			s.Namespace = runtimeNamespace
		}
		if s.Namespace == "" {
			return Scope{}, fmt.Errorf("--watch-all-namespaces=false needs --watch-namespace or $%s", runtimectrl.EnvRuntimeNamespace)
		}
	}
	return s, nil
}

// Run starts the manager and blocks until ctx is cancelled (a graceful
// shutdown: in-flight reconciles finish, the Lease is released when
// --leader-election-release-on-cancel is set) or the manager fails.
func Run(ctx context.Context, opts Options) error {
	log := ctrl.Log.WithName("setup")
	scope, err := opts.ResolveScope(os.Getenv(runtimectrl.EnvRuntimeNamespace))
	if err != nil {
		return err
	}
	if err := checkMetricsCertDir(opts.MetricsCertDir); err != nil {
		return err
	}
	cfg, err := restConfig(ctx, opts)
	if err != nil {
		return err
	}
	// The operator's times (a bake's start, a retry's) are compared with
	// the cluster's: it reads the API server's clock from its answers.
	clock := &serverclock.Clock{}
	cfg.Wrap(clock.Wrap)
	scheme := k8sruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}

	mgr, err := newManager(ctx, cfg, managerOptions(opts, scope, scheme))
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return err
	}

	modelMetrics := controllers.MustRegisterMetrics()
	kubeEvents := controllers.NewEventRecorder(mgr.GetClient(), scheme, controllers.ControllerName, modelMetrics, mgr.GetLogger().WithName("events"))
	if err := mgr.Add(kubeEvents); err != nil {
		return err
	}
	// Kubernetes Events through Flux's recorder; --events-addr adds the
	// forwarder, which posts to notification-controller from its own queue.
	kube, err := events.NewRecorder(mgr.GetLogger(), "", controllers.ControllerName,
		events.WithScheme(scheme), events.WithLegacyEventRecorder(kubeEvents))
	if err != nil {
		return fmt.Errorf("create events recorder: %w", err)
	}
	var recorder kevents.EventRecorder = kube
	if opts.EventsAddr != "" {
		forwarder, err := controllers.NewEventForwarder(opts.EventsAddr, controllers.ControllerName, scheme, modelMetrics, mgr.GetLogger().WithName("events-forwarder"))
		if err != nil {
			return fmt.Errorf("--events-addr: %w", err)
		}
		if err := mgr.Add(forwarder); err != nil {
			return err
		}
		recorder = forwarder.Recorder(recorder)
	}
	var gotk *runtimectrl.Metrics
	if opts.GotkMetrics {
		m := runtimectrl.NewMetrics(mgr, gotkRecorder(), v1alpha1.Finalizer)
		gotk = &m
	}
	r := &controllers.OpenMedModelReconciler{
		Client:          mgr.GetClient(),
		APIReader:       mgr.GetAPIReader(),
		EventRecorder:   recorder,
		Metrics:         gotk,
		ModelMetrics:    modelMetrics,
		RequeueInterval: opts.RequeueInterval,
		RetryBaseDelay:  opts.RateLimiter.MinRetryDelay,
		RetryMaxDelay:   opts.RateLimiter.MaxRetryDelay,
		Clock:           clock.Now,

		DefaultServiceAccount: opts.DefaultServiceAccount,
	}
	if err := r.SetupWithManager(ctx, mgr, controllers.Options{
		MaxConcurrentReconciles: opts.Concurrent,
		RateLimiter:             runtimectrl.GetRateLimiter(opts.RateLimiter),
		Namespace:               scope.Namespace,
		Models:                  scope.Selector,
	}); err != nil {
		return fmt.Errorf("set up the %s controller: %w", controllers.ControllerName, err)
	}

	if opts.Webhook.Addr != "0" {
		if err := webhook.Add(mgr, webhook.Options{
			Addr:        opts.Webhook.Addr,
			CertDir:     opts.Webhook.CertDir,
			Namespace:   os.Getenv(runtimectrl.EnvRuntimeNamespace),
			SecretName:  opts.Webhook.SecretName,
			ServiceName: opts.Webhook.ServiceName,
			URL:         opts.Webhook.URL,
		}); err != nil {
			return fmt.Errorf("--webhook-addr: %w", err)
		}
	}

	log.Info("starting manager", "namespace", scope.Namespace, "labelSelector", opts.Watch.LabelSelector, "defaultServiceAccount", opts.DefaultServiceAccount,
		"leaderElection", opts.LeaderElection.Enable, "lease", scope.LeaderElectionID)
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("run manager: %w", err)
	}
	return nil
}

// newManager creates the manager, retrying while the API server cannot
// answer the discovery it needs (a 5xx, a timeout, a reset connection):
// an operator started during an API server hiccup waits for it instead of
// exiting into a crash loop. The retries back off to startRetryCap and go
// on until ctx ends.
func newManager(ctx context.Context, cfg *rest.Config, opts ctrl.Options) (ctrl.Manager, error) {
	log := ctrl.Log.WithName("setup")
	delay := 250 * time.Millisecond
	for {
		mgr, err := ctrl.NewManager(cfg, opts)
		if err == nil {
			return mgr, nil
		}
		log.Error(err, "cannot create the manager yet; retrying", "after", delay.String())
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(delay):
		}
		delay = min(2*delay, startRetryCap)
	}
}

// startRetryCap bounds the wait between two attempts to start.
const startRetryCap = 5 * time.Second

// managerOptions translates the options into controller-runtime's. The
// manager's cache holds only what the reconciler reads from it
// (controllers.CacheByObject): the shard's OpenMedModels and the
// ServiceAccounts' names, in the watched namespace or all of them; the
// reconciler keeps the claimed Deployments, the manifest ConfigMaps it
// created and the pods it judges in stores of its own.
func managerOptions(opts Options, scope Scope, scheme *k8sruntime.Scheme) ctrl.Options {
	cacheOpts := cache.Options{ByObject: controllers.CacheByObject(scope.Selector)}
	if scope.Namespace != "" {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{scope.Namespace: {}}
	}
	le := opts.LeaderElection
	return ctrl.Options{
		Scheme: scheme,
		Cache:  cacheOpts,
		// The manager's client maps a kind on every write the reconciler
		// takes the answer of as metadata: it remembers the mappings.
		MapperProvider: func(c *rest.Config, h *http.Client) (meta.RESTMapper, error) {
			m, err := apiutil.NewDynamicRESTMapper(c, h)
			return controllers.RememberMappings(m), err
		},
		Metrics:                       metricsOptions(opts),
		HealthProbeBindAddress:        opts.HealthAddr,
		LeaderElection:                le.Enable,
		LeaderElectionID:              scope.LeaderElectionID,
		LeaderElectionNamespace:       scope.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: le.ReleaseOnCancel,
		LeaseDuration:                 &le.LeaseDuration,
		RenewDeadline:                 &le.RenewDeadline,
		RetryPeriod:                   &le.RetryPeriod,
		Controller:                    config.Controller{RecoverPanic: ptr.To(true)},
		Logger:                        ctrl.Log,
	}
}

// The metrics endpoint authenticates and authorizes every request
// (TokenReview, then SubjectAccessReview for get on the path) through the
// API server; these are the rights that needs. They are in the operator's
// generated ClusterRole, which `make generate` builds from the markers in
// this package and controllers.
//
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// metricsOptions serves /metrics, and with --enable-pprof /debug/pprof,
// over HTTPS behind the authentication and authorization filter of
// metricsauth (controller-runtime's, without k8s.io/apiserver): a client
// needs a bearer token the API server accepts, of a user allowed get on
// the path (the ClusterRole openmed-metrics-reader grants
// it on /metrics). Profiles show the operator's memory and goroutines, so
// they are off unless asked for.
func metricsOptions(opts Options) metricsserver.Options {
	o := metricsserver.Options{
		BindAddress:    opts.MetricsAddr,
		SecureServing:  true,
		FilterProvider: metricsauth.Filter,
		CertDir:        opts.MetricsCertDir,
		// HTTP/1.1 only, as kubebuilder scaffolds it: HTTP/2's stream
		// cancellation lets a client that never authenticates keep the
		// server busy (CVE-2023-44487, CVE-2023-39325), and a scrape
		// gains nothing from it.
		TLSOpts: []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }},
	}
	if opts.EnablePprof {
		o.ExtraHandlers = pprof.GetHandlers()
	}
	return o
}

// checkMetricsCertDir fails when --metrics-cert-dir lacks the certificate
// or the key: controller-runtime would fall back to a self-signed
// certificate, and the scrapers that verify the one they were given would
// fail without saying why.
func checkMetricsCertDir(dir string) error {
	if dir == "" {
		return nil
	}
	for _, name := range []string{"tls.crt", "tls.key"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("--metrics-cert-dir: %w", err)
		}
	}
	return nil
}

// restConfig loads the kubeconfig, sets the operator's User-Agent
// (UserAgent, kept by every client made from the config) and applies the
// client limits the way fluxcd/pkg/runtime/client.GetConfigOrDie does: with
// API Priority and Fairness on the server, client-side throttling is
// switched off.
func restConfig(ctx context.Context, opts Options) (*rest.Config, error) {
	var (
		cfg *rest.Config
		err error
	)
	if opts.Kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", opts.Kubeconfig)
	} else {
		cfg, err = ctrlconfig.GetConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	withUserAgent(cfg, UserAgent())
	if enabled, err := flowcontrol.IsEnabled(ctx, cfg); err == nil && enabled {
		cfg.QPS, cfg.Burst = -1, -1
		return cfg, nil
	}
	if opts.Client.QPS <= 0 || opts.Client.Burst <= 0 {
		return nil, errors.New("--kube-api-qps and --kube-api-burst must be positive")
	}
	cfg.QPS, cfg.Burst = opts.Client.QPS, opts.Client.Burst
	return cfg, nil
}

var (
	gotkOnce     sync.Once
	gotkRecorded *metrics.Recorder
)

// gotkRecorder registers the gotk_* collectors with controller-runtime's
// registry once per process; registering twice panics.
func gotkRecorder() *metrics.Recorder {
	gotkOnce.Do(func() { gotkRecorded = metrics.MustMakeRecorder() })
	return gotkRecorded
}
