// Command floor is the smallest operator the scale benchmark can compare
// the OpenMedModel operator with: a controller-runtime manager (metrics over
// HTTPS behind the operator's own authentication and authorization filter,
// pkg/metricsauth; health probes; leader election off) with one
// controller that reconciles nothing, over the Deployments labelled
// openmed.ai/claimed=true. Its
// resident memory once its cache synced is what any operator built on
// controller-runtime and client-go holds before its first object: the
// benchmark prints it beside the operator's (see docs/scale.md).
//
// It takes the flags pkg/localrun passes an operator and is ready
// (/readyz) once its cache synced.
package main

import (
	"context"
	"fmt"
	"net/http"
	"os"

	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/openmed/openmed-operator/pkg/metricsauth"
)

func main() {
	fs := pflag.NewFlagSet("floor", pflag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig")
	metricsAddr := fs.String("metrics-addr", "0", "metrics address")
	healthAddr := fs.String("health-addr", "0", "health probe address")
	fs.ParseErrorsAllowlist.UnknownFlags = true
	_ = fs.Parse(os.Args[1:])
	if err := run(ctrl.SetupSignalHandler(), *kubeconfig, *metricsAddr, *healthAddr); err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, kubeconfig, metricsAddr, healthAddr string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	claimed := labels.SelectorFromSet(labels.Set{"openmed.ai/claimed": "true"})
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Metrics: metricsserver.Options{BindAddress: metricsAddr, SecureServing: true,
			FilterProvider: metricsauth.Filter},
		HealthProbeBindAddress: healthAddr,
		Cache:                  cache.Options{ByObject: map[client.Object]cache.ByObject{&appsv1.Deployment{}: {Label: claimed}}},
	})
	if err != nil {
		return err
	}
	if err := ctrl.NewControllerManagedBy(mgr).For(&appsv1.Deployment{}).
		Complete(reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) { return reconcile.Result{}, nil })); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("cache", func(req *http.Request) error {
		if !mgr.GetCache().WaitForCacheSync(req.Context()) {
			return fmt.Errorf("cache not synced")
		}
		return nil
	}); err != nil {
		return err
	}
	return mgr.Start(ctx)
}
