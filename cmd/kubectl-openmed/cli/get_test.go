package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

func TestGet(t *testing.T) {
	create(t, "ready.yaml", "models", "clinical-ner")
	create(t, "rolled_back.yaml", "models", "radiology-ner")
	create(t, "new.yaml", "models", "fresh")
	create(t, "suspended.yaml", "lab", "paused")
	create(t, "rolling_out.yaml", "lab", "moving")
	create(t, "reference_failed.yaml", "lab", "legacy")
	ensureNamespace(t, "empty")

	tests := []struct {
		name string
		args []string
		// env sets KUBECONFIG instead of passing --kubeconfig.
		env bool
		// golden names the expected stdout; wantStderr and wantErr are
		// substrings.
		golden     string
		wantStderr string
		wantErr    string
	}{
		{name: "current context namespace", args: []string{"get"}, golden: "get_models.txt"},
		{name: "KUBECONFIG", args: []string{"get"}, env: true, golden: "get_models.txt"},
		{name: "other context", args: []string{"get", "--context", "lab"}, golden: "get_lab.txt"},
		{name: "namespace flag wins over context", args: []string{"get", "--context", "models", "-n", "lab"}, golden: "get_lab.txt"},
		{name: "all namespaces", args: []string{"get", "-A"}, golden: "get_all.txt"},
		{name: "by name", args: []string{"get", "radiology-ner"}, golden: "get_one.txt"},
		{name: "empty namespace", args: []string{"get", "-n", "empty"}, golden: "empty.txt", wantStderr: "No resources found in empty namespace."},
		{name: "missing", args: []string{"get", "absent"}, wantErr: `OpenMedModel "absent" not found in namespace "models"`},
		{name: "name across namespaces", args: []string{"get", "clinical-ner", "-A"}, wantErr: "cannot be retrieved by name across all namespaces"},
		{name: "unknown format", args: []string{"get", "-o", "wide"}, wantErr: `unsupported output format "wide"`},
		{name: "unknown context", args: []string{"get", "--context", "nowhere"}, wantErr: `context was not found for specified context: nowhere`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var res result
			if tc.env {
				t.Setenv("KUBECONFIG", kubeconfigFile(t))
				res = runWith(t, Options{}, tc.args...)
			} else {
				res = run(t, tc.args...)
			}
			if tc.wantErr != "" {
				if res.err == nil || !strings.Contains(res.err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q", res.err, tc.wantErr)
				}
				return
			}
			if res.err != nil {
				t.Fatal(res.err)
			}
			golden(t, tc.golden, res.stdout)
			if !strings.Contains(res.stderr, tc.wantStderr) {
				t.Errorf("stderr = %q, want %q", res.stderr, tc.wantStderr)
			}
		})
	}
}

func TestGetStructuredOutput(t *testing.T) {
	create(t, "ready.yaml", "models", "clinical-ner")
	create(t, "rolled_back.yaml", "models", "radiology-ner")

	decoders := map[string]func([]byte, any) error{
		"json": json.Unmarshal,
		"yaml": func(data []byte, v any) error { return yaml.Unmarshal(data, v) },
	}
	for format, decode := range decoders {
		t.Run(format+" object", func(t *testing.T) {
			res := run(t, "get", "radiology-ner", "-o", format)
			if res.err != nil {
				t.Fatal(res.err)
			}
			var obj struct {
				Kind     string
				Metadata map[string]any
				Status   struct{ Phase string }
			}
			if err := decode([]byte(res.stdout), &obj); err != nil {
				t.Fatalf("decode %s: %v\n%s", format, err, res.stdout)
			}
			if obj.Kind != "OpenMedModel" || obj.Metadata["name"] != "radiology-ner" || obj.Status.Phase != "RolledBack" {
				t.Errorf("got kind %q name %v phase %q", obj.Kind, obj.Metadata["name"], obj.Status.Phase)
			}
			if _, ok := obj.Metadata["managedFields"]; ok {
				t.Error("managedFields are printed")
			}
		})
		t.Run(format+" list", func(t *testing.T) {
			res := run(t, "get", "-o", format)
			if res.err != nil {
				t.Fatal(res.err)
			}
			var list struct {
				Items []struct{ Metadata map[string]any }
			}
			if err := decode([]byte(res.stdout), &list); err != nil {
				t.Fatalf("decode %s: %v\n%s", format, err, res.stdout)
			}
			var names []string
			for _, item := range list.Items {
				if _, ok := item.Metadata["managedFields"]; ok {
					t.Error("managedFields are printed")
				}
				names = append(names, item.Metadata["name"].(string))
			}
			if strings.Join(names, ",") != "clinical-ner,radiology-ner" {
				t.Errorf("items = %v", names)
			}
		})
	}
}

func TestDescribe(t *testing.T) {
	for _, fixture := range []string{"ready.yaml", "rolled_back.yaml", "reference_failed.yaml", "new.yaml", "rolling_out.yaml", "unschedulable.yaml", "verifying.yaml", "verification_failed.yaml"} {
		t.Run(fixture, func(t *testing.T) {
			create(t, fixture, "models", "clinical-ner")
			res := run(t, "describe", "clinical-ner")
			if res.err != nil {
				t.Fatal(res.err)
			}
			golden(t, "describe_"+strings.TrimSuffix(fixture, ".yaml")+".txt", res.stdout)
		})
	}
	t.Run("baking", func(t *testing.T) {
		// 6 s into the 20 s bake the fixture records.
		create(t, "baking.yaml", "models", "clinical-ner")
		at := func() time.Time { return time.Date(2026, 8, 20, 10, 0, 6, 0, time.UTC) }
		res := runWith(t, Options{Now: at}, "--kubeconfig", kubeconfigFile(t), "describe", "clinical-ner")
		if res.err != nil {
			t.Fatal(res.err)
		}
		golden(t, "describe_baking.txt", res.stdout)
		res = runWith(t, Options{Now: at}, "--kubeconfig", kubeconfigFile(t), "get", "clinical-ner")
		if res.err != nil {
			t.Fatal(res.err)
		}
		if !strings.Contains(res.stdout, "RollingOut (baking, 14s left)") || !strings.Contains(res.stdout, "Progressing") {
			t.Errorf("get does not show the time left:\n%s", res.stdout)
		}
	})
	for _, tc := range []struct{ fixture, want string }{
		{"unschedulable.yaml", "RollingOut (a pod cannot be scheduled)"},
		{"refused.yaml", "RollingOut (pods are refused: see describe)"},
		{"gated.yaml", "RollingOut (a pod waits for admission)"},
		{"verifying.yaml", "RollingOut (verifying a pod)"},
	} {
		t.Run(strings.TrimSuffix(tc.fixture, ".yaml"), func(t *testing.T) {
			create(t, tc.fixture, "models", "clinical-ner")
			res := run(t, "get", "clinical-ner")
			if res.err != nil {
				t.Fatal(res.err)
			}
			if !strings.Contains(res.stdout, tc.want) || !strings.Contains(res.stdout, "Progressing") {
				t.Errorf("get does not show the pod held back (%q):\n%s", tc.want, res.stdout)
			}
		})
	}
	t.Run("missing", func(t *testing.T) {
		res := run(t, "describe", "absent", "-n", "lab")
		if res.err == nil || !strings.Contains(res.err.Error(), `OpenMedModel "absent" not found in namespace "lab"`) {
			t.Fatalf("error = %v", res.err)
		}
	})
	t.Run("no name", func(t *testing.T) {
		if res := run(t, "describe"); res.err != errNameRequired {
			t.Fatalf("error = %v, want %v", res.err, errNameRequired)
		}
	})
}
