package argocd

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/argoproj/argo-cd/gitops-engine/v3/pkg/health"
	kstatus "github.com/fluxcd/cli-utils/pkg/kstatus/status"
	"github.com/fluxcd/pkg/runtime/cel"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	omhealth "github.com/openmed/openmed-operator/health"
	"github.com/openmed/openmed-operator/health/flux"
	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/rollout"
)

// ecosystemCase is one Deployment and its model as the API server held
// them at one moment, captured from the real Deployment controller by
// `make health-fixtures` (health/internal/capture).
type ecosystemCase struct {
	file             string
	Scenario         string `json:"scenario"`
	OwnRolloutFailed bool   `json:"ownRolloutFailed"`
	// Deployment and Model are decoded as the API machinery decodes them
	// (numbers int64), as the controllers and Argo CD see them.
	Deployment json.RawMessage `json:"deployment"`
	Model      json.RawMessage `json:"model"`
	deployment *unstructured.Unstructured
	model      *unstructured.Unstructured
}

// ecosystemScenarios are the Deployment states the corpus must hold (the
// issue's list): scale-up and scale-down with and without minReadySeconds,
// a rollout by another manager, a paused target, ProgressDeadlineExceeded
// of the model's own rollout and of another manager's, ReplicaFailure, a
// pod lost while serving.
var ecosystemScenarios = []string{
	"scale-up-model", "scale-up-hpa", "scale-up-plain", "scale-down-model", "scale-down-hpa", "foreign-rollout",
	"paused", "deadline-own-rollout", "deadline-foreign-rollout", "replica-failure-scale-up", "pod-lost",
}

func loadEcosystem(t *testing.T) []ecosystemCase {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "testdata", "ecosystem", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var out []ecosystemCase
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var c ecosystemCase
		if err := yaml.Unmarshal(data, &c); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		c.file = filepath.Base(f)
		c.deployment, c.model = &unstructured.Unstructured{}, &unstructured.Unstructured{}
		if err := c.deployment.UnmarshalJSON(c.Deployment); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if err := c.model.UnmarshalJSON(c.Model); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out = append(out, c)
	}
	return out
}

// kstatusRank orders kstatus results from best to worst.
var kstatusRank = map[kstatus.Status]int{
	kstatus.CurrentStatus: 0, kstatus.InProgressStatus: 1, kstatus.TerminatingStatus: 1,
	kstatus.FailedStatus: 2, kstatus.UnknownStatus: 3, kstatus.NotFoundStatus: 3,
}

// TestNeverWorseThanTheDeployment is the property the ecosystem judges: for
// every captured Deployment state, the status the operator writes for it
// (rollout.Decide, the operator's whole decision, on the model as its
// cache held it then, at the moment of the capture) is never worse in any
// face of the model's health than what Argo CD's own Go check
// (gitops-engine's health for apps/Deployment) and kstatus say of that
// Deployment, unless the model's own rollout failed. The verdicts on the
// Deployment come from the libraries the users run, never from a
// re-implementation.
//
// The exception is bound too: it applies only in the scenario where the
// model's own rollout passed its deadline, and there the model is never
// better than the Deployment's failure allows — never Healthy in Argo CD,
// never Current in kstatus — while the failure stands.
//
// The status is decided rather than read from the capture: a status the
// operator wrote always trails the Deployment state it answers by the
// length of a pass, so a captured model next to a newer Deployment says
// what the operator wrote for an older one.
func TestNeverWorseThanTheDeployment(t *testing.T) {
	cases := loadEcosystem(t)
	if len(cases) < 2*len(ecosystemScenarios) {
		t.Fatalf("the corpus holds %d pairs; recapture it with `make health-fixtures`", len(cases))
	}
	evaluator, err := flux.NewStatusEvaluator()
	if err != nil {
		t.Fatal(err)
	}
	// Each scenario must have a pair that was checked while its Deployment
	// was not Healthy/Current to Argo CD or kstatus, or the property would
	// hold by default.
	checked := map[string]int{}
	// Pairs whose pass writes the Deployment, bound against what the
	// Deployment reads after the write.
	acting := map[string]int{}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			dep, err := health.GetResourceHealth(c.deployment, nil)
			if err != nil || dep == nil {
				t.Fatalf("gitops-engine on the Deployment: %v %v", dep, err)
			}
			depKs, err := kstatus.Compute(c.deployment)
			if err != nil {
				t.Fatal(err)
			}
			model, status, acts := decideFor(t, c)
			if c.OwnRolloutFailed && status.FailedSpecHash == "" {
				t.Errorf("the captured status holds a failed spec and the pass forgot it: %s", summary(status))
			}
			argo, ks := faces(t, evaluator, model)
			if acts {
				// The pass writes the Deployment: its status describes
				// the act, and the Deployment after it is a generation
				// its controller has not observed (Progressing to Argo
				// CD, InProgress to kstatus), not the one captured. The
				// bound is that one: unless the model's own rollout
				// failed (the act is its rollback), no face is worse than
				// Progressing / InProgress.
				acting[c.Scenario]++
				if status.FailedSpecHash != "" {
					return
				}
				for face, got := range argo {
					if health.IsWorse(health.HealthStatusProgressing, got) {
						t.Errorf("%s says %s for a pass that writes the Deployment (Progressing after it); the model's status: %s", face, got, summary(status))
					}
				}
				for face, got := range ks {
					if kstatusRank[got] > kstatusRank[kstatus.InProgressStatus] {
						t.Errorf("%s says %s for a pass that writes the Deployment (InProgress after it); the model's status: %s", face, got, summary(status))
					}
				}
				return
			}
			unsettled := dep.Status != health.HealthStatusHealthy || depKs.Status != kstatus.CurrentStatus
			if status.FailedSpecHash != "" {
				if c.Scenario != "deadline-own-rollout" {
					t.Fatalf("the model's own rollout failed in scenario %s, where nothing of the model's fails: %s", c.Scenario, summary(status))
				}
				for face, got := range argo {
					if got == health.HealthStatusHealthy {
						t.Errorf("%s says Healthy while the model's own rollout failed: %s", face, summary(status))
					}
				}
				for face, got := range ks {
					if got == kstatus.CurrentStatus {
						t.Errorf("%s says Current while the model's own rollout failed: %s", face, summary(status))
					}
				}
				if unsettled {
					checked[c.Scenario]++
				}
				return
			}
			for face, got := range argo {
				if health.IsWorse(dep.Status, got) {
					t.Errorf("%s says %s, gitops-engine says the Deployment is %s (%s); the model's status: %s", face, got, dep.Status, dep.Message, summary(status))
				}
			}
			for face, got := range ks {
				if kstatusRank[got] > kstatusRank[depKs.Status] {
					t.Errorf("%s says %s, kstatus says the Deployment is %s (%s); the model's status: %s", face, got, depKs.Status, depKs.Message, summary(status))
				}
			}
			if unsettled {
				checked[c.Scenario]++
			}
		})
	}
	var missing []string
	for _, s := range ecosystemScenarios {
		if checked[s] == 0 {
			missing = append(missing, s)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("scenarios without a checked pair whose Deployment is not Healthy/Current: %v; recapture with `make health-fixtures`", missing)
	}
	t.Logf("checked pairs with a Deployment not Healthy/Current, by scenario: %v; pairs whose pass writes the Deployment: %v", checked, acting)
}

