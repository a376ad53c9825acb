package validation_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/testenv"
)

// TestCRDServedAsGenerated reads the installed CRD back from the API server:
// the generated YAML installs (unlike the Kopf operator's) and keeps its names,
// printer columns and category.
func TestCRDServedAsGenerated(t *testing.T) {
	if err := apiextensionsv1.AddToScheme(env.Scheme); err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: "openmedmodels.openmed.ai"}, crd); err != nil {
		t.Fatal(err)
	}
	if got := crd.Spec.Names; got.ShortNames[0] != "omm" || len(got.ShortNames) != 1 || !slices.Equal(got.Categories, []string{"all"}) ||
		got.Plural != "openmedmodels" || got.Singular != "openmedmodel" || got.Kind != "OpenMedModel" || got.ListKind != "OpenMedModelList" {
		t.Errorf("names = %+v", got)
	}
	if crd.Spec.Scope != apiextensionsv1.NamespaceScoped || len(crd.Spec.Versions) != 1 {
		t.Fatalf("scope %s, %d versions", crd.Spec.Scope, len(crd.Spec.Versions))
	}
	v := crd.Spec.Versions[0]
	if v.Name != "v1alpha1" || !v.Served || !v.Storage || v.Subresources == nil || v.Subresources.Status == nil || v.Subresources.Scale != nil {
		t.Errorf("version = %s served=%v storage=%v subresources=%+v", v.Name, v.Served, v.Storage, v.Subresources)
	}
	want := []apiextensionsv1.CustomResourceColumnDefinition{
		{Name: "Family", Type: "string", JSONPath: ".spec.family"},
		{Name: "Tier", Type: "string", JSONPath: ".spec.tier"},
		{Name: "Desired", Type: "string", JSONPath: ".spec.version"},
		{Name: "Active", Type: "string", JSONPath: ".status.activeVersion"},
		{Name: "Phase", Type: "string", JSONPath: ".status.phase"},
		{Name: "Ready", Type: "string", JSONPath: `.status.conditions[?(@.type=="Ready")].status`},
		{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp"},
	}
	if len(v.AdditionalPrinterColumns) != len(want) {
		t.Fatalf("printer columns = %+v", v.AdditionalPrinterColumns)
	}
	for i, c := range v.AdditionalPrinterColumns {
		if c.Name != want[i].Name || c.Type != want[i].Type || c.JSONPath != want[i].JSONPath {
			t.Errorf("column %d = %+v, want %+v", i, c, want[i])
		}
	}
	for _, cond := range crd.Status.Conditions {
		if cond.Type == apiextensionsv1.Established && cond.Status != apiextensionsv1.ConditionTrue {
			t.Errorf("CRD not established: %s", cond.Message)
		}
	}
}

// TestExampleDefaults creates examples/openmedmodel.yaml for real and reads it
// back: the server fills in every default and the status default that keeps
// kstatus from calling a fresh object Current.
func TestExampleDefaults(t *testing.T) {
	ctx := context.Background()
	data, err := os.ReadFile(filepath.Join(testenv.ModuleRoot(), "examples", "openmedmodel.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	obj := &v1alpha1.OpenMedModel{}
	if err := yaml.UnmarshalStrict(data, obj); err != nil {
		t.Fatal(err)
	}
	// The example also omits the defaulted fields a user may leave out.
	obj.Spec.RolloutStrategy.MaxUnavailable = nil
	obj.Spec.RolloutStrategy.MaxSurge = nil
	obj.Spec.RolloutStrategy.RollbackOnFailure = nil
	obj.Spec.RolloutStrategy.ProgressDeadlineSeconds = nil
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: obj.Namespace}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, obj, client.FieldValidation("Strict")); err != nil {
		t.Fatal(err)
	}
	got := &v1alpha1.OpenMedModel{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), got); err != nil {
		t.Fatal(err)
	}
	rs := got.Spec.RolloutStrategy
	switch {
	case rs.MaxUnavailable == nil || *rs.MaxUnavailable != intstr.FromInt32(0):
		t.Errorf("maxUnavailable = %v, want 0", rs.MaxUnavailable)
	case rs.MaxSurge == nil || *rs.MaxSurge != intstr.FromInt32(1):
		t.Errorf("maxSurge = %v, want 1", rs.MaxSurge)
	case rs.RollbackOnFailure == nil || !*rs.RollbackOnFailure:
		t.Errorf("rollbackOnFailure = %v, want true", rs.RollbackOnFailure)
	case rs.ProgressDeadlineSeconds == nil || *rs.ProgressDeadlineSeconds != 600:
		t.Errorf("progressDeadlineSeconds = %v, want 600", rs.ProgressDeadlineSeconds)
	case got.Spec.RevisionHistoryLimit == nil || *got.Spec.RevisionHistoryLimit != 10:
		t.Errorf("revisionHistoryLimit = %v, want 10", got.Spec.RevisionHistoryLimit)
	case got.Status.ObservedGeneration != -1:
		t.Errorf("status.observedGeneration = %d, want -1", got.Status.ObservedGeneration)
	case got.Spec.Replicas == nil || *got.Spec.Replicas != 2 || got.Spec.Family != "PII" || got.Spec.Tier != v1alpha1.TierSmall:
		t.Errorf("spec changed on the way: %+v", got.Spec)
	}
	// The Go defaulter agrees with the server on the same object.
	local := obj.DeepCopy()
	local.Default()
	if local.Spec.RolloutStrategy.MaxSurge.String() != rs.MaxSurge.String() || *local.Spec.RevisionHistoryLimit != *got.Spec.RevisionHistoryLimit {
		t.Errorf("Go defaults %+v differ from the server's %+v", local.Spec, got.Spec)
	}
}
