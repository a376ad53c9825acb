package validation_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/validation"
)

// serverVerdict creates the object on the real API server as kubectl does
// (strict field validation) but as a dry run, and returns the stored spec or
// the server's error.
func serverVerdict(t *testing.T, doc []byte) (map[string]any, error) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := cs.CoreV1().RESTClient().Post().
		AbsPath("/apis/openmed.ai/v1alpha1/namespaces/default/openmedmodels").
		Param("fieldValidation", "Strict").
		Param("dryRun", "All").
		SetHeader("Content-Type", "application/json").
		Body(doc).
		DoRaw(context.Background())
	if err != nil {
		// Keep the server's own reason: a rejection must be a validation
		// failure (400 strict decoding, 422 invalid), not any other error.
		var status metav1.Status
		if json.Unmarshal(raw, &status) != nil || (status.Code != 400 && status.Code != 422) {
			t.Fatalf("unexpected API error (not a validation failure): %v: %s", err, raw)
		}
		return nil, fmt.Errorf("HTTP %d %s: %s", status.Code, status.Reason, status.Message)
	}
	var obj struct {
		Spec map[string]any `json:"spec"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		t.Fatal(err)
	}
	return obj.Spec, nil
}

// TestDifferentialValidation proves that the CRD (OpenAPI schema, strict
// field validation and CEL, run by a real kube-apiserver) and the Go validator
// give the same verdict on every object of the corpus, and the same defaults
// on every accepted one. The one sanctioned difference is
// validation.GoOnlyFields: testdata/goonly.yaml holds objects the server
// accepts and Go refuses, each only on such a field.
func TestDifferentialValidation(t *testing.T) {
	for _, tc := range []struct {
		file    string
		valid   bool
		atLeast int
	}{
		{file: "testdata/invalid.yaml", valid: false, atLeast: 30},
		{file: "testdata/valid.yaml", valid: true, atLeast: 20},
	} {
		cases := loadCorpus(t, tc.file)
		if len(cases) < tc.atLeast {
			t.Fatalf("%s: %d cases, want at least %d", tc.file, len(cases), tc.atLeast)
		}
		for i, c := range cases {
			t.Run(c.Name, func(t *testing.T) {
				doc := c.objectJSON(t, caseName("diff", i))
				serverSpec, serverErr := serverVerdict(t, doc)
				obj, goErrs := validation.ValidateJSON(doc)

				serverOK, goOK := serverErr == nil, len(goErrs) == 0
				if serverOK != goOK {
					t.Fatalf("verdicts differ on %s\n server accepted=%v err=%v\n go accepted=%v errs=%v", doc, serverOK, serverErr, goOK, goErrs)
				}
				if serverOK != tc.valid {
					t.Fatalf("both validators accepted=%v, corpus expects valid=%v\n server: %v", serverOK, tc.valid, serverErr)
				}
				if !goOK {
					t.Logf("server: %v", serverErr)
					t.Logf("go:     %v", goErrs.ToAggregate())
					msg := goErrs.ToAggregate().Error()
					for _, value := range stringLeaves(doc) {
						if strings.Contains(msg, value) && !strings.Contains(validation.MsgBothZero+validation.MsgTier, value) {
							t.Errorf("Go message echoes a user value %q: %s", value, msg)
						}
					}
					return
				}
				goSpec := roundTrip(t, obj.Spec)
				if !reflect.DeepEqual(normalize(t, serverSpec), goSpec) {
					t.Fatalf("defaults differ\n server: %v\n go:     %v", normalize(t, serverSpec), goSpec)
				}
			})
		}
	}
}

// TestGoOnlyRefusals runs testdata/goonly.yaml: the API server accepts each
// object, and the Go validator refuses it only on fields of
// validation.GoOnlyFields. Every listed field has a case, so a rule cannot
// be listed without being shown.
func TestGoOnlyRefusals(t *testing.T) {
	cases := loadCorpus(t, "testdata/goonly.yaml")
	shown := map[string]bool{}
	for i, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			doc := c.objectJSON(t, caseName("goonly", i))
			if _, err := serverVerdict(t, doc); err != nil {
				t.Fatalf("the API server refuses %s: %v\n(a rule both enforce belongs in invalid.yaml)", doc, err)
			}
			_, errs := validation.ValidateJSON(doc)
			if len(errs) == 0 {
				t.Fatalf("the Go validator accepts %s", doc)
			}
			t.Logf("go: %v", errs.ToAggregate())
			for _, e := range errs {
				if _, ok := validation.GoOnlyFields[e.Field]; !ok {
					t.Errorf("Go refuses %s, which is not a Go-only field: %v", e.Field, e)
				}
				shown[e.Field] = true
			}
		})
	}
	for f := range validation.GoOnlyFields {
		if !shown[f] {
			t.Errorf("Go-only field %s has no case in testdata/goonly.yaml", f)
		}
	}
}

// roundTrip renders v as a generic JSON value for comparison.
func roundTrip(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// normalize renders the server's spec as a Go client reads it: decoded into
// the typed spec and rendered again. The server keeps what the typed API
// cannot tell from absent (an explicit "" body, an empty headers list); the
// defaults it filled in survive.
func normalize(t *testing.T, m map[string]any) any {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var spec v1alpha1.OpenMedModelSpec
	if err := json.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	return roundTrip(t, spec)
}
