package controllers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// deleteAndWait deletes the model and waits until it is gone, which means
// the finalizer was removed.
func deleteAndWait(t *testing.T, ns, name string) {
	t.Helper()
	ctx := context.Background()
	if err := env.Client.Delete(ctx, getModel(t, ns, name)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "model "+name+" gone", func() (bool, string) {
		m := &v1alpha1.OpenMedModel{}
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, m)
		return isNotFound(err), "finalizers " + strings.Join(m.Finalizers, ",")
	})
}

// TestDeletionWithMissingTarget: deletion finishes whether the target never
// existed or disappeared after the model was Ready.
func TestDeletionWithMissingTarget(t *testing.T) {
	ns := newNamespace(t)
	startOperator(t)

	createModel(t, newModel(ns, "never", "OpenMed/pii-v1"))
	waitFor(t, ns, "never", v1alpha1.PhasePending, v1alpha1.TargetNotFoundReason)
	deleteAndWait(t, ns, "never")

	readyModel(t, ns, "gone")
	if err := env.Client.Delete(context.Background(), getDeployment(t, ns, "gone")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ns, "gone", v1alpha1.PhasePending, v1alpha1.TargetNotFoundReason)
	deleteAndWait(t, ns, "gone")
}

// TestDeletionWithInvalidStoredSpec: a spec stored under an older, looser
// CRD fails validation today; the resource still deletes (the Kopf operator's could not) and
// the Deployment it had claimed is released.
func TestDeletionWithInvalidStoredSpec(t *testing.T) {
	ns := newNamespace(t)
	startOperator(t)
	readyModel(t, ns, "svc")

	loosenTierEnum(t)
	patchModel(t, ns, "svc", func(m *v1alpha1.OpenMedModel) { m.Spec.Tier = "Gigantic" })
	restoreCRD(t)
	waitFor(t, ns, "svc", v1alpha1.PhaseFailed, v1alpha1.InvalidSpecReason)

	replicas := *getDeployment(t, ns, "svc").Spec.Replicas
	deleteAndWait(t, ns, "svc")
	assertReleased(t, ns, "svc", replicas)
}

// TestDeletionLeavesForeignTargetAlone: a Deployment claimed by another
// OpenMedModel is not touched when this one goes, and a warning says so.
func TestDeletionLeavesForeignTargetAlone(t *testing.T) {
	ns := newNamespace(t)
	startOperator(t)
	readyModel(t, ns, "owner")
	other := newModel(ns, "intruder", "OpenMed/other")
	other.Spec.TargetRef.Name = "owner"
	createModel(t, other)
	waitFor(t, ns, "intruder", v1alpha1.PhaseFailed, v1alpha1.TargetConflictReason)

	before := getDeployment(t, ns, "owner")
	deleteAndWait(t, ns, "intruder")
	time.Sleep(500 * time.Millisecond)
	after := getDeployment(t, ns, "owner")
	if after.ResourceVersion != before.ResourceVersion {
		t.Errorf("deleting the non-owner changed the Deployment (resourceVersion %s -> %s)", before.ResourceVersion, after.ResourceVersion)
	}
	if !contains(eventReasons(t, ns, "intruder"), v1alpha1.ModelRemovalSkippedReason) {
		t.Errorf("no ModelRemovalSkipped event: %v", eventReasons(t, ns, "intruder"))
	}
	// The owner is still Ready and serving its pointer.
	waitFor(t, ns, "owner", v1alpha1.PhaseReady)
}

// loosenTierEnum installs a CRD revision without the tier enum, as an older
// CRD version would have had, and waits until the server uses it.
func loosenTierEnum(t *testing.T) {
	t.Helper()
	updateCRD(t, func(crd *apiextensionsv1.CustomResourceDefinition) {
		spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
		tier := spec.Properties["tier"]
		tier.Enum = nil
		spec.Properties["tier"] = tier
		crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = spec
	})
	probe := newModel("default", "probe-loose-crd", "OpenMed/x")
	probe.Spec.Tier = "Gigantic"
	eventually(t, "looser CRD in use", func() (bool, string) {
		err := env.Client.Create(context.Background(), probe.DeepCopy(), client.DryRunAll)
		return err == nil, errString(err)
	})
}

var originalCRD *apiextensionsv1.CustomResourceDefinition

func updateCRD(t *testing.T, mutate func(*apiextensionsv1.CustomResourceDefinition)) {
	t.Helper()
	if err := apiextensionsv1.AddToScheme(env.Scheme); err != nil {
		t.Fatal(err)
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: "openmedmodels.openmed.ai"}, crd); err != nil {
			return err
		}
		if originalCRD == nil {
			originalCRD = crd.DeepCopy()
		}
		mutate(crd)
		return env.Client.Update(context.Background(), crd)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// restoreCRD puts the generated schema back and waits until the server
// enforces it again.
func restoreCRD(t *testing.T) {
	t.Helper()
	updateCRD(t, func(crd *apiextensionsv1.CustomResourceDefinition) {
		crd.Spec.Versions = originalCRD.Spec.Versions
	})
	probe := newModel("default", "probe-strict-crd", "OpenMed/x")
	probe.Spec.Tier = "Gigantic"
	eventually(t, "generated CRD in use", func() (bool, string) {
		err := env.Client.Create(context.Background(), probe.DeepCopy(), client.DryRunAll)
		return err != nil, "still accepted"
	})
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
