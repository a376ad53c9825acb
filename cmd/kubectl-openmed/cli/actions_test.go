package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/fluxcd/pkg/apis/meta"
	"sigs.k8s.io/yaml"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

const (
	v1 = "OpenMed/OpenMed-NER-Clinical-v1"
	v2 = "OpenMed/OpenMed-NER-Clinical-v2"
	v3 = "OpenMed/OpenMed-NER-Clinical-v3"
)

// ptr marks an annotation that must be present with a value; nil in a want
// map means absent.
func ptr(s string) *string { return &s }

// checkAnnotations compares the annotations of ns/name the test cares about.
func checkAnnotations(t *testing.T, ns, name string, want map[string]*string) {
	t.Helper()
	got := fetch(t, ns, name).GetAnnotations()
	for key, value := range want {
		v, ok := got[key]
		switch {
		case value == nil && ok:
			t.Errorf("annotation %s = %q, want it absent", key, v)
		case value != nil && (!ok || v != *value):
			t.Errorf("annotation %s = %q (present %v), want %q", key, v, ok, *value)
		}
	}
}

func TestRollback(t *testing.T) {
	tests := []struct {
		name    string
		fixture string
		args    []string
		want    *string
		wantOut string
		// wantStderr is a substring; empty means nothing is printed there.
		wantStderr string
		wantErr    string
	}{
		{name: "newest other than desired", fixture: "ready.yaml", want: ptr(v2),
			wantOut: `openmedmodel.openmed.ai/m rollback to "` + v2 + `" requested`},
		{name: "named retained version", fixture: "ready.yaml", args: []string{v1}, want: ptr(v1)},
		{name: "named version is trimmed like the operator does", fixture: "ready.yaml", args: []string{" " + v1 + " "}, want: ptr(v1)},
		{name: "desired version itself is retained", fixture: "ready.yaml", args: []string{v3}, want: ptr(v3)},
		{name: "moves an existing hold", fixture: "rolled_back.yaml", args: []string{v1}, want: ptr(v1)},
		{name: "reference status format", fixture: "reference_failed.yaml", want: ptr(v2)},
		{name: "suspended", fixture: "suspended.yaml", want: ptr(v2),
			wantStderr: "Warning: OpenMedModel actions/m is suspended; the operator acts on the request once it is resumed"},
		{name: "version not retained", fixture: "ready.yaml", args: []string{"OpenMed/Unknown"},
			wantErr: `version "OpenMed/Unknown" is not retained in status.history (retained: ` + v3 + ", " + v2 + ", " + v1 + ")"},
		{name: "version past revisionHistoryLimit", fixture: "limited.yaml", args: []string{v1},
			wantErr: `version "` + v1 + `" is not retained`},
		{name: "nothing to roll back to", fixture: "new.yaml", wantErr: errNothingToRollBackTo.Error()},
		{name: "empty version", fixture: "ready.yaml", args: []string{" "}, wantErr: "VERSION must not be empty"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := create(t, tc.fixture, "actions", "m").GetAnnotations()[v1alpha1.RollbackToAnnotation]
			res := run(t, append([]string{"rollback", "m", "-n", "actions"}, tc.args...)...)
			if tc.wantErr != "" {
				if res.err == nil || !strings.Contains(res.err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q", res.err, tc.wantErr)
				}
				// A refused rollback leaves the object alone.
				if got := fetch(t, "actions", "m").GetAnnotations()[v1alpha1.RollbackToAnnotation]; got != before {
					t.Errorf("rollback-to changed from %q to %q", before, got)
				}
				return
			}
			if res.err != nil {
				t.Fatal(res.err)
			}
			checkAnnotations(t, "actions", "m", map[string]*string{v1alpha1.RollbackToAnnotation: tc.want})
			if !strings.Contains(res.stdout, tc.wantOut) {
				t.Errorf("stdout = %q, want %q", res.stdout, tc.wantOut)
			}
			if (tc.wantStderr == "") != (res.stderr == "") || !strings.Contains(res.stderr, tc.wantStderr) {
				t.Errorf("stderr = %q, want %q", res.stderr, tc.wantStderr)
			}
			assertManagedBy(t, "actions", "m")
		})
	}
}

// assertManagedBy checks that the plugin's write is recorded under its field
// manager.
func assertManagedBy(t *testing.T, ns, name string) {
	t.Helper()
	for _, f := range fetch(t, ns, name).GetManagedFields() {
		if f.Manager == FieldManager {
			return
		}
	}
	t.Errorf("no managedFields entry for %s", FieldManager)
}

func TestRelease(t *testing.T) {
	tests := []struct {
		fixture string
		wantOut string
	}{
		{fixture: "rolled_back.yaml", wantOut: "openmedmodel.openmed.ai/m rollback hold released\n"},
		{fixture: "ready.yaml", wantOut: "openmedmodel.openmed.ai/m has no rollback hold\n"},
	}
	for _, tc := range tests {
		t.Run(tc.fixture, func(t *testing.T) {
			create(t, tc.fixture, "actions", "m")
			res := run(t, "release", "m", "-n", "actions")
			if res.err != nil {
				t.Fatal(res.err)
			}
			if res.stdout != tc.wantOut {
				t.Errorf("stdout = %q, want %q", res.stdout, tc.wantOut)
			}
			checkAnnotations(t, "actions", "m", map[string]*string{v1alpha1.RollbackToAnnotation: nil})
		})
	}
}

