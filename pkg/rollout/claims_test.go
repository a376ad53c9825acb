package rollout

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// TestRetargetWithALostStatusWriteForgetsNoDeployment: a retarget whose
// pass loses its status write (the second edit of the spec wins the race
// for the model, or the operator crashes) must not forget the Deployment
// it wrote. status.claimedTargets is written ahead of the first write to a
// Deployment, so the next pass releases it on the next retarget, and
// deletion leaves no Deployment with anything of the operator's. Without
// the write-ahead record, B keeps the pointer, the owner annotation and
// the operator's managedFields entry (issue 26, item 10).
func TestRetargetWithALostStatusWriteForgetsNoDeployment(t *testing.T) {
	for _, tc := range []struct {
		name string
		// then is where the spec moves after B: C, or back to A.
		then string
	}{
		{"A to B to C", "openmed-service-c"},
		{"A to B to A", "openmed-service"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			c.readyAt(v1)
			c.recreateTarget("openmed-service-b")
			c.recreateTarget("openmed-service-c")
			c.editModel(func(m *v1alpha1.OpenMedModel) { m.Spec.TargetRef.Name = "openmed-service-b" })
			p := c.passLosingStatus()
			if p.ApplyDeployment.GetName() != "openmed-service-b" || !slices.Equal(p.ClaimTargets, []string{"openmed-service-b"}) {
				t.Fatalf("retarget to B: apply %s, claims %v", p.ApplyDeployment.GetName(), p.ClaimTargets)
			}
			c.refresh()
			if !slices.Contains(c.obj.Status.ClaimedTargets, "openmed-service-b") {
				t.Fatalf("B is not recorded although the status write was lost: %v", c.obj.Status.ClaimedTargets)
			}
			if !c.ownedBy(c.deployment("openmed-service-b")) {
				t.Fatal("the pass did not write B")
			}
			c.editModel(func(m *v1alpha1.OpenMedModel) { m.Spec.TargetRef.Name = tc.then })
			p = c.pass()
			var released []string
			for _, r := range p.ReleasePrevious {
				released = append(released, r.DeploymentName)
			}
			if !slices.Contains(released, "openmed-service-b") {
				t.Fatalf("the pass after the lost write does not release B: %v", released)
			}
			c.pass()
			if c.ownedBy(c.deployment("openmed-service-b")) {
				t.Fatal("B still carries the operator's pointer or entry after its release")
			}
			names := []string{"openmed-service", "openmed-service-b", "openmed-service-c"}
			before := map[string]int32{}
			for _, name := range names {
				before[name] = *c.deployment(name).Spec.Replicas
			}
			c.deleteModel()
			if p := c.pass(); !p.RemoveFinalizer {
				t.Fatalf("the deletion pass keeps the finalizer: %+v", p)
			}
			for _, name := range names {
				dep := c.deployment(name)
				if c.ownedBy(dep) {
					t.Errorf("Deployment %s keeps something of the operator's after deletion: annotations %v, template %v, entries %v",
						name, dep.Annotations, dep.Spec.Template.Annotations, managers(dep))
				}
				if dep.Spec.Replicas == nil || *dep.Spec.Replicas != before[name] {
					t.Errorf("Deployment %s: replicas %v after the release, %d before", name, dep.Spec.Replicas, before[name])
				}
			}
		})
	}
}

// ownedBy reports whether dep carries anything of the operator's: its
// managedFields entry, the owner annotation, the template annotations, the
// bake label or the preload env.
func (c *cluster) ownedBy(dep *appsv1.Deployment) bool {
	if carriesEntry(dep, DefaultFieldManager) || dep.Annotations[v1alpha1.ModelResourceAnnotation] != "" {
		return true
	}
	for _, k := range []string{v1alpha1.ModelResourceAnnotation, v1alpha1.ManifestHashAnnotation} {
		if dep.Spec.Template.Annotations[k] != "" {
			return true
		}
	}
	if dep.Spec.Template.Labels[v1alpha1.BakeLabel] != "" {
		return true
	}
	for _, ctr := range dep.Spec.Template.Spec.Containers {
		if pointedConfigMap(dep, ctr.Name) != "" {
			return true
		}
	}
	return false
}

func managers(dep *appsv1.Deployment) []string {
	var out []string
	for _, e := range dep.ManagedFields {
		out = append(out, e.Manager+"/"+string(e.Operation))
	}
	return out
}
