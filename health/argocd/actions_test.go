package argocd

import (
	"encoding/json"
	"os"
	"path"
	"reflect"
	"slices"
	"testing"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"sigs.k8s.io/yaml"

	"github.com/openmed/openmed-operator/health/internal/corpus"
)

// actionClock is the time the closed os module reports in action tests; the
// retry action's token comes from it.
var actionClock = time.Date(2026, 8, 20, 12, 0, 0, 0, time.UTC)

// actionVM runs actions as the Argo CD API server does: closed libraries.
var actionVM = luaVM{openLibs: false, now: func() time.Time { return actionClock }}

// actionTests is Argo CD's action_test.yaml format.
type actionTests struct {
	DiscoveryTests []struct {
		InputPath string `json:"inputPath"`
		Result    []struct {
			Name     string `json:"name"`
			Disabled bool   `json:"disabled"`
		} `json:"result"`
	} `json:"discoveryTests"`
	ActionTests []struct {
		Action             string `json:"action"`
		InputPath          string `json:"inputPath"`
		ExpectedOutputPath string `json:"expectedOutputPath"`
	} `json:"actionTests"`
}

func loadActionTests(t *testing.T) (string, actionTests) {
	t.Helper()
	dir := path.Join("..", corpus.CustomizationDir, "actions")
	data, err := os.ReadFile(path.Join(dir, "action_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var tests actionTests
	if err := yaml.UnmarshalStrict(data, &tests); err != nil {
		t.Fatal(err)
	}
	return dir, tests
}

func TestActionDiscovery(t *testing.T) {
	dir, tests := loadActionTests(t)
	for _, tc := range tests.DiscoveryTests {
		t.Run(tc.InputPath, func(t *testing.T) {
			result, err := actionVM.run(yamlObject(t, path.Join(dir, tc.InputPath)), DiscoveryScript())
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]bool{}
			for name, v := range result.(map[string]any) {
				got[name] = v.(map[string]any)["disabled"].(bool)
			}
			want := map[string]bool{}
			for _, a := range tc.Result {
				want[a.Name] = a.Disabled
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("discovery = %v, want %v", got, want)
			}
			names := make([]string, 0, len(got))
			for name := range got {
				names = append(names, name)
			}
			for _, name := range Actions {
				if !slices.Contains(names, name) {
					t.Errorf("discovery does not offer %q", name)
				}
			}
		})
	}
}

// wantPatches are the JSON merge patches each action test must produce
// against its input: exactly the fields the action means to change.
var wantPatches = map[string]string{
	"rollback/testdata/ready.yaml":             `{"metadata":{"annotations":{"openmed.ai/rollback-to":"OpenMed/OpenMed-PII-SuperClinical-Small-44M-v1"}}}`,
	"rollback/testdata/reference_failed.yaml":  `{"metadata":{"annotations":{"openmed.ai/rollback-to":"OpenMed/OpenMed-PII-SuperClinical-Small-44M-v1"}}}`,
	"rollback/testdata/new.yaml":               `{}`,
	"retry/testdata/rolled_back.yaml":          `{"metadata":{"annotations":{"reconcile.fluxcd.io/requestedAt":"2026-08-20T12:00:00Z","reconcile.fluxcd.io/resetAt":"2026-08-20T12:00:00Z"}}}`,
	"retry/testdata/manual_rollback_held.yaml": `{"metadata":{"annotations":{"openmed.ai/rollback-to":null,"reconcile.fluxcd.io/requestedAt":"2026-08-20T12:00:00Z","reconcile.fluxcd.io/resetAt":"2026-08-20T12:00:00Z"}}}`,
	"suspend/testdata/ready.yaml":              `{"spec":{"suspend":true}}`,
	"resume/testdata/suspended.yaml":           `{"spec":{"suspend":false}}`,
}

func TestActions(t *testing.T) {
	dir, tests := loadActionTests(t)
	tested := map[string]bool{}
	for _, tc := range tests.ActionTests {
		key := tc.Action + "/" + tc.InputPath
		tested[tc.Action] = true
		t.Run(key, func(t *testing.T) {
			script, err := ActionScript(tc.Action)
			if err != nil {
				t.Fatal(err)
			}
			input := yamlObject(t, path.Join(dir, tc.InputPath))
			original, err := json.Marshal(input)
			if err != nil {
				t.Fatal(err)
			}
			result, err := actionVM.run(input, script)
			if err != nil {
				t.Fatal(err)
			}
			modified, err := json.Marshal(result)
			if err != nil {
				t.Fatal(err)
			}

			want := normalize(t, yamlObject(t, path.Join(dir, tc.ExpectedOutputPath)))
			if got := normalize(t, result); !reflect.DeepEqual(got, want) {
				t.Errorf("action output differs from %s:\n got %v\nwant %v", tc.ExpectedOutputPath, got, want)
			}

			patch, err := jsonpatch.CreateMergePatch(original, modified)
			if err != nil {
				t.Fatal(err)
			}
			wantPatch, ok := wantPatches[key]
			if !ok {
				t.Fatalf("no expected patch for %s", key)
			}
			if !jsonpatch.Equal(patch, []byte(wantPatch)) {
				t.Errorf("patch = %s, want %s", patch, wantPatch)
			}
		})
	}
	for _, name := range Actions {
		if !tested[name] {
			t.Errorf("action %q has no test in action_test.yaml", name)
		}
	}
}

// normalize round-trips a value through JSON so numbers and maps compare
// alike whatever produced them.
func normalize(t *testing.T, v any) any {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return out
}
