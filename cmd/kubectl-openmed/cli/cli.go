// Package cli implements kubectl-openmed, the kubectl plugin for
// OpenMedModels. Installed on the PATH it runs as `kubectl openmed`.
//
// It shows a resource the way both GitOps UIs see it (the Argo CD health code
// from package health and the Flux kstatus), and it performs the Argo CD
// resource actions (rollback, retry, suspend, resume) with the same JSON merge
// patches the Lua actions in health/argocd produce, so a person at a terminal
// and a person in Argo CD get the same result. `reconcile` follows
// `flux reconcile`.
//
// Every write is a JSON merge patch with field manager FieldManager. Output
// names objects and versions only: never user text from other objects.
// Requests carry the User-Agent "kubectl-openmed/<version> (<os>/<arch>)
// <commit>" of package pkg/version; `kubectl openmed version` (or
// --version) prints the plugin's build.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/version"
)

// FieldManager is the field manager of every write the plugin makes, so
// managedFields show which changes came from a terminal.
const FieldManager = "kubectl-openmed"

// DefaultPollInterval is how often `reconcile --wait` reads the object; it is
// the interval `flux reconcile` uses.
const DefaultPollInterval = 2 * time.Second

// kind is the resource's kind, and qualifiedResource the resource.group form
// kubectl prints in its one-line results.
const (
	kind              = "OpenMedModel"
	qualifiedResource = "openmedmodel.openmed.ai"
)

// resource is the OpenMedModel REST resource.
var resource = v1alpha1.GroupVersion.WithResource("openmedmodels")

// Options are the inputs of a run that do not come from the command line.
type Options struct {
	// Out receives results; ErrOut receives notices such as "No resources
	// found". Nil discards.
	Out, ErrOut io.Writer
	// Now is the clock for request tokens and ages; nil means time.Now.
	Now func() time.Time
	// PollInterval is how often `reconcile --wait` reads the object; zero
	// means DefaultPollInterval.
	PollInterval time.Duration
}

// Run executes the plugin with args (without the program name), the way
// `kubectl openmed` would with the same arguments. The error is the one to
// print; usage errors are returned too and never printed here.
func Run(ctx context.Context, args []string, opts Options) error {
	cmd := NewCommand(opts)
	cmd.SetArgs(args)
	return cmd.ExecuteContext(ctx)
}

