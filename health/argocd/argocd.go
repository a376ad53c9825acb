// Package argocd is the Argo CD face of the OpenMedModel health model: the Go
// check over gitops-engine's types, for tools that call
// health.GetResourceHealth, and the Lua scripts Argo CD runs itself (health
// check and resource actions), embedded in Argo CD's resource-customization
// layout so the folder can be proposed upstream unchanged.
//
// Only this package imports gitops-engine; the operator and the pure model in
// the parent package do not.
package argocd

import (
	"embed"
	"fmt"
	"io/fs"
	"path"

	"github.com/argoproj/argo-cd/gitops-engine/v3/pkg/health"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	omhealth "github.com/openmed/openmed-operator/health"
	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// ResourceCustomizations holds Argo CD's resource_customizations tree for the
// kind: openmed.ai/OpenMedModel/{health.lua, health_test.yaml, testdata/,
// actions/}.
//
//go:embed resource_customizations
var ResourceCustomizations embed.FS

// Paths inside ResourceCustomizations.
const (
	// CustomizationDir is the kind's folder, keyed <group>/<Kind> as Argo CD
	// keys its built-in scripts.
	CustomizationDir = "resource_customizations/openmed.ai/OpenMedModel"
	// HealthScriptPath is the health check.
	HealthScriptPath = CustomizationDir + "/health.lua"
	// ActionsDir holds discovery.lua and one <action>/action.lua per action.
	ActionsDir = CustomizationDir + "/actions"
	// DiscoveryScriptPath is the action discovery script.
	DiscoveryScriptPath = ActionsDir + "/discovery.lua"
)

// ConfigMapKeySuffix is the <group>_<Kind> suffix of argocd-cm's split keys,
// e.g. resource.customizations.health.openmed.ai_OpenMedModel.
const ConfigMapKeySuffix = "openmed.ai_OpenMedModel"

// Actions are the resource actions, in the order discovery.lua lists them.
var Actions = []string{"rollback", "retry", "suspend", "resume"}

// GroupKind is the kind these checks apply to.
var GroupKind = schema.GroupKind{Group: v1alpha1.GroupVersion.Group, Kind: "OpenMedModel"}

// HealthScript returns health.lua.
func HealthScript() string {
	return mustRead(HealthScriptPath)
}

// DiscoveryScript returns actions/discovery.lua.
func DiscoveryScript() string {
	return mustRead(DiscoveryScriptPath)
}

// ActionScript returns actions/<name>/action.lua.
func ActionScript(name string) (string, error) {
	data, err := fs.ReadFile(ResourceCustomizations, path.Join(ActionsDir, name, "action.lua"))
	if err != nil {
		return "", fmt.Errorf("action %q: %w", name, err)
	}
	return string(data), nil
}

// mustRead reads an embedded file whose presence the build guarantees.
func mustRead(name string) string {
	data, err := fs.ReadFile(ResourceCustomizations, name)
	if err != nil {
		panic(fmt.Sprintf("embedded %s: %v", name, err))
	}
	return string(data)
}

// HealthCheck returns the health of an OpenMedModel with the signature of
// gitops-engine's built-in checks. It returns the same status and message as
// health.lua (the tests run both over one corpus) and never fails.
func HealthCheck(obj *unstructured.Unstructured) (*health.HealthStatus, error) {
	r := omhealth.Assess(obj)
	return &health.HealthStatus{Status: health.HealthStatusCode(r.Code), Message: r.Message, DeletionMessage: r.DeletionMessage}, nil
}

// HealthOverride plugs HealthCheck into gitops-engine's
// health.GetResourceHealth for OpenMedModels; for any other kind it returns
// no health, so gitops-engine falls back to its built-in checks. Stock Argo
// CD does not run Go overrides: it runs health.lua.
type HealthOverride struct{}

var _ health.HealthOverride = HealthOverride{}

// GetResourceHealth implements health.HealthOverride.
func (HealthOverride) GetResourceHealth(obj *unstructured.Unstructured) (*health.HealthStatus, error) {
	if obj.GroupVersionKind().GroupKind() != GroupKind {
		return nil, nil
	}
	return HealthCheck(obj)
}
