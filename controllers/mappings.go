package controllers

import (
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// RememberMappings returns mapper with the REST mappings it finds for one
// version remembered. The operator asks for the same few mappings on every
// write whose answer it takes as metadata (a controller-runtime client
// maps a PartialObjectMetadata's kind on each request), and
// controller-runtime's dynamic mapper answers each by asking every group
// version it knows, with a NoMatch error from each but one. A kind that
// is not found is not remembered: a CRD installed later is found then.
//
// The operator's manager uses it (cmd/openmed-operator); a manager that
// embeds the reconciler may too:
//
//	ctrl.Options{MapperProvider: func(c *rest.Config, h *http.Client) (meta.RESTMapper, error) {
//		m, err := apiutil.NewDynamicRESTMapper(c, h)
//		return controllers.RememberMappings(m), err
//	}}
func RememberMappings(mapper meta.RESTMapper) meta.RESTMapper {
	if r, ok := mapper.(*rememberedMappings); ok {
		return r
	}
	return &rememberedMappings{RESTMapper: mapper}
}

type rememberedMappings struct {
	meta.RESTMapper
	known sync.Map // mappingKey → meta.RESTMapping
}

type mappingKey struct {
	gk      schema.GroupKind
	version string
}

// RESTMapping answers from what it remembers for one version; for any
// other question it asks the mapper.
func (m *rememberedMappings) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	if len(versions) != 1 {
		return m.RESTMapper.RESTMapping(gk, versions...)
	}
	key := mappingKey{gk, versions[0]}
	if known, ok := m.known.Load(key); ok {
		mapping := known.(meta.RESTMapping)
		return &mapping, nil
	}
	mapping, err := m.RESTMapper.RESTMapping(gk, versions...)
	if err != nil {
		return nil, err
	}
	m.known.Store(key, *mapping)
	return mapping, nil
}
