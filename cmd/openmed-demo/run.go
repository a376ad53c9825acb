package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/labels"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/openmed/openmed-operator/kustomize"
	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/localrun"
	"github.com/openmed/openmed-operator/pkg/localrun/modelserver"
	"github.com/openmed/openmed-operator/pkg/minicluster"
)

// operatorStopTimeout bounds the operator's graceful shutdown before SIGKILL.
const operatorStopTimeout = 10 * time.Second

// run is the whole demo. Everything it starts is stopped by its deferred
// calls, which also run when a stage panics.
func run(ctx context.Context, o options, out io.Writer) (err error) {
	// controller-runtime's client warns once when no logger is set.
	ctrllog.SetLogger(logr.Discard())
	p := newPrinter(out)
	start := time.Now()

	workDir, err := os.MkdirTemp("", "openmed-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(workDir)

	examples := o.examplesDir
	if examples == "" {
		examples = localrun.ExamplesDir()
	}
	model, err := localrun.ReadModel(filepath.Join(examples, localrun.ModelExample))
	if err != nil {
		return err
	}
	target, err := localrun.ReadObjects(filepath.Join(examples, localrun.TargetExample))
	if err != nil {
		return err
	}
	brokenHash, err := localrun.ManifestHashOf(model, o.brokenVersion)
	if err != nil {
		return fmt.Errorf("broken version: %w", err)
	}
	crashingHash, err := localrun.ManifestHashOf(model, o.crashingVersion)
	if err != nil {
		return fmt.Errorf("crashing version: %w", err)
	}
	forgetfulHash, err := localrun.ManifestHashOf(model, o.forgetfulVersion)
	if err != nil {
		return fmt.Errorf("forgetful version: %w", err)
	}

	// The cluster: the one of --kubeconfig, or a local control plane whose
	// kwok keeps the pods of the broken version Running but never Ready and
	// restarts those of the crashing version after they became Ready.
	var (
		cfg        *rest.Config
		kubeconfig string
		local      *minicluster.Cluster
	)
	setup := p.beginSetup()
	if o.kubeconfig != "" && !o.local {
		kubeconfig = o.kubeconfig
		if cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig); err != nil {
			return fmt.Errorf("load kubeconfig %s: %w", kubeconfig, err)
		}
		setup.done("cluster", "using the cluster of "+kubeconfig+" ("+cfg.Host+")")
	} else {
		p.line("cluster", "starting etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok")
		local, err = minicluster.Start(ctx, minicluster.Config{
			DataDir: o.dataDir,
			NeverReady: minicluster.NeverReady{
				Annotation: v1alpha1.ManifestHashAnnotation,
				Values:     []string{brokenHash},
			},
			CrashAfterReady: minicluster.CrashAfterReady{
				Annotation: v1alpha1.ManifestHashAnnotation,
				Values:     []string{crashingHash},
				After:      o.crashAfter,
			},
		})
		if err != nil {
			return fmt.Errorf("start the local control plane: %w", err)
		}
		defer func() {
			p.line("shutdown", "stopping the local control plane")
			err = errors.Join(err, local.Stop())
		}()
		cfg, kubeconfig = local.RESTConfig(), local.KubeconfigPath()
		setup.done("cluster", fmt.Sprintf("local control plane up at %s (data in %s)", cfg.Host, local.DataDir()))
		// The OpenMed service, played on each pod's loopback IP: the
		// forgetful version's pods answer without the patient's name.
		fleet, err := modelserver.Start(ctx, cfg, modelserver.Options{Namespace: model.Namespace, Selector: labels.Everything(),
			Port: modelserver.DefaultPort, Behaviour: func(p *corev1.Pod) modelserver.Behaviour {
				if p.Annotations[v1alpha1.ManifestHashAnnotation] == forgetfulHash {
					return modelserver.OmitName
				}
				return modelserver.Correct
			}})
		if err != nil {
			return fmt.Errorf("start the model server: %w", err)
		}
		defer func() { err = errors.Join(err, fleet.Close()) }()
	}

	scheme := k8sruntime.NewScheme()
	for _, add := range []func(*k8sruntime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			return err
		}
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}

	// The bundle, minus the operator Deployment: the operator runs here.
	bundle, err := localrun.InstallBundle(ctx, c, filepath.Join(kustomize.Dir(), kustomize.DefaultOverlay))
	if err != nil {
		return fmt.Errorf("install kustomize/%s: %w", kustomize.DefaultOverlay, err)
	}
	for _, s := range bundle.Skipped {
		p.line("install", fmt.Sprintf("left out %s %s/%s: the operator runs on this machine as a process instead (on kwok its pods would only be simulated)",
			s.GetKind(), s.GetNamespace(), s.GetName()))
	}
	setup.done("install", fmt.Sprintf("kustomize/%s applied: %d objects (CRD, RBAC, namespace %s)", kustomize.DefaultOverlay, len(bundle.Applied), bundle.ServiceAccount.Namespace))

	// The operator, as its own process, authorized as its ServiceAccount.
	binary := o.operatorBinary
	if binary == "" {
		p.line("operator", "building cmd/openmed-operator")
		if binary, err = localrun.BuildOperator(ctx, workDir); err != nil {
			return err
		}
	}
	saKubeconfig := filepath.Join(workDir, "operator.kubeconfig")
	if err := localrun.WriteImpersonatingKubeconfig(kubeconfig, saKubeconfig, bundle.ServiceAccount.Namespace, bundle.ServiceAccount.Name); err != nil {
		return err
	}
	op, err := localrun.StartOperator(localrun.OperatorConfig{
		Binary:     binary,
		Kubeconfig: saKubeconfig,
		LogPath:    filepath.Join(workDir, "openmed-operator.log"),
		Args:       []string{"--log-encoding=console"},
		// It serves the bundle's admission webhook too: a model whose
		// success condition does not compile is refused on apply.
		WebhookNamespace: bundle.ServiceAccount.Namespace,
	})
	if err != nil {
		return err
	}
	defer func() {
		p.line("shutdown", "stopping openmed-operator")
		err = errors.Join(err, op.Stop(operatorStopTimeout))
	}()
	readyCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := op.WaitReady(readyCtx); err != nil {
		return err
	}
	setup.done("operator", fmt.Sprintf("openmed-operator started, pid %d, as %s (log %s)",
		op.PID(), localrun.ServiceAccountUser(bundle.ServiceAccount.Namespace, bundle.ServiceAccount.Name), op.LogPath()))

	s := &story{
		p:                p,
		c:                c,
		model:            model,
		target:           target,
		deadline:         o.progressDeadline,
		upgradeVersion:   o.upgradeVersion,
		brokenVersion:    o.brokenVersion,
		crashingVersion:  o.crashingVersion,
		crashAfter:       o.crashAfter,
		bake:             o.bake,
		neverReady:       local != nil,
		forgetfulVersion: o.forgetfulVersion,
		served:           local != nil,
		stageTimeout:     o.stageTimeout,
	}
	results, err := s.play(ctx)
	p.summary(setup.results, results, time.Since(start))
	if err != nil {
		return err
	}
	if o.once {
		return nil
	}

	// The metrics endpoint answers only a token allowed to read it: one of
	// a ServiceAccount bound to openmed-metrics-reader, as Prometheus's is.
	tokenFile, err := metricsToken(ctx, c, bundle.ServiceAccount.Namespace, workDir)
	if err != nil {
		return err
	}
	p.plain("")
	p.plain("The cluster stays up until Ctrl-C. To look around:")
	p.plain("  export KUBECONFIG=" + kubeconfig)
	p.plain(fmt.Sprintf("  kubectl -n %s get openmedmodels,deployments,replicasets,pods,configmaps", model.Namespace))
	p.plain(fmt.Sprintf("  kubectl -n %s annotate omm %s %s=%s --overwrite   # roll back by hand", model.Namespace, model.Name, v1alpha1.RollbackToAnnotation, model.Spec.Version))
	p.plain("  operator log:     " + op.LogPath())
	p.plain(fmt.Sprintf("  operator metrics: curl -sk -H \"Authorization: Bearer $(cat %s)\" %s", tokenFile, op.MetricsURL()))
	select {
	case <-ctx.Done():
		return nil
	case <-op.Done():
		return fmt.Errorf("openmed-operator exited; last lines of %s:\n%s", op.LogPath(), localrun.Tail(op.LogPath(), 15))
	}
}

// metricsToken binds openmed-metrics-reader to the ServiceAccount
// metrics-reader of namespace, writes a token of it into dir and returns
// the file's path.
func metricsToken(ctx context.Context, c client.Client, namespace, dir string) (string, error) {
	const name = "metrics-reader"
	if err := localrun.BindClusterRoles(ctx, c, namespace, name, localrun.MetricsReaderRole); err != nil {
		return "", err
	}
	token, err := localrun.ServiceAccountToken(ctx, c, namespace, name)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "metrics.token")
	return path, os.WriteFile(path, []byte(token), 0o600)
}
