package validation_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// corpusCase is one object of testdata/valid.yaml or testdata/invalid.yaml.
type corpusCase struct {
	Name   string         `json:"name"`
	Set    map[string]any `json:"set"`
	Delete []string       `json:"delete"`
	Raw    string         `json:"raw"`
}

var repeatRE = regexp.MustCompile(`\$\{(.)\*(\d+)\}`)

// loadCorpus reads a case file, keeping numbers exactly as written.
func loadCorpus(t testing.TB, path string) []corpusCase {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var cases []corpusCase
	if err := dec.Decode(&cases); err != nil {
		t.Fatal(err)
	}
	return cases
}

// baseSpec is the example resource's spec (examples/openmedmodel.yaml).
func baseSpec() map[string]any {
	return map[string]any{
		"family":   "PII",
		"version":  "OpenMed/OpenMed-PII-SuperClinical-Small-44M-v1",
		"tier":     "Small",
		"replicas": json.Number("2"),
		"targetRef": map[string]any{
			"name":          "openmed-service",
			"containerName": "openmed-service",
		},
		"rolloutStrategy": map[string]any{
			"type":                    "RollingUpdate",
			"maxUnavailable":          json.Number("0"),
			"maxSurge":                json.Number("1"),
			"rollbackOnFailure":       true,
			"progressDeadlineSeconds": json.Number("600"),
		},
	}
}

// objectJSON renders a case as the JSON document sent to both validators.
func (c corpusCase) objectJSON(t testing.TB, name string) []byte {
	t.Helper()
	if c.Raw != "" {
		return []byte(expand(c.Raw))
	}
	spec := baseSpec()
	for _, path := range c.Delete {
		parent, key := walkTo(t, spec, path)
		delete(parent, key)
	}
	for path, value := range c.Set {
		parent, key := walkTo(t, spec, path)
		parent[key] = expandAll(value)
	}
	obj := map[string]any{
		"apiVersion": "openmed.ai/v1alpha1",
		"kind":       "OpenMedModel",
		"metadata":   map[string]any{"name": name, "namespace": "default"},
		"spec":       spec,
	}
	out, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func walkTo(t testing.TB, spec map[string]any, path string) (map[string]any, string) {
	parts := strings.Split(path, ".")
	m := spec
	for _, p := range parts[:len(parts)-1] {
		next, ok := m[p].(map[string]any)
		if !ok {
			t.Fatalf("corpus path %q: %q is not an object", path, p)
		}
		m = next
	}
	return m, parts[len(parts)-1]
}

// expandAll expands every string of a JSON value, at any depth.
func expandAll(v any) any {
	switch x := v.(type) {
	case string:
		return expand(x)
	case map[string]any:
		for k, c := range x {
			x[k] = expandAll(c)
		}
	case []any:
		for i := range x {
			x[i] = expandAll(x[i])
		}
	}
	return v
}

func expand(s string) string {
	return repeatRE.ReplaceAllStringFunc(s, func(m string) string {
		sub := repeatRE.FindStringSubmatch(m)
		n, _ := strconv.Atoi(sub[2])
		return strings.Repeat(sub[1], n)
	})
}

// stringLeaves returns the string values of a JSON document longer than three
// characters: the user values a message must never echo.
func stringLeaves(doc []byte) []string {
	var v any
	if err := json.Unmarshal(doc, &v); err != nil {
		return nil
	}
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for _, c := range x {
				walk(c)
			}
		case []any:
			for _, c := range x {
				walk(c)
			}
		case string:
			if len(x) > 3 {
				out = append(out, x)
			}
		}
	}
	walk(v)
	return out
}

func caseName(prefix string, i int) string { return fmt.Sprintf("%s-%02d", prefix, i) }
