package v1alpha1_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/openmed/openmed-operator/pkg/validation"
)

// snapshots are status fields that hold a normalized spec: the spec
// document describes their shape once, through spec.
var snapshots = []string{"status.history[].spec", "status.lastSuccessfulSpec", "status.previousSuccessfulSpec", "status.rollbackSpec"}

// TestSpecDocumentCoversTheCRD: docs/spec/v1alpha1/openmedmodels.md names
// every field of the CRD's schema (spec and status, by its full path in
// backticks), and names no field the schema does not have. Fields inside a
// normalized-spec snapshot and the standard metav1.Condition fields are
// described through their parent.
func TestSpecDocumentCoversTheCRD(t *testing.T) {
	root := moduleRoot()
	crd := readCRD(t, root)
	var fields []string
	var walk func(s apiextensionsv1.JSONSchemaProps, path string)
	walk = func(s apiextensionsv1.JSONSchemaProps, path string) {
		for name, p := range s.Properties {
			q := name
			if path != "" {
				q = path + "." + name
			}
			fields = append(fields, q)
			if slices.Contains(snapshots, q) || q == "status.conditions" {
				continue
			}
			walk(p, q)
			if p.Items != nil && p.Items.Schema != nil {
				walk(*p.Items.Schema, q+"[]")
			}
		}
	}
	schema := crd.Spec.Versions[0].Schema.OpenAPIV3Schema
	walk(schema.Properties["spec"], "spec")
	walk(schema.Properties["status"], "status")

	text := specDocument(t, root)
	for _, f := range fields {
		if !strings.Contains(text, "`"+f+"`") {
			t.Errorf("the spec document does not describe `%s`", f)
		}
	}
	// Every condition type, reason, phase and annotation the API declares
	// is in it too, by value in backticks.
	for _, name := range declared(t, root) {
		if !strings.Contains(text, "`"+name.value+"`") {
			t.Errorf("the spec document does not name %s (`%s`)", name.ident, name.value)
		}
	}
}

// TestFullExampleSetsEverySpecField: the full example of the spec document
// (the YAML block between its full-example markers) sets every field of
// the CRD's spec schema, at every depth, sets none the schema does not
// have, and is an object the validator accepts. A field added to the API
// therefore cannot be missing from the example users copy.
func TestFullExampleSetsEverySpecField(t *testing.T) {
	root := moduleRoot()
	schema := readCRD(t, root).Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	example := fullExample(t, specDocument(t, root))

	var obj map[string]any
	if err := yaml.Unmarshal(example, &obj); err != nil {
		t.Fatalf("the full example is not YAML: %v", err)
	}
	spec, ok := obj["spec"].(map[string]any)
	if !ok {
		t.Fatal("the full example has no spec")
	}
	want := schemaPaths(schema, "spec")
	have := valuePaths(spec, "spec")
	for _, p := range want {
		if !slices.Contains(have, p) {
			t.Errorf("the full example does not set `%s`", p)
		}
	}
	for _, p := range have {
		if !slices.Contains(want, p) {
			t.Errorf("the full example sets `%s`, which the CRD does not have", p)
		}
	}

	js, err := yaml.YAMLToJSON(example)
	if err != nil {
		t.Fatal(err)
	}
	if _, errs := validation.ValidateJSON(js); len(errs) > 0 {
		t.Errorf("the full example is invalid: %v", errs.ToAggregate())
	}
}

// schemaPaths lists the property paths of s under path, every depth; the
// items of a list are at "path[]".
func schemaPaths(s apiextensionsv1.JSONSchemaProps, path string) []string {
	var out []string
	for name, p := range s.Properties {
		q := path + "." + name
		out = append(out, q)
		out = append(out, schemaPaths(p, q)...)
		if p.Items != nil && p.Items.Schema != nil {
			out = append(out, schemaPaths(*p.Items.Schema, q+"[]")...)
		}
	}
	slices.Sort(out)
	return out
}

// valuePaths lists the paths of the fields v sets under path, in the
// spelling of schemaPaths.
func valuePaths(v any, path string) []string {
	var out []string
	switch x := v.(type) {
	case map[string]any:
		for name, child := range x {
			q := path + "." + name
			out = append(out, q)
			out = append(out, valuePaths(child, q)...)
		}
	case []any:
		for _, item := range x {
			for _, q := range valuePaths(item, path+"[]") {
				if !slices.Contains(out, q) {
					out = append(out, q)
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// Markers around the full example in the spec document.
const (
	fullExampleStart = "<!-- full-example"
	fullExampleEnd   = "<!-- /full-example -->"
)

// fullExample returns the YAML of the fenced block between the full-example
// markers of doc.
func fullExample(t *testing.T, doc string) []byte {
	t.Helper()
	_, rest, ok := strings.Cut(doc, fullExampleStart)
	if !ok {
		t.Fatalf("the spec document has no %q marker", fullExampleStart)
	}
	block, _, ok := strings.Cut(rest, fullExampleEnd)
	if !ok {
		t.Fatalf("the spec document has no %q marker after %q", fullExampleEnd, fullExampleStart)
	}
	_, body, ok := strings.Cut(block, "```yaml\n")
	if !ok {
		t.Fatal("no ```yaml block between the full-example markers")
	}
	body, _, ok = strings.Cut(body, "```")
	if !ok {
		t.Fatal("the ```yaml block between the full-example markers does not end")
	}
	return []byte(body)
}

func readCRD(t *testing.T, root string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "kustomize", "crd", "bases", "openmed.ai_openmedmodels.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(b, &crd); err != nil {
		t.Fatal(err)
	}
	return &crd
}

func specDocument(t *testing.T, root string) string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(root, "docs", "spec", "v1alpha1", "openmedmodels.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(doc)
}

type constant struct{ ident, value string }

// declared lists the string constants of pkg/api/v1alpha1 whose names end
// in Condition or Reason, begin with Phase, or end in Annotation or Label.
func declared(t *testing.T, root string) []constant {
	t.Helper()
	pkgs, err := parser.ParseDir(token.NewFileSet(), filepath.Join(root, "pkg", "api", "v1alpha1"), func(fi fs.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []constant
	for _, pkg := range pkgs {
		for _, f := range pkg.Files {
			for _, d := range f.Decls {
				g, ok := d.(*ast.GenDecl)
				if !ok || g.Tok != token.CONST {
					continue
				}
				for _, spec := range g.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, n := range vs.Names {
						name := n.Name
						if !(strings.HasSuffix(name, "Condition") || strings.HasSuffix(name, "Reason") || strings.HasPrefix(name, "Phase") ||
							strings.HasSuffix(name, "Annotation") || strings.HasSuffix(name, "Label")) || i >= len(vs.Values) {
							continue
						}
						lit, ok := vs.Values[i].(*ast.BasicLit)
						if !ok || lit.Kind != token.STRING {
							continue
						}
						v, err := strconv.Unquote(lit.Value)
						if err != nil {
							t.Fatal(err)
						}
						out = append(out, constant{name, v})
					}
				}
			}
		}
	}
	if len(out) < 20 {
		t.Fatalf("found only %d constants: %v", len(out), out)
	}
	return out
}

func moduleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}
