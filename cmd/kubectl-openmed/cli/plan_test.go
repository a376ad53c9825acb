package cli

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// The published examples: what a pull request adds to Git.
var (
	exampleModel  = filepath.Join("..", "..", "..", "examples", "openmedmodel.yaml")
	exampleTarget = filepath.Join("..", "..", "..", "examples", "target-deployment.yaml")
)

// A target whose pods claim a GPU through Dynamic Resource Allocation, and
// the ResourceClaimTemplate it names.
var (
	draTarget        = filepath.Join("testdata", "plan", "dra-target.yaml")
	draClaimTemplate = filepath.Join("testdata", "plan", "dra-claim-template.yaml")
)

// planNow is the clock of the offline plans, so their conditions' times are
// fixed in the golden files.
var planNow = time.Date(2026, 8, 20, 12, 0, 0, 0, time.UTC)

func exitCode(err error) int {
	var exit *ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		return exit.Code
	default:
		return 1
	}
}

// TestPlanOffline plans the example model against the example Deployment
// file, as a pull-request check without cluster access would.
func TestPlanOffline(t *testing.T) {
	dir := t.TempDir()
	other := filepath.Join(dir, "other.yaml")
	if err := os.WriteFile(other, []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	verified := filepath.Join("testdata", "plan", "verified.yaml")
	tests := []struct {
		name     string
		args     []string
		golden   string
		wantCode int
		wantErr  string
		// absent are texts the output must not carry.
		absent []string
	}{
		{name: "text", args: []string{"-f", exampleModel, "--target", exampleTarget}, golden: "plan_offline.txt", wantCode: ExitChanges},
		{name: "yaml", args: []string{"-f", exampleModel, "--target", exampleTarget, "-o", "yaml"}, golden: "plan_offline.yaml", wantCode: ExitChanges},
		{name: "bake", args: []string{"-f", filepath.Join("testdata", "plan", "baking.yaml"), "--target", exampleTarget}, golden: "plan_offline_bake.txt", wantCode: ExitChanges},
		{name: "gpu replace in place", args: []string{"-f", filepath.Join("testdata", "plan", "gpu-inplace.yaml"), "--target", filepath.Join("testdata", "plan", "gpu-target.yaml")}, golden: "plan_offline_gpu_inplace.txt", wantCode: ExitChanges},
		{name: "gpu", args: []string{"-f", exampleModel, "--target", filepath.Join("testdata", "plan", "gpu-target.yaml")}, golden: "plan_offline_gpu.txt", wantCode: ExitChanges},
		{name: "dra", args: []string{"-f", exampleModel, "--target", draTarget + "," + draClaimTemplate}, golden: "plan_offline_dra.txt", wantCode: ExitChanges},
		{name: "dra template not in the files", args: []string{"-f", exampleModel, "--target", draTarget}, golden: "plan_offline_dra_no_template.txt", wantCode: ExitChanges},
		{name: "sharded", args: []string{"-f", filepath.Join("testdata", "plan", "sharded.yaml"), "--target", exampleTarget, "--watch-label-selector", "sharding.fluxcd.io/key=shard1"},
			golden: "plan_offline_sharded.txt", wantCode: ExitChanges},
		// A header's value and the body never show, in text or YAML.
		{name: "golden request", args: []string{"-f", verified, "--target", exampleTarget}, golden: "plan_offline_verified.txt", wantCode: ExitChanges,
			absent: []string{"openmed-operator-verification", "Patient"}},
		{name: "golden request yaml", args: []string{"-f", verified, "--target", exampleTarget, "-o", "yaml"}, golden: "plan_offline_verified.yaml", wantCode: ExitChanges,
			absent: []string{"openmed-operator-verification", "Patient"}},
		{name: "bad shard selector", args: []string{"-f", exampleModel, "--target", exampleTarget, "--watch-label-selector", "a=b=c"}, wantCode: 1,
			wantErr: "invalid --watch-label-selector"},
		{name: "invalid spec", args: []string{"-f", filepath.Join("testdata", "plan", "invalid.yaml"), "--target", exampleTarget}, wantCode: 1,
			wantErr: `would be rejected by the API server: spec.tier: Invalid value: must be one of`},
		{name: "no model", args: []string{"-f", other, "--target", exampleTarget}, wantCode: 1, wantErr: "no OpenMedModel in"},
		{name: "no input", args: []string{"--target", exampleTarget}, wantCode: 1, wantErr: "no input"},
		{name: "bad format", args: []string{"-f", exampleModel, "-o", "wide"}, wantCode: 1, wantErr: `unsupported output format "wide"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := runWith(t, Options{Now: func() time.Time { return planNow }}, append([]string{"plan"}, tt.args...)...)
			if got := exitCode(res.err); got != tt.wantCode {
				t.Errorf("exit code %d, want %d (%v)", got, tt.wantCode, res.err)
			}
			if tt.wantErr != "" && (res.err == nil || !strings.Contains(res.err.Error(), tt.wantErr)) {
				t.Errorf("error %v, want %q", res.err, tt.wantErr)
			}
			if tt.golden != "" {
				golden(t, tt.golden, res.stdout)
			}
			for _, a := range tt.absent {
				if strings.Contains(res.stdout, a) {
					t.Errorf("the plan shows %q", a)
				}
			}
		})
	}
}

// TestPlanOnline plans against the real API server: the chart's Deployment
// created by helm, no OpenMedModel yet, then the model created and the
// operator's pointer applied by hand (no operator runs in this suite). The
// Deployment changes come from a server-side dry-run apply and name helm
// as the manager of what the operator takes over; nothing is written.
func TestPlanOnline(t *testing.T) {
	ctx := context.Background()
	ensureNamespace(t, "openmed")
	objs := readObjects(t, exampleTarget)
	for _, u := range objs {
		if err := env.Client.Create(ctx, u, client.FieldOwner("helm")); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), u) })
	}
	before := &appsv1.Deployment{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "openmed", Name: "openmed-service"}, before); err != nil {
		t.Fatal(err)
	}

	res := run(t, "plan", "-f", exampleModel)
	if got := exitCode(res.err); got != ExitChanges {
		t.Fatalf("exit code %d (%v)", got, res.err)
	}
	golden(t, "plan_online_new.txt", res.stdout)

	after := &appsv1.Deployment{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "openmed", Name: "openmed-service"}, after); err != nil {
		t.Fatal(err)
	}
	if after.ResourceVersion != before.ResourceVersion {
		t.Errorf("plan wrote the Deployment: resourceVersion %s -> %s", before.ResourceVersion, after.ResourceVersion)
	}
	if _, err := dyn.Resource(resource).Namespace("openmed").Get(ctx, "openmed-service", metav1.GetOptions{}); err == nil {
		t.Error("plan created the OpenMedModel")
	}
}

// TestPlanDRA: plan reads the ResourceClaimTemplates the target's pod
// template names from the API server and counts their devices per surge
// pod; one that does not exist, or that the caller may not read, is named
// in the capacity line and does not fail the plan.
func TestPlanDRA(t *testing.T) {
	ctx := context.Background()
	const ns = "plan-dra"
	ensureNamespace(t, ns)
	for _, u := range readObjects(t, draTarget) {
		u.SetNamespace(ns)
		if err := env.Client.Create(ctx, u, client.FieldOwner("helm")); err != nil {
			t.Fatal(err)
		}
	}
	file := modelFile(t, ns, nil)
	const (
		capacity = "  capacity:    1 pod more than its 2 replicas while the pods roll (maxSurge 1), each requesting cpu 500m, memory 1Gi and DRA devices: "
		shared   = ", no new device (claim cache shares ResourceClaim model-cache); "
	)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"not found", nil, capacity + "claim gpu from template gpu-claim (not readable: not found)" + shared},
		{"read", nil, capacity + "1 of class gpu.nvidia.com (claim gpu from template gpu-claim)" + shared},
		{"forbidden", []string{"--as", "planner"}, capacity + "claim gpu from template gpu-claim (not readable: you may not get resourceclaimtemplates (resource.k8s.io))" + shared},
	} {
		t.Run(tc.name, func(t *testing.T) {
			switch tc.name {
			case "read":
				tmpl := readObjects(t, draClaimTemplate)[0]
				tmpl.SetNamespace(ns)
				if err := env.Client.Create(ctx, tmpl); err != nil {
					t.Fatal(err)
				}
			case "forbidden":
				grantPlanner(t)
			}
			res := run(t, append([]string{"plan", "-f", file}, tc.args...)...)
			if got := exitCode(res.err); got != ExitChanges {
				t.Fatalf("exit code %d (%v)\n%s%s", got, res.err, res.stdout, res.stderr)
			}
			if !strings.Contains(res.stdout, tc.want) {
				t.Fatalf("plan does not say %q:\n%s", tc.want, res.stdout)
			}
		})
	}
}

func readObjects(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []*unstructured.Unstructured
	for _, doc := range strings.Split(string(data), "\n---") {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatal(err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
	return out
}

func TestHistory(t *testing.T) {
	create(t, "rolled_back.yaml", "models", "radiology-ner")
	res := run(t, "history", "radiology-ner")
	if res.err != nil {
		t.Fatal(res.err)
	}
	golden(t, "history_rolled_back.txt", res.stdout)
	if res := run(t, "history", "absent"); res.err == nil || !strings.Contains(res.err.Error(), `OpenMedModel "absent" not found`) {
		t.Errorf("history of a missing model: %v", res.err)
	}
}

// TestPlanTakeover: a chart renders strategy.rollingUpdate and the model asks
// for Recreate. The operator takes the block over and drops it in one pass;
// the plan lists the dropped fields with the chart's manager.
func TestPlanTakeover(t *testing.T) {
	ctx := context.Background()
	ns := "takeover"
	ensureNamespace(t, ns)
	for _, u := range readObjects(t, exampleTarget) {
		u.SetNamespace(ns)
		if u.GetKind() == "Deployment" {
			if err := unstructured.SetNestedMap(u.Object, map[string]any{
				"type": "RollingUpdate", "rollingUpdate": map[string]any{"maxSurge": int64(1), "maxUnavailable": int64(0)},
			}, "spec", "strategy"); err != nil {
				t.Fatal(err)
			}
		}
		if err := env.Client.Create(ctx, u, client.FieldOwner("helm")); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), u) })
	}
	file := modelFile(t, ns, func(model *unstructured.Unstructured) {
		if err := unstructured.SetNestedField(model.Object, map[string]any{"type": "Recreate", "rollbackOnFailure": true}, "spec", "rolloutStrategy"); err != nil {
			t.Fatal(err)
		}
	})
	res := run(t, "plan", "-f", file)
	if got := exitCode(res.err); got != ExitChanges {
		t.Fatalf("exit code %d (%v)\n%s", got, res.err, res.stdout)
	}
	for _, want := range []string{
		`.spec.strategy.type: "RollingUpdate" -> "Recreate" (managed by helm)`,
		`.spec.strategy.rollingUpdate.maxSurge: 1 -> - (managed by helm)`,
		`.spec.strategy.rollingUpdate.maxUnavailable: 0 -> - (managed by helm)`,
	} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("plan output lacks %q:\n%s", want, res.stdout)
		}
	}
}

// modelFile writes the example model in namespace ns, changed by mutate
// (nil: as it is), to a file of the test's and returns its path.
func modelFile(t *testing.T, ns string, mutate func(*unstructured.Unstructured)) string {
	t.Helper()
	model := readObjects(t, exampleModel)[0]
	model.SetNamespace(ns)
	if mutate != nil {
		mutate(model)
	}
	data, err := yaml.Marshal(model.Object)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "model.yaml")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}
