package validation_test

import (
	"encoding/json"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/openmed/openmed-operator/pkg/validation"
)

// FuzzValidateJSON feeds arbitrary documents to the Go validator. It must
// never panic, and whatever it accepts must be accepted again, unchanged,
// after a round trip through JSON (defaulting is idempotent). Seeds: the
// differential corpus plus testdata/fuzz/FuzzValidateJSON.
func FuzzValidateJSON(f *testing.F) {
	for _, file := range []string{"testdata/valid.yaml", "testdata/invalid.yaml"} {
		for i, c := range loadCorpus(f, file) {
			f.Add(c.objectJSON(f, caseName("fuzz", i)))
		}
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		obj, errs := validation.ValidateJSON(doc)
		if len(errs) > 0 {
			if obj != nil {
				t.Fatalf("rejected with %v but returned an object", errs)
			}
			for _, e := range errs {
				if e.Error() == "" {
					t.Fatal("empty error message")
				}
			}
			return
		}
		again, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		obj2, errs := validation.ValidateJSON(again)
		if len(errs) > 0 {
			t.Fatalf("accepted %s, but not its round trip %s: %v", doc, again, errs)
		}
		// Semantic: an empty list and an absent one are the same spec.
		if !equality.Semantic.DeepEqual(obj.Spec, obj2.Spec) {
			t.Fatalf("round trip changed the spec:\n%+v\n%+v", obj.Spec, obj2.Spec)
		}
		if errs := validation.ValidateOpenMedModel(obj); len(errs) > 0 {
			t.Fatalf("typed validation rejects what JSON validation accepted: %v", errs)
		}
	})
}
