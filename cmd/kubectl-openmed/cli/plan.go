package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/preview"
	"github.com/openmed/openmed-operator/pkg/rollout"
	"github.com/openmed/openmed-operator/pkg/validation"
)

// ExitError asks main to exit with Code, printing nothing more: `plan`
// returns Code 2 when the commit changes the cluster, as
// `terraform plan -detailed-exitcode` and `kubectl diff` do.
type ExitError struct {
	Code int
}

func (e *ExitError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

// ExitChanges is plan's exit code when the commit changes the cluster.
const ExitChanges = 2

var (
	deploymentsResource = appsv1.SchemeGroupVersion.WithResource("deployments")
	configMapsResource  = corev1.SchemeGroupVersion.WithResource("configmaps")
)

func newPlanCommand(r *root) *cobra.Command {
	var (
		files      []string
		targetFile string
		output     string
		shard      string
	)
	cmd := &cobra.Command{
		Use:   "plan -f FILE|DIR",
		Short: "Show what the operator will do with OpenMedModels from Git, without writing anything",
		Long: "Run the operator's own decision core on the OpenMedModels in the files against\n" +
			"the live resource and its target Deployment, and print the phase it reaches,\n" +
			"the Deployment fields it changes (asked of the API server with a server-side\n" +
			"dry-run apply) with the field managers that own them now, whether pods roll,\n" +
			"the ConfigMaps it creates, the drift it corrects and what a failed rollout\n" +
			"rolls back to. With --target it works offline against a Deployment file.\n\n" +
			"Exit status: 0 no change, 2 changes, 1 error.",
		Example: "  kubectl openmed plan -f models/\n" +
			"  kubectl openmed plan -f openmedmodel.yaml -o yaml\n" +
			"  kubectl openmed plan -f openmedmodel.yaml --target chart/deployment.yaml",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != outputTable && output != outputJSON && output != outputYAML {
				return fmt.Errorf("unsupported output format %q: use json or yaml, or omit -o for text", output)
			}
			if len(files) == 0 {
				return errors.New("no input: pass -f FILE or -f DIR")
			}
			models, err := readModels(files)
			if err != nil {
				return err
			}
			sel, err := labels.Parse(shard)
			if err != nil {
				return fmt.Errorf("invalid --watch-label-selector: %w", err)
			}
			opts := rollout.Options{ShardLabels: rollout.ShardLabels(sel)}
			var src source
			if targetFile != "" {
				src, err = r.offline(targetFile)
			} else {
				src, err = r.online()
			}
			if err != nil {
				return err
			}
			var results []preview.Result
			for _, m := range models {
				res, err := planOne(cmd.Context(), src, m, metav1.NewTime(r.opts.Now()), opts)
				if err != nil {
					return err
				}
				results = append(results, res)
			}
			if err := r.printPlans(output, results); err != nil {
				return err
			}
			for i := range results {
				if results[i].Changes() {
					return &ExitError{Code: ExitChanges}
				}
			}
			return nil
		},
	}
	cmd.Flags().StringSliceVarP(&files, "filename", "f", nil, "OpenMedModel file or directory of .yaml/.yml/.json files (repeatable)")
	cmd.Flags().StringVar(&targetFile, "target", "", "Deployment file(s) to plan against instead of the cluster (offline)")
	cmd.Flags().StringVarP(&output, "output", "o", "", "Output format: yaml or json (default text)")
	cmd.Flags().StringVar(&shard, "watch-label-selector", "", "The operator's --watch-label-selector, when it runs sharded: the plan carries the model's values of its keys onto the Deployment as the operator does")
	return cmd
}

// readModels reads every OpenMedModel in files (directories: their .yaml,
// .yml and .json files); other kinds are skipped. Each is validated with the
// rules the API server enforces.
func readModels(files []string) ([]*v1alpha1.OpenMedModel, error) {
	var models []*v1alpha1.OpenMedModel
	err := eachObject(files, func(path string, u *unstructured.Unstructured) error {
		if u.GroupVersionKind() != v1alpha1.GroupVersion.WithKind(kind) {
			return nil
		}
		data, err := json.Marshal(u.Object)
		if err != nil {
			return err
		}
		m, errs := validation.ValidateJSON(data)
		if len(errs) > 0 {
			return fmt.Errorf("%s: %s %q would be rejected by the API server: %v", path, kind, u.GetName(), errs.ToAggregate())
		}
		models = append(models, m)
		return nil
	})
	if err == nil && len(models) == 0 {
		err = fmt.Errorf("no %s in %s", kind, strings.Join(files, ", "))
	}
	return models, err
}

