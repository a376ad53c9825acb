package argocd

import (
	"os"
	"path"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/argoproj/argo-cd/gitops-engine/v3/pkg/health"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	omhealth "github.com/openmed/openmed-operator/health"
	"github.com/openmed/openmed-operator/health/internal/corpus"
)

// environments are the two ways Argo CD runs health.lua.
var environments = map[string]luaVM{
	"argocd-cm (closed libraries)": {openLibs: false},
	"built-in (open libraries)":    {openLibs: true},
}

func loadCorpus(t testing.TB) *corpus.Corpus {
	t.Helper()
	c, err := corpus.Load("..")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// yamlObject decodes a fixture as Argo CD's own tests do (plain YAML, so
// numbers are float64), unlike corpus.Object (int64, as the controller sees
// it). The script must give the same answer for both.
func yamlObject(t testing.TB, file string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	obj := map[string]any{}
	if err := yaml.Unmarshal(data, &obj); err != nil {
		t.Fatal(err)
	}
	return obj
}

func expected(tc corpus.Case) *health.HealthStatus {
	return &health.HealthStatus{Status: health.HealthStatusCode(tc.ArgoCD.Status), Message: tc.ArgoCD.Message, DeletionMessage: tc.ArgoCD.DeletionMessage}
}

func TestHealthLua(t *testing.T) {
	c := loadCorpus(t)
	script := HealthScript()
	for env, vm := range environments {
		for _, tc := range c.Cases {
			t.Run(env+"/"+tc.Fixture, func(t *testing.T) {
				apiObj, err := c.Object(tc)
				if err != nil {
					t.Fatal(err)
				}
				for decoding, obj := range map[string]map[string]any{
					"api":  apiObj.Object,
					"yaml": yamlObject(t, c.FixturePath(tc)),
				} {
					result, err := vm.run(obj, script)
					if err != nil {
						t.Fatalf("%s decoding: %v", decoding, err)
					}
					got, err := toHealthStatus(result)
					if err != nil {
						t.Fatalf("%s decoding: %v", decoding, err)
					}
					if *got != *expected(tc) {
						t.Errorf("%s decoding: health.lua = %+v, want %+v", decoding, *got, *expected(tc))
					}
				}
			})
		}
	}
}

// TestHealthLuaMalformed checks that health.lua agrees with the Go model on
// values of unexpected types, where a careless script would raise an error
// (and Argo CD would report Unknown with the Lua error text).
func TestHealthLuaMalformed(t *testing.T) {
	script := HealthScript()
	for name := range corpus.Malformed {
		obj, err := corpus.MalformedObject(name)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := HealthCheck(obj)
		for env, vm := range environments {
			t.Run(env+"/"+name, func(t *testing.T) {
				result, err := vm.run(obj.Object, script)
				if err != nil {
					t.Fatal(err)
				}
				got, err := toHealthStatus(result)
				if err != nil {
					t.Fatal(err)
				}
				if *got != *want {
					t.Errorf("health.lua = %+v, Go = %+v", *got, *want)
				}
			})
		}
	}
}

// TestHealthTestYAML runs health_test.yaml exactly as Argo CD's
// TestLuaHealthScript does (open libraries, plain YAML decoding, exact
// comparison of status and message), and checks it lists every fixture.
func TestHealthTestYAML(t *testing.T) {
	dir := path.Join("..", corpus.CustomizationDir)
	data, err := os.ReadFile(path.Join(dir, "health_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var tests struct {
		Tests []struct {
			InputPath    string              `json:"inputPath"`
			HealthStatus health.HealthStatus `json:"healthStatus"`
		} `json:"tests"`
	}
	if err := yaml.UnmarshalStrict(data, &tests); err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	vm := luaVM{openLibs: true}
	for _, tc := range tests.Tests {
		listed[tc.InputPath] = true
		t.Run(tc.InputPath, func(t *testing.T) {
			result, err := vm.run(yamlObject(t, path.Join(dir, tc.InputPath)), HealthScript())
			if err != nil {
				t.Fatal(err)
			}
			got, err := toHealthStatus(result)
			if err != nil {
				t.Fatal(err)
			}
			if *got != tc.HealthStatus {
				t.Errorf("health.lua = %+v, want %+v", *got, tc.HealthStatus)
			}
		})
	}
	fixtures, err := os.ReadDir(path.Join(dir, "testdata"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fixtures {
		if !listed["testdata/"+f.Name()] {
			t.Errorf("fixture %s has no test in health_test.yaml", f.Name())
		}
	}
}

func TestHealthCheck(t *testing.T) {
	c := loadCorpus(t)
	for _, tc := range c.Cases {
		t.Run(tc.Fixture, func(t *testing.T) {
			obj, err := c.Object(tc)
			if err != nil {
				t.Fatal(err)
			}
			got, err := HealthCheck(obj)
			if err != nil {
				t.Fatal(err)
			}
			if *got != *expected(tc) {
				t.Errorf("HealthCheck() = %+v, want %+v", *got, *expected(tc))
			}

			// Through gitops-engine, as a Go tool would call it. Since
			// gitops-engine v3.6 a terminating object shows the check's
			// deletion message (the engine's finalizer text otherwise), and
			// the deletion message itself is not part of the result.
			want := expected(tc)
			if want.DeletionMessage != "" {
				want.Message, want.DeletionMessage = want.DeletionMessage, ""
			}
			got, err = health.GetResourceHealth(obj, HealthOverride{})
			if err != nil {
				t.Fatal(err)
			}
			if *got != *want {
				t.Errorf("GetResourceHealth() = %+v, want %+v", *got, *want)
			}
		})
	}
}

func TestHealthOverrideOtherKinds(t *testing.T) {
	obj := &unstructured.Unstructured{}
	obj.SetAPIVersion("v1")
	obj.SetKind("ConfigMap")
	got, err := HealthOverride{}.GetResourceHealth(obj)
	if err != nil || got != nil {
		t.Errorf("GetResourceHealth(ConfigMap) = %v, %v; want nil, nil so built-in checks apply", got, err)
	}
}

// TestScriptsAvoidClosedLibraries guards the branches the corpus does not
// reach: no script may use a library argocd-cm scripts do not get, and os
// only through require("os").
func TestScriptsAvoidClosedLibraries(t *testing.T) {
	closed := regexp.MustCompile(`\b(string|math|io|debug|coroutine|channel)\s*[.:\[]|:\s*[a-z]+\s*\(`)
	scripts := map[string]string{"health.lua": HealthScript(), "discovery.lua": DiscoveryScript()}
	for _, name := range Actions {
		s, err := ActionScript(name)
		if err != nil {
			t.Fatal(err)
		}
		scripts[name+"/action.lua"] = s
	}
	for name, s := range scripts {
		code := stripLuaComments(s)
		if m := closed.FindString(code); m != "" {
			t.Errorf("%s uses %q, unavailable with closed libraries", name, m)
		}
		if strings.Contains(code, "os.") && !strings.Contains(code, `local os = require("os")`) {
			t.Errorf("%s uses the global os, which closed libraries do not define", name)
		}
	}
}

func stripLuaComments(s string) string {
	var b strings.Builder
	for line := range strings.SplitSeq(s, "\n") {
		if i := strings.Index(line, "--"); i >= 0 {
			line = line[:i]
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}

// TestLuaTimeout shows the harness enforces Argo CD's 1 s budget, so the
// corpus runs above are held to it.
func TestLuaTimeout(t *testing.T) {
	if _, err := (luaVM{}).run(map[string]any{}, "while true do end"); err == nil {
		t.Fatal("an endless script finished; the 1 s deadline is not applied")
	}
}

// TestHealthScriptResult pins the result conversion to Argo CD's rules.
func TestHealthScriptResult(t *testing.T) {
	for script, want := range map[string]*health.HealthStatus{
		`return {status = "Healthy", message = "ok"}`: {Status: health.HealthStatusHealthy, Message: "ok"},
		`return {status = "Fine"}`:                    {Status: health.HealthStatusUnknown, Message: "Lua returned an invalid health status"},
	} {
		result, err := (luaVM{}).run(nil, script)
		if err != nil {
			t.Fatal(err)
		}
		got, err := toHealthStatus(result)
		if err != nil {
			t.Fatal(err)
		}
		if *got != *want {
			t.Errorf("%s: got %+v, want %+v", script, *got, *want)
		}
	}
	result, err := (luaVM{}).run(nil, "return 1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := toHealthStatus(result); err == nil {
		t.Error("a number result was accepted")
	}
}

// Keep the root model and this face on the same codes.
func TestCodes(t *testing.T) {
	for _, c := range []omhealth.Code{omhealth.Healthy, omhealth.Progressing, omhealth.Degraded, omhealth.Suspended, omhealth.Unknown} {
		if !validHealthCodes[health.HealthStatusCode(c)] {
			t.Errorf("code %q is not an Argo CD health status", c)
		}
	}
}

// TestClosedLibraries pins the argocd-cm environment: no string, math or
// global os; require("os") gives time and date only.
func TestClosedLibraries(t *testing.T) {
	script := `return {str = type(string), math = type(math), os = type(os), tableTime = type(table.time),
		required = type(require("os").date), exec = type(require("os").execute)}`
	got, err := (luaVM{}).run(nil, script)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"str": "nil", "math": "nil", "os": "nil", "tableTime": "nil", "required": "function", "exec": "nil"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("closed environment = %v, want %v", got, want)
	}
}