// NewCommand returns the root command with its subcommands and the standard
// kubeconfig flags (--kubeconfig, --context, -n/--namespace, ...). KUBECONFIG
// is read when the command is built.
func NewCommand(opts Options) *cobra.Command {
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	if opts.ErrOut == nil {
		opts.ErrOut = io.Discard
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	r := &root{
		opts:      opts,
		rules:     clientcmd.NewDefaultClientConfigLoadingRules(),
		overrides: &clientcmd.ConfigOverrides{},
	}
	cmd := &cobra.Command{
		Use:   "openmed",
		Short: "Inspect and operate OpenMedModels",
		Long: "Inspect OpenMedModels as Argo CD and Flux see them, and roll back, retry,\n" +
			"suspend, resume or reconcile them the way the Argo CD resource actions and\n" +
			"`flux reconcile` do.",
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl openmed"},
		// --version prints the line of `kubectl openmed version`.
		Version: version.Get().String(FieldManager),
		// Errors are the caller's to print, once; usage is for --help only.
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	cmd.SetVersionTemplate("{{.Version}}\n")
	// Bound here so cobra adds no -v, which kubectl users know as the
	// log level.
	cmd.Flags().Bool("version", false, "Print the plugin's version and commit, as the version command does")
	cmd.SetOut(opts.Out)
	cmd.SetErr(opts.ErrOut)
	flags := cmd.PersistentFlags()
	flags.StringVar(&r.rules.ExplicitPath, clientcmd.RecommendedConfigPathFlag, "", "Path to the kubeconfig file to use")
	clientcmd.BindOverrideFlags(r.overrides, flags, clientcmd.RecommendedConfigOverrideFlags(""))

	cmd.AddCommand(
		newGetCommand(r),
		newDescribeCommand(r),
		newRollbackCommand(r),
		newReleaseCommand(r),
		newRetryCommand(r),
		newSuspendCommand(r, true),
		newSuspendCommand(r, false),
		newReconcileCommand(r),
		newPlanCommand(r),
		newHistoryCommand(r),
		newVersionCommand(r),
	)
	return cmd
}

// root holds what every subcommand shares: the options and the kubeconfig
// flags, resolved only when a command runs.
type root struct {
	opts      Options
	rules     *clientcmd.ClientConfigLoadingRules
	overrides *clientcmd.ConfigOverrides
}

// target is the resource client and the namespace a command works in.
type target struct {
	client    dynamic.NamespaceableResourceInterface
	namespace string
	// dyn reads and dry-runs the other kinds `plan` needs.
	dyn dynamic.Interface
}

// connect resolves the kubeconfig and flags into a client and the namespace:
// -n, else the context's namespace, else "default".
func (r *root) connect() (target, error) {
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(r.rules, r.overrides)
	ns, _, err := cc.Namespace()
	if err != nil {
		return target{}, fmt.Errorf("resolve namespace: %w", err)
	}
	cfg, err := cc.ClientConfig()
	if err != nil {
		return target{}, fmt.Errorf("load kubeconfig: %w", err)
	}
	cfg.UserAgent = version.Get().UserAgent(FieldManager)
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return target{}, fmt.Errorf("create client: %w", err)
	}
	return target{client: dyn.Resource(resource), namespace: ns, dyn: dyn}, nil
}

// connectAndGet connects and reads the named OpenMedModel.
func (r *root) connectAndGet(ctx context.Context, name string) (target, *unstructured.Unstructured, error) {
	t, err := r.connect()
	if err != nil {
		return target{}, nil, err
	}
	u, err := t.get(ctx, name)
	return t, u, err
}

// get reads one OpenMedModel. A missing object gets a message that names it
// the way the user typed it.
func (t target) get(ctx context.Context, name string) (*unstructured.Unstructured, error) {
	u, err := t.client.Namespace(t.namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%s %q not found in namespace %q", kind, name, t.namespace)
	}
	if err != nil {
		return nil, fmt.Errorf("get %s %s/%s: %w", kind, t.namespace, name, err)
	}
	return u, nil
}

// patch applies a JSON merge patch to one OpenMedModel.
func (t target) patch(ctx context.Context, name string, patch []byte) (*unstructured.Unstructured, error) {
	u, err := t.client.Namespace(t.namespace).Patch(ctx, name, types.MergePatchType, patch,
		metav1.PatchOptions{FieldManager: FieldManager})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%s %q not found in namespace %q", kind, name, t.namespace)
	}
	if err != nil {
		return nil, fmt.Errorf("patch %s %s/%s: %w", kind, t.namespace, name, err)
	}
	return u, nil
}

// typed converts a read object into the Go type for display and decisions;
// the health views keep reading the unstructured object, as the UIs do.
func typed(u *unstructured.Unstructured) (*v1alpha1.OpenMedModel, error) {
	var m v1alpha1.OpenMedModel
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), &m); err != nil {
		return nil, fmt.Errorf("decode %s %s/%s: %w", kind, u.GetNamespace(), u.GetName(), err)
	}
	return &m, nil
}

// errNameRequired is returned by commands that act on one object.
var errNameRequired = errors.New("a resource name is required")

// exactlyOneName is the Args validator of the single-object commands.
func exactlyOneName(_ *cobra.Command, args []string) error {
	if len(args) == 0 {
		return errNameRequired
	}
	if len(args) > 1 {
		return fmt.Errorf("expected one resource name, got %d arguments", len(args))
	}
	return nil
}