// eachObject decodes every object of every file (directories: one level).
func eachObject(files []string, fn func(path string, u *unstructured.Unstructured) error) error {
	var paths []string
	for _, f := range files {
		info, err := os.Stat(f)
		if err != nil {
			return err
		}
		if !info.IsDir() {
			paths = append(paths, f)
			continue
		}
		entries, err := os.ReadDir(f)
		if err != nil {
			return err
		}
		for _, e := range entries {
			switch filepath.Ext(e.Name()) {
			case ".yaml", ".yml", ".json":
				paths = append(paths, filepath.Join(f, e.Name()))
			}
		}
	}
	sort.Strings(paths)
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			u := &unstructured.Unstructured{}
			if err := dec.Decode(&u.Object); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return fmt.Errorf("%s: %w", path, err)
			}
			if len(u.Object) == 0 {
				continue
			}
			if err := fn(path, u); err != nil {
				return err
			}
		}
	}
	return nil
}

// source is where plan reads the live state, and how it computes the
// Deployment after the operator's apply.
type source interface {
	// namespace is the namespace of objects without one.
	namespace() string
	model(ctx context.Context, ns, name string) (*v1alpha1.OpenMedModel, error)
	deployment(ctx context.Context, ns, name string) (*unstructured.Unstructured, error)
	configMaps(ctx context.Context, ns string, owner *v1alpha1.OpenMedModel) ([]corev1.ConfigMap, error)
	// claimTemplate reads the ResourceClaimTemplate ns/name; one missing
	// or forbidden is returned with why (preview.ClaimTemplate.Unreadable).
	claimTemplate(ctx context.Context, ns, name string) (preview.ClaimTemplate, error)
	// changes lists the Deployment fields the intent changes; with
	// keepReplicas the pass first gives spec.replicas up at its live value.
	changes(ctx context.Context, live, takeover, intent *unstructured.Unstructured, keepReplicas bool) ([]preview.FieldChange, error)
	// access says whether the ServiceAccount ns/sa may make the writes
	// needs, or why that cannot be checked.
	access(ctx context.Context, ns, sa string, needs []preview.Need) string
}

// errLiveChanged says the Deployment changed while a model was planned.
var errLiveChanged = errors.New("the Deployment changed while it was planned")

// planAttempts bounds how often a model is planned again because its
// Deployment changed in between.
const planAttempts = 5

// planOne plans one model from the file, again when the Deployment changed
// while it was planned.
func planOne(ctx context.Context, src source, file *v1alpha1.OpenMedModel, now metav1.Time, opts rollout.Options) (preview.Result, error) {
	for attempt := 1; ; attempt++ {
		res, err := planOnce(ctx, src, file, now, opts)
		if !errors.Is(err, errLiveChanged) || attempt == planAttempts {
			return res, err
		}
	}
}

