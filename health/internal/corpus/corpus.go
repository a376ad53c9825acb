// Package corpus loads the health model's fixture corpus and its table of
// expectations (health/testdata/corpus.yaml), shared by the tests of every
// face and by the generator of health_test.yaml.
package corpus

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// Paths relative to the health/ directory.
const (
	// TablePath is the table of expectations.
	TablePath = "testdata/corpus.yaml"
	// CustomizationDir is Argo CD's resource-customization folder for the kind.
	CustomizationDir = "argocd/resource_customizations/openmed.ai/OpenMedModel"
	// FixtureDir is where the fixtures live, in Argo CD's layout.
	FixtureDir = CustomizationDir + "/testdata"
)

// ArgoCD is an expected Argo CD health status.
type ArgoCD struct {
	Status  string `json:"status"`
	Message string `json:"message,omitempty"`
	// DeletionMessage is set for a terminating object (gitops-engine 3.6+
	// shows it instead of its default text).
	DeletionMessage string `json:"deletionMessage,omitempty"`
}

// Case is one row of the table.
type Case struct {
	// Fixture is the file name in FixtureDir.
	Fixture string `json:"fixture"`
	// ArgoCD is what Assess, the gitops-engine face and health.lua return.
	ArgoCD ArgoCD `json:"argocd"`
	// KStatus is what kstatus Compute returns.
	KStatus string `json:"kstatus"`
	// CEL is what the healthCheckExprs return when it differs from KStatus.
	CEL string `json:"cel,omitempty"`
	// CELWhy explains a CEL difference.
	CELWhy string `json:"celWhy,omitempty"`
}

// ExpectedCEL is the CEL result the case expects.
func (c Case) ExpectedCEL() string {
	if c.CEL != "" {
		return c.CEL
	}
	return c.KStatus
}

// Corpus is the loaded table.
type Corpus struct {
	// HealthDir is the path of health/ the corpus was loaded from.
	HealthDir string
	// Cases are the rows, in table order.
	Cases []Case
}

// Load reads the table below healthDir, the path of the health/ directory
// from the caller's working directory.
func Load(healthDir string) (*Corpus, error) {
	data, err := os.ReadFile(filepath.Join(healthDir, TablePath))
	if err != nil {
		return nil, fmt.Errorf("reading the corpus table: %w", err)
	}
	var table struct {
		Cases []Case `json:"cases"`
	}
	if err := yaml.UnmarshalStrict(data, &table); err != nil {
		return nil, fmt.Errorf("parsing the corpus table: %w", err)
	}
	return &Corpus{HealthDir: healthDir, Cases: table.Cases}, nil
}

// FixturePath is the path of a case's fixture.
func (c *Corpus) FixturePath(tc Case) string {
	return filepath.Join(c.HealthDir, FixtureDir, tc.Fixture)
}

// Object decodes a case's fixture as the API machinery does (integers become
// int64), the form controllers and the Argo CD application controller see.
func (c *Corpus) Object(tc Case) (*unstructured.Unstructured, error) {
	data, err := os.ReadFile(c.FixturePath(tc))
	if err != nil {
		return nil, fmt.Errorf("reading fixture %s: %w", tc.Fixture, err)
	}
	return Decode(data)
}

// Decode converts a YAML manifest to an unstructured object with the API
// machinery's number handling.
func Decode(data []byte) (*unstructured.Unstructured, error) {
	j, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("converting YAML: %w", err)
	}
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(j); err != nil {
		return nil, fmt.Errorf("decoding object: %w", err)
	}
	return obj, nil
}

// Malformed are objects with values of unexpected types, which no API server
// would store for an OpenMedModel but a health check must still answer for.
// The Go and Lua faces must agree on them too.
var Malformed = map[string]string{
	"status is a string":                       "status: broken\n",
	"observedGeneration is a string":           "status: {observedGeneration: '1'}\n",
	"no generation":                            "status: {observedGeneration: 1}\nmetadata: {name: m}\n",
	"condition observedGeneration is a string": "status: {observedGeneration: 1, conditions: [{type: Ready, status: 'True', observedGeneration: '1'}]}\n",
	"conditions is a map":                      "status: {observedGeneration: 1, phase: Ready, conditions: {type: Ready}}\n",
	"condition without type and no phase":      "status: {observedGeneration: 1, conditions: [{status: 'True'}, 7]}\n",
	"phase is a number":                        "status: {observedGeneration: 1, phase: 3}\n",
	"spec is a list":                           "spec: [suspend]\nstatus: {observedGeneration: 1, conditions: [{type: Ready, status: 'True'}]}\n",
}

// MalformedObject decodes a Malformed entry, adding the type and, unless the
// entry sets metadata itself, metadata.generation 1.
func MalformedObject(name string) (*unstructured.Unstructured, error) {
	body, ok := Malformed[name]
	if !ok {
		return nil, fmt.Errorf("no malformed case %q", name)
	}
	head := "apiVersion: openmed.ai/v1alpha1\nkind: OpenMedModel\n"
	if !strings.Contains(body, "metadata:") {
		head += "metadata: {name: m, generation: 1}\n"
	}
	return Decode([]byte(head + body))
}
