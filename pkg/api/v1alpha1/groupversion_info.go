// Package v1alpha1 contains the OpenMedModel API, group openmed.ai, version v1alpha1.
//
// An OpenMedModel declares which model version (family, tier, version pointer) an
// existing model-serving Deployment preloads, how many replicas it runs and how a
// change is rolled out and rolled back.
//
// +kubebuilder:object:generate=true
// +groupName=openmed.ai
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "openmed.ai", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this API with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this API to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
