package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// Output formats of `get -o`.
const (
	outputTable = ""
	outputJSON  = "json"
	outputYAML  = "yaml"
)

func newGetCommand(r *root) *cobra.Command {
	var (
		allNamespaces bool
		output        string
	)
	cmd := &cobra.Command{
		Use:   "get [NAME]",
		Short: "List OpenMedModels with their Argo CD and Flux health",
		Example: "  kubectl openmed get\n" +
			"  kubectl openmed get -A\n" +
			"  kubectl openmed get clinical-ner -o yaml",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != outputTable && output != outputJSON && output != outputYAML {
				return fmt.Errorf("unsupported output format %q: use json or yaml, or omit -o for a table", output)
			}
			if allNamespaces && len(args) > 0 {
				return errors.New("a resource cannot be retrieved by name across all namespaces")
			}
			t, err := r.connect()
			if err != nil {
				return err
			}
			ctx := cmd.Context()

			if len(args) == 1 {
				u, err := t.get(ctx, args[0])
				if err != nil {
					return err
				}
				if output != outputTable {
					return r.printObject(output, u.Object)
				}
				line, err := newRow(u, r.opts.Now())
				if err != nil {
					return err
				}
				return printTable(r.opts.Out, []row{line}, false)
			}

			ns := t.namespace
			if allNamespaces {
				ns = metav1.NamespaceAll
			}
			list, err := t.client.Namespace(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return fmt.Errorf("list %ss: %w", kind, err)
			}
			if output != outputTable {
				return r.printObject(output, list.UnstructuredContent())
			}
			if len(list.Items) == 0 {
				// kubectl's notice goes to stderr, so a script reading
				// stdout sees an empty table.
				if allNamespaces {
					fmt.Fprintln(r.opts.ErrOut, "No resources found")
				} else {
					fmt.Fprintf(r.opts.ErrOut, "No resources found in %s namespace.\n", ns)
				}
				return nil
			}
			sort.Slice(list.Items, func(i, j int) bool {
				a, b := list.Items[i], list.Items[j]
				if a.GetNamespace() != b.GetNamespace() {
					return a.GetNamespace() < b.GetNamespace()
				}
				return a.GetName() < b.GetName()
			})
			now := r.opts.Now()
			rows := make([]row, 0, len(list.Items))
			for i := range list.Items {
				line, err := newRow(&list.Items[i], now)
				if err != nil {
					return err
				}
				rows = append(rows, line)
			}
			return printTable(r.opts.Out, rows, allNamespaces)
		},
	}
	cmd.Flags().BoolVarP(&allNamespaces, "all-namespaces", "A", false, "List OpenMedModels across all namespaces")
	cmd.Flags().StringVarP(&output, "output", "o", outputTable, "Output format: json or yaml (default: a table)")
	return cmd
}

// printObject writes an object or a list as JSON or YAML without
// managedFields, which kubectl hides by default too.
func (r *root) printObject(output string, content map[string]any) error {
	stripManagedFields(content)
	var (
		data []byte
		err  error
	)
	switch output {
	case outputJSON:
		data, err = json.MarshalIndent(content, "", "    ")
		data = append(data, '\n')
	default:
		data, err = yaml.Marshal(content)
	}
	if err != nil {
		return fmt.Errorf("encode %s: %w", output, err)
	}
	_, err = r.opts.Out.Write(data)
	return err
}

// stripManagedFields removes metadata.managedFields from an object or from
// every item of a list.
func stripManagedFields(content map[string]any) {
	unstructured.RemoveNestedField(content, "metadata", "managedFields")
	items, _ := content["items"].([]any)
	for _, item := range items {
		if obj, ok := item.(map[string]any); ok {
			unstructured.RemoveNestedField(obj, "metadata", "managedFields")
		}
	}
}

func newDescribeCommand(r *root) *cobra.Command {
	return &cobra.Command{
		Use:   "describe NAME",
		Short: "Show an OpenMedModel's health, rollback state, conditions and history",
		Args:  exactlyOneName,
		RunE: func(cmd *cobra.Command, args []string) error {
			_, u, err := r.connectAndGet(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return describe(r.opts.Out, u, r.opts.Now())
		},
	}
}
