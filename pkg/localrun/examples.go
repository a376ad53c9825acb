package localrun

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/rollout"
)

// The example files, relative to ExamplesDir().
const (
	// TargetExample is the Helm-shaped target: its chart ConfigMap and its
	// Deployment.
	TargetExample = "target-deployment.yaml"
	// ModelExample is the OpenMedModel that targets it.
	ModelExample = "openmedmodel.yaml"
)

var (
	deploymentKind     = schema.GroupKind{Group: "apps", Kind: "Deployment"}
	serviceAccountKind = schema.GroupKind{Kind: "ServiceAccount"}
)

// ExamplesDir is the module's examples directory.
func ExamplesDir() string {
	return filepath.Join(ModuleRoot(), "examples")
}

// ReadObjects reads every object of a multi-document YAML file.
func ReadObjects(path string) ([]*unstructured.Unstructured, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var objs []*unstructured.Unstructured
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(obj.Object) > 0 {
			objs = append(objs, obj)
		}
	}
}

// MarshalObjects writes objects as one multi-document YAML stream, each
// document after a "---" line: what ReadObjects reads back.
func MarshalObjects(objs []*unstructured.Unstructured) ([]byte, error) {
	var buf bytes.Buffer
	for _, o := range objs {
		body, err := yaml.Marshal(o.Object)
		if err != nil {
			return nil, err
		}
		buf.WriteString("---\n")
		buf.Write(body)
	}
	return buf.Bytes(), nil
}

// TenantRole reads examples/tenancy/tenant-role.yaml (the ServiceAccount, Role
// and RoleBinding a tenant's models write as) for namespace ns, as a user
// copies the file: the namespace replaced, in the objects and in the
// binding's subject, nothing else.
func TenantRole(ns string) ([]*unstructured.Unstructured, error) {
	objs, err := ReadObjects(filepath.Join(ExamplesDir(), "tenancy", "tenant-role.yaml"))
	if err != nil {
		return nil, err
	}
	for _, o := range objs {
		o.SetNamespace(ns)
		if o.GetKind() != "RoleBinding" {
			continue
		}
		subjects, _, err := unstructured.NestedSlice(o.Object, "subjects")
		if err != nil {
			return nil, fmt.Errorf("tenant-role.yaml: %w", err)
		}
		for _, s := range subjects {
			if m, ok := s.(map[string]any); ok {
				m["namespace"] = ns
			}
		}
		if err := unstructured.SetNestedSlice(o.Object, subjects, "subjects"); err != nil {
			return nil, fmt.Errorf("tenant-role.yaml: %w", err)
		}
	}
	return objs, nil
}

// ImpersonatorBinding reads examples/tenancy/impersonator-binding.yaml (the
// RoleBinding that lets the operator impersonate the ServiceAccounts of one
// namespace) for namespace ns, as a user copies the file: the binding's
// namespace replaced, nothing else (its subject is the operator's
// ServiceAccount, the same for every tenant).
func ImpersonatorBinding(ns string) ([]*unstructured.Unstructured, error) {
	objs, err := ReadObjects(filepath.Join(ExamplesDir(), "tenancy", "impersonator-binding.yaml"))
	if err != nil {
		return nil, err
	}
	for _, o := range objs {
		o.SetNamespace(ns)
	}
	return objs, nil
}

// ReadModel reads one OpenMedModel, rejecting unknown fields as the API
// server's strict field validation would.
func ReadModel(path string) (*v1alpha1.OpenMedModel, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m := &v1alpha1.OpenMedModel{}
	if err := yaml.UnmarshalStrict(data, m); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if m.GroupVersionKind() != v1alpha1.GroupVersion.WithKind("OpenMedModel") {
		return nil, fmt.Errorf("%s: not an OpenMedModel but %s", path, m.GroupVersionKind())
	}
	return m, nil
}

// ManifestHashOf is the manifest hash the operator writes to the pod template
// of m's target when m asks for version: the value that selects that
// version's pods, for example to make them never ready on a minicluster.
func ManifestHashOf(m *v1alpha1.OpenMedModel, version string) (string, error) {
	m = m.DeepCopy()
	m.Spec.Version = version
	spec, err := rollout.Normalize(m)
	if err != nil {
		return "", err
	}
	return rollout.ManifestHash(spec), nil
}

// GoldenRequest is the spec.verification `make run` and the end-to-end
// tests declare, docs/verification.md's example: POST /pii/extract on the
// container port named http with a synthetic note, whose answer must find
// the patient John Smith.
func GoldenRequest() *v1alpha1.Verification {
	return &v1alpha1.Verification{
		Request: v1alpha1.VerificationRequest{
			Port: intstr.FromString("http"),
			Path: "/pii/extract",
			Body: `{"text":"Patient John Smith was seen on 2024-03-05.","model_name":"pii","confidence_threshold":0.5}`,
		},
		SuccessCondition: `response.code == 200 && response.json.entities.exists(e, e.label == "NAME" && e.text == "John Smith")`,
	}
}
