package controllers

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// countingMapper counts the questions RESTMapping is asked.
type countingMapper struct {
	*meta.DefaultRESTMapper
	asked int
}

func (c *countingMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	c.asked++
	return c.DefaultRESTMapper.RESTMapping(gk, versions...)
}

// TestRememberMappings: a mapping found for one version is asked for once
// and answered the same after; a kind not found is asked for again (a CRD
// installed later is found); the answers are copies.
func TestRememberMappings(t *testing.T) {
	deployments := schema.GroupVersion{Group: "apps", Version: "v1"}
	models := schema.GroupVersion{Group: "openmed.ai", Version: "v1alpha1"}
	inner := &countingMapper{DefaultRESTMapper: meta.NewDefaultRESTMapper([]schema.GroupVersion{deployments, models})}
	inner.Add(deployments.WithKind("Deployment"), meta.RESTScopeNamespace)
	m := RememberMappings(inner)
	if RememberMappings(m) != m {
		t.Error("a remembering mapper is wrapped again")
	}
	gk := schema.GroupKind{Group: "apps", Kind: "Deployment"}
	for range 3 {
		got, err := m.RESTMapping(gk, "v1")
		if err != nil {
			t.Fatal(err)
		}
		if got.Resource != deployments.WithResource("deployments") || got.Scope.Name() != meta.RESTScopeNameNamespace {
			t.Errorf("mapping %+v", got)
		}
		got.Resource.Resource = "changed by a caller"
	}
	if inner.asked != 1 {
		t.Errorf("the mapper was asked %d times for one mapping, want 1", inner.asked)
	}
	model := schema.GroupKind{Group: "openmed.ai", Kind: "OpenMedModel"}
	if _, err := m.RESTMapping(model, "v1alpha1"); !meta.IsNoMatchError(err) {
		t.Fatalf("a kind not installed: %v, want a NoMatch error", err)
	}
	inner.Add(models.WithKind("OpenMedModel"), meta.RESTScopeNamespace)
	if got, err := m.RESTMapping(model, "v1alpha1"); err != nil || got.Resource.Resource != "openmedmodels" {
		t.Errorf("the kind once installed: %+v, %v", got, err)
	}
}