// faces judges the model with every face: Argo CD's (health.Assess, the
// gitops-engine face, the Lua script) and Flux's (kstatus, the CEL
// expressions).
func faces(t *testing.T, evaluator *cel.StatusEvaluator, model *unstructured.Unstructured) (map[string]health.HealthStatusCode, map[string]kstatus.Status) {
	t.Helper()
	argo := map[string]health.HealthStatusCode{"Go (health.Assess)": health.HealthStatusCode(omhealth.Assess(model).Code)}
	hs, err := HealthCheck(model)
	if err != nil {
		t.Fatal(err)
	}
	argo["Go (gitops-engine face)"] = hs.Status
	if hs, err = LuaHealth(model); err != nil {
		t.Fatal(err)
	}
	argo["Lua (argocd-cm)"] = hs.Status
	ks := map[string]kstatus.Status{}
	r, err := kstatus.Compute(model)
	if err != nil {
		t.Fatal(err)
	}
	ks["kstatus"] = r.Status
	if r, err = evaluator.Evaluate(context.Background(), model); err != nil {
		t.Fatal(err)
	}
	ks["CEL (healthCheckExprs)"] = r.Status
	return argo, ks
}

// capturedAt is the moment a pair was captured, as near as the objects
// tell: the newest timestamp either carries (a condition's transition or
// update, a history entry, a correction, creation). Deciding at that
// moment, not at the test's, keeps every time-bound rule (the correction
// window, a bake, a retry's deadline) where it was.
func capturedAt(c ecosystemCase) time.Time {
	var newest time.Time
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for _, e := range x {
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		case string:
			if ts, err := time.Parse(time.RFC3339, x); err == nil && ts.After(newest) {
				newest = ts
			}
		}
	}
	walk(c.deployment.Object)
	walk(c.model.Object)
	return newest
}

// decideFor is the model with the status the operator's pass writes for
// the pair's Deployment, that status, and whether the pass also writes the
// Deployment.
func decideFor(t *testing.T, c ecosystemCase) (*unstructured.Unstructured, v1alpha1.OpenMedModelStatus, bool) {
	t.Helper()
	m := &v1alpha1.OpenMedModel{}
	d := &appsv1.Deployment{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(c.model.Object, m); err != nil {
		t.Fatal(err)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(c.deployment.Object, d); err != nil {
		t.Fatal(err)
	}
	plan := rollout.Decide(m, rollout.Observed{Deployment: d, Now: metav1.NewTime(capturedAt(c))}, rollout.Options{})
	st, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&plan.Status)
	if err != nil {
		t.Fatal(err)
	}
	out := c.model.DeepCopy()
	out.Object["status"] = st
	// A write of the operator's bookkeeping labels alone (a Deployment
	// captured before the operator labelled what it claims) leaves the
	// Deployment's generation and status as captured: not an act.
	return out, plan.Status, (plan.ApplyDeployment != nil && !plan.LabelsOnly) || plan.Takeover != nil || plan.ReleaseReplicas
}

func summary(st v1alpha1.OpenMedModelStatus) string {
	var conds []string
	for _, c := range st.Conditions {
		conds = append(conds, c.Type+"="+string(c.Status)+"/"+c.Reason)
	}
	sort.Strings(conds)
	return string(st.Phase) + " " + strings.Join(conds, " ")
}
