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
	b, err := os.ReadFile(filepath.Join(root, "kustomize", "crd", "bases", "openmed.ai_openmedmodels.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(b, &crd); err != nil {
		t.Fatal(err)
	}
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

	doc, err := os.ReadFile(filepath.Join(root, "docs", "spec", "v1alpha1", "openmedmodels.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
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
