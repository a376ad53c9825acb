package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/fluxcd/pkg/apis/kustomize"
	"github.com/fluxcd/pkg/runtime/cel"
	"sigs.k8s.io/yaml"

	"github.com/openmed/openmed-operator/health/argocd"
	"github.com/openmed/openmed-operator/health/flux"
)

const repoRoot = "../../.."

// TestGeneratedFilesUpToDate fails when a committed file differs from what
// the generator writes from the sources.
func TestGeneratedFilesUpToDate(t *testing.T) {
	files, err := render(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(repoRoot, name))
		if err != nil {
			t.Errorf("%v; run go run ./health/internal/gen", err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale; run go run ./health/internal/gen", name)
		}
	}
}

// TestArgoCDConfig reads the argocd-cm keys back as Argo CD does and checks
// they carry the scripts unchanged.
func TestArgoCDConfig(t *testing.T) {
	data, err := argoCDConfig()
	if err != nil {
		t.Fatal(err)
	}
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal(data, &cm); err != nil {
		t.Fatal(err)
	}
	if got := cm.Data["resource.customizations.health.openmed.ai_OpenMedModel"]; got != argocd.HealthScript() {
		t.Errorf("health key does not hold health.lua:\n%s", got)
	}
	// The actions value is itself YAML, with the json names of Argo CD's
	// ResourceActions.
	var actions struct {
		Discovery   string `json:"discovery.lua"`
		Definitions []struct {
			Name   string `json:"name"`
			Action string `json:"action.lua"`
		} `json:"definitions"`
	}
	if err := yaml.UnmarshalStrict([]byte(cm.Data["resource.customizations.actions.openmed.ai_OpenMedModel"]), &actions); err != nil {
		t.Fatal(err)
	}
	if actions.Discovery != argocd.DiscoveryScript() {
		t.Error("discovery.lua differs")
	}
	if len(actions.Definitions) != len(argocd.Actions) {
		t.Fatalf("%d definitions, want %d", len(actions.Definitions), len(argocd.Actions))
	}
	for i, d := range actions.Definitions {
		want, err := argocd.ActionScript(argocd.Actions[i])
		if err != nil {
			t.Fatal(err)
		}
		if d.Name != argocd.Actions[i] || d.Action != want {
			t.Errorf("definition %d: %q differs from actions/%s/action.lua", i, d.Name, argocd.Actions[i])
		}
	}
}

func TestArgoCDApplication(t *testing.T) {
	var app struct {
		Spec struct {
			IgnoreDifferences []struct {
				Group, Kind           string
				ManagedFieldsManagers []string `json:"managedFieldsManagers"`
			} `json:"ignoreDifferences"`
			SyncPolicy struct {
				SyncOptions []string `json:"syncOptions"`
			} `json:"syncPolicy"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal([]byte(argoCDApplication), &app); err != nil {
		t.Fatal(err)
	}
	d := app.Spec.IgnoreDifferences
	if len(d) != 1 || d[0].Group != "apps" || d[0].Kind != "Deployment" ||
		len(d[0].ManagedFieldsManagers) != 1 || d[0].ManagedFieldsManagers[0] != "openmed-operator" {
		t.Errorf("ignoreDifferences = %+v", d)
	}
	if o := app.Spec.SyncPolicy.SyncOptions; len(o) != 1 || o[0] != "RespectIgnoreDifferences=true" {
		t.Errorf("syncOptions = %v", o)
	}
}

// TestFluxKustomization reads healthCheckExprs back and builds Flux's status
// reader from them, as kustomize-controller does before it waits.
func TestFluxKustomization(t *testing.T) {
	var ks struct {
		Spec struct {
			Wait             bool                          `json:"wait"`
			HealthCheckExprs []kustomize.CustomHealthCheck `json:"healthCheckExprs"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(fluxKustomizationYAML(), &ks); err != nil {
		t.Fatal(err)
	}
	if !ks.Spec.Wait {
		t.Error("wait is not set")
	}
	if len(ks.Spec.HealthCheckExprs) != 1 || ks.Spec.HealthCheckExprs[0] != flux.CustomHealthCheck() {
		t.Fatalf("healthCheckExprs = %+v", ks.Spec.HealthCheckExprs)
	}
	if _, err := cel.NewStatusReader(ks.Spec.HealthCheckExprs); err != nil {
		t.Errorf("kustomize-controller would reject healthCheckExprs: %v", err)
	}
}