func planOnce(ctx context.Context, src source, file *v1alpha1.OpenMedModel, now metav1.Time, opts rollout.Options) (preview.Result, error) {
	if file.Namespace == "" {
		file.Namespace = src.namespace()
	}
	live, err := src.model(ctx, file.Namespace, file.Name)
	if err != nil {
		return preview.Result{}, err
	}
	obj, annotations := preview.CommittedWith(file, live)
	observed := rollout.Observed{Now: now}
	desired, previous := rollout.TargetNames(obj)
	liveDep, err := src.deployment(ctx, obj.Namespace, desired)
	if err != nil {
		return preview.Result{}, err
	}
	if liveDep != nil {
		observed.Deployment = &appsv1.Deployment{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(liveDep.Object, observed.Deployment); err != nil {
			return preview.Result{}, fmt.Errorf("decode Deployment %s/%s: %w", obj.Namespace, desired, err)
		}
	}
	for _, name := range previous {
		prev, err := src.deployment(ctx, obj.Namespace, name)
		if err != nil {
			return preview.Result{}, err
		}
		if prev != nil {
			dep := &appsv1.Deployment{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(prev.Object, dep); err != nil {
				return preview.Result{}, fmt.Errorf("decode Deployment %s/%s: %w", obj.Namespace, name, err)
			}
			observed.PreviousTargets = append(observed.PreviousTargets, dep)
		}
	}
	if live != nil {
		if observed.ConfigMaps, err = src.configMaps(ctx, obj.Namespace, live); err != nil {
			return preview.Result{}, err
		}
		// Read whole: what they hold is known, as the operator's read of
		// one whose UID its status does not record would find it.
		observed.ConfigMapContents = observed.ConfigMaps
	}
	var templates []preview.ClaimTemplate
	if observed.Deployment != nil {
		seen := map[string]bool{}
		for _, c := range observed.Deployment.Spec.Template.Spec.ResourceClaims {
			if c.ResourceClaimTemplateName == nil || seen[*c.ResourceClaimTemplateName] {
				continue
			}
			seen[*c.ResourceClaimTemplateName] = true
			t, err := src.claimTemplate(ctx, obj.Namespace, *c.ResourceClaimTemplateName)
			if err != nil {
				return preview.Result{}, err
			}
			templates = append(templates, t)
		}
	}
	res := preview.Model(obj, observed, opts, templates...)
	res.Annotations = annotations
	res.New = live == nil
	res.SpecChanged = live != nil && obj.Generation != live.Generation
	if res.Apply != nil && liveDep != nil {
		if res.Deployment, err = src.changes(ctx, liveDep, res.Takeover, res.Apply, res.ReleaseReplicas); err != nil {
			return preview.Result{}, err
		}
		res.PodsRoll = preview.TemplateChanges(res.Deployment)
	}
	if sa := obj.Spec.ServiceAccountName; sa != "" && len(res.Needs()) > 0 {
		res.Access = src.access(ctx, obj.Namespace, sa, res.Needs())
	}
	return res, nil
}

// printPlans writes the results as text, JSON or YAML.
func (r *root) printPlans(output string, results []preview.Result) error {
	switch output {
	case outputJSON, outputYAML:
		doc := map[string]any{"apiVersion": "openmed.ai/v1alpha1", "kind": "Plan", "items": results}
		data, err := json.MarshalIndent(doc, "", "  ")
		if err != nil {
			return err
		}
		if output == outputYAML {
			if data, err = yaml.JSONToYAML(data); err != nil {
				return err
			}
		}
		_, err = r.opts.Out.Write(append(bytes.TrimRight(data, "\n"), '\n'))
		return err
	}
	for i := range results {
		if i > 0 {
			fmt.Fprintln(r.opts.Out)
		}
		printPlan(r.opts.Out, &results[i])
	}
	return nil
}

func printPlan(w io.Writer, res *preview.Result) {
	what := "unchanged spec"
	switch {
	case res.New:
		what = "new"
	case res.SpecChanged:
		what = fmt.Sprintf("spec changed, generation %d", res.Generation)
	}
	fmt.Fprintf(w, "%s %s/%s (%s)\n", kind, res.Namespace, res.Name, what)
	fmt.Fprintf(w, "  phase:       %s\n", orNone(string(res.Phase)))
	if res.Message != "" {
		fmt.Fprintf(w, "  message:     %s\n", res.Message)
	}
	var conds []string
	for _, c := range res.Conditions {
		conds = append(conds, fmt.Sprintf("%s=%s/%s", c.Type, c.Status, c.Reason))
	}
	fmt.Fprintf(w, "  conditions:  %s\n", orNone(strings.Join(conds, " ")))
	if len(res.Events) > 0 {
		fmt.Fprintf(w, "  events:      %s\n", strings.Join(res.Events, ", "))
	}
	for _, cm := range res.CreateConfigMaps {
		fmt.Fprintf(w, "  create:      ConfigMap %s\n", cm)
	}
	for _, cm := range res.PruneConfigMaps {
		fmt.Fprintf(w, "  delete:      ConfigMap %s (no longer active or retained)\n", cm)
	}
	if res.Target != "" {
		if len(res.Deployment) == 0 {
			fmt.Fprintf(w, "  Deployment %s: no field changes\n", res.Target)
		} else {
			roll := "pods keep running"
			if res.PodsRoll {
				roll = "pods roll (the pod template changes)"
			}
			fmt.Fprintf(w, "  Deployment %s (server-side apply as %s; %s):\n", res.Target, rollout.DefaultFieldManager, roll)
			for _, c := range res.Deployment {
				fmt.Fprintf(w, "    %s: %s -> %s%s\n", c.Field, orNone(c.From), orNone(c.To), managedBy(c.Managers))
			}
		}
	}
	for _, d := range res.Drift {
		how := "corrected"
		switch {
		case d.Replaced:
			how = "replaced"
		case d.Removed:
			how = "restored (removed)"
		}
		fmt.Fprintf(w, "  drift:       %s %s%s\n", d.Field, how, changedBy(d.Managers))
	}
	for _, name := range res.Release {
		fmt.Fprintf(w, "  release:     Deployment %s\n", name)
	}
	if res.ReleaseReplicas {
		fmt.Fprintf(w, "  release:     spec.replicas of Deployment %s: the operator stops owning it and leaves its live value\n", res.Target)
	}
	for _, a := range res.Annotations {
		if a.Removed {
			fmt.Fprintf(w, "  annotation:  %s removed (applied from Git%s)\n", a.Key, by(a.Managers))
		} else {
			fmt.Fprintf(w, "  annotation:  %s kept: set outside the file%s; remove it by hand\n", a.Key, by(a.Managers))
		}
	}
	if res.Bake != "" {
		fmt.Fprintf(w, "  bake:        %s\n", res.Bake)
	}
	if res.Capacity != "" {
		fmt.Fprintf(w, "  capacity:    %s\n", res.Capacity)
	}
	if res.Verification != nil {
		printGoldenRequest(w, res.Verification)
	}
	if len(res.Needs()) > 0 {
		if res.WritesAs != "" {
			fmt.Fprintf(w, "  writes as:   ServiceAccount %s\n", res.WritesAs)
		} else {
			fmt.Fprintln(w, "  writes as:   the operator's own identity (or its --default-service-account)")
		}
	}
	if res.Access != "" {
		fmt.Fprintf(w, "  access:      %s\n", res.Access)
	}
	if res.OnFailure != "" {
		fmt.Fprintf(w, "  on failure:  %s\n", res.OnFailure)
	}
	if res.Changes() {
		fmt.Fprintln(w, "  result:      changes")
	} else {
		fmt.Fprintln(w, "  result:      no change to the cluster")
	}
}

// printGoldenRequest writes the golden request of a model: where it goes,
// the names of its headers (a Secret's named, never read), the size of
// its body, the attempts and the interval, and the success condition.
func printGoldenRequest(w io.Writer, g *preview.GoldenRequest) {
	fmt.Fprintf(w, "  verify:      %s %s on port %s of each new pod before it counts as ready (readiness gate %s)\n",
		g.Method, g.Path, g.Port, v1alpha1.VerifiedCondition)
	if len(g.Headers) > 0 {
		names := make([]string, 0, len(g.Headers))
		for _, h := range g.Headers {
			if h.Secret != "" {
				names = append(names, fmt.Sprintf("%s (from Secret %s, key %s, read when sent)", h.Name, h.Secret, h.Key))
			} else {
				names = append(names, h.Name)
			}
		}
		fmt.Fprintf(w, "    headers:   %s\n", strings.Join(names, ", "))
	}
	body := "none"
	if g.BodyBytes > 0 {
		body = fmt.Sprintf("%d bytes", g.BodyBytes)
	}
	fmt.Fprintf(w, "    body:      %s\n", body)
	fmt.Fprintf(w, "    timeout:   %ds × %d attempts; a pod that fails every attempt fails the rollout at once\n", g.TimeoutSeconds, g.Attempts)
	fmt.Fprintf(w, "    interval:  %ds: each pod of a baking version is asked again, and a serving version's pod that failed\n", g.IntervalSeconds)
	fmt.Fprintf(w, "    success:   %s\n", g.SuccessCondition)
}

func managedBy(managers []string) string {
	if len(managers) == 0 {
		return ""
	}
	return " (managed by " + strings.Join(managers, ", ") + ")"
}

func by(managers []string) string {
	if len(managers) == 0 {
		return ""
	}
	return " by " + strings.Join(managers, ", ")
}

func changedBy(managers []string) string {
	if len(managers) == 0 {
		return ""
	}
	return " (set by " + strings.Join(managers, ", ") + ")"
}