func TestRetry(t *testing.T) {
	token := testNow.UTC().Format("2006-01-02T15:04:05Z")
	for _, fixture := range []string{"rolled_back.yaml", "reference_failed.yaml"} {
		t.Run(fixture, func(t *testing.T) {
			create(t, fixture, "actions", "m")
			res := run(t, "retry", "m", "-n", "actions")
			if res.err != nil {
				t.Fatal(res.err)
			}
			if want := "openmedmodel.openmed.ai/m retry requested at " + token + "\n"; res.stdout != want {
				t.Errorf("stdout = %q, want %q", res.stdout, want)
			}
			checkAnnotations(t, "actions", "m", map[string]*string{
				v1alpha1.RollbackToAnnotation:   nil,
				v1alpha1.ResetRequestAnnotation: ptr(token),
				meta.ReconcileRequestAnnotation: ptr(token),
			})
			assertManagedBy(t, "actions", "m")
		})
	}
	t.Run("missing", func(t *testing.T) {
		res := run(t, "retry", "absent", "-n", "actions")
		if res.err == nil || !strings.Contains(res.err.Error(), `OpenMedModel "absent" not found in namespace "actions"`) {
			t.Fatalf("error = %v", res.err)
		}
	})
}

func TestSuspendResume(t *testing.T) {
	tests := []struct {
		command, fixture string
		want             bool
		wantOut          string
	}{
		{command: "suspend", fixture: "ready.yaml", want: true, wantOut: "openmedmodel.openmed.ai/m suspended\n"},
		{command: "suspend", fixture: "suspended.yaml", want: true, wantOut: "openmedmodel.openmed.ai/m suspended\n"},
		{command: "resume", fixture: "suspended.yaml", want: false, wantOut: "openmedmodel.openmed.ai/m resumed\n"},
		{command: "resume", fixture: "ready.yaml", want: false, wantOut: "openmedmodel.openmed.ai/m resumed\n"},
	}
	for _, tc := range tests {
		t.Run(tc.command+" "+tc.fixture, func(t *testing.T) {
			create(t, tc.fixture, "actions", "m")
			res := run(t, tc.command, "m", "-n", "actions")
			if res.err != nil {
				t.Fatal(res.err)
			}
			m, err := typed(fetch(t, "actions", "m"))
			if err != nil {
				t.Fatal(err)
			}
			if m.Spec.Suspend != tc.want {
				t.Errorf("spec.suspend = %v, want %v", m.Spec.Suspend, tc.want)
			}
			if res.stdout != tc.wantOut {
				t.Errorf("stdout = %q, want %q", res.stdout, tc.wantOut)
			}
		})
	}
}

// argoActionsDir holds Argo CD's resource actions and their action tests.
var argoActionsDir = filepath.Join("..", "..", "..", "health", "argocd", "resource_customizations", "openmed.ai", "OpenMedModel", "actions")

// TestArgoCDActionParity runs every case of the Argo CD action_test.yaml
// through the plugin's patches: applied to the same input, each must give
// the Lua action's expected output, so both UIs change an object alike.
func TestArgoCDActionParity(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(argoActionsDir, "action_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var suite struct {
		ActionTests []struct {
			Action             string `json:"action"`
			InputPath          string `json:"inputPath"`
			ExpectedOutputPath string `json:"expectedOutputPath"`
		} `json:"actionTests"`
	}
	if err := yaml.Unmarshal(data, &suite); err != nil {
		t.Fatal(err)
	}
	// The clock of the Lua action tests, which fixes the retry token.
	luaNow := time.Date(2026, 8, 20, 12, 0, 0, 0, time.UTC)
	covered := map[string]bool{}
	for _, tc := range suite.ActionTests {
		covered[tc.Action] = true
		t.Run(tc.Action+"/"+tc.InputPath, func(t *testing.T) {
			input := readJSON(t, tc.InputPath)
			want := readJSON(t, tc.ExpectedOutputPath)
			var m v1alpha1.OpenMedModel
			if err := json.Unmarshal(input, &m); err != nil {
				t.Fatal(err)
			}
			var patch []byte
			switch tc.Action {
			case "rollback":
				patch, _, err = rollbackPatch(&m, "")
				if err == errNothingToRollBackTo {
					// Argo CD's action leaves the object unchanged here;
					// the plugin refuses instead of writing nothing.
					patch, err = []byte(`{}`), nil
				}
				if err != nil {
					t.Fatal(err)
				}
				// The plugin's patch is conditional on resourceVersion,
				// which the input carries unchanged.
			case "retry":
				patch, _ = retryPatch(luaNow)
			case "suspend":
				patch = suspendPatch(true)
			case "resume":
				patch = suspendPatch(false)
			default:
				t.Fatalf("no plugin command for action %q", tc.Action)
			}
			got, err := jsonpatch.MergePatch(input, patch)
			if err != nil {
				t.Fatal(err)
			}
			if !jsonEqual(t, got, want) {
				t.Errorf("plugin patch %s gives\n%s\nwant\n%s", patch, got, want)
			}
		})
	}
	for _, action := range []string{"rollback", "retry", "suspend", "resume"} {
		if !covered[action] {
			t.Errorf("action_test.yaml has no case for %s", action)
		}
	}
}

func readJSON(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(argoActionsDir, path))
	if err != nil {
		t.Fatal(err)
	}
	out, err := yaml.YAMLToJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(x, y)
}
