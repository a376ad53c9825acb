package e2e_test

import (
	"context"
	"strings"
	"testing"

	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// TestDriftByAnotherFieldManager: kubectl changes replicas, which the
// operator owns, and a label, which it does not. The operator restores
// replicas, names the field and the manager in a DriftCorrected event, keeps
// the label, and does not roll the pods.
func TestDriftByAnotherFieldManager(t *testing.T) {
	requireCluster(t)
	t.Parallel()
	ns := newNamespace(t)
	readyModel(t, ns, v1, "", nil)
	hash := read(t, ns).d.Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation]

	// An Update as kubectl edit sends it, read again on a conflict with the
	// Deployment controller's status writes (kubectl edit reopens the editor).
	const manager = "kubectl-edit"
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d := read(t, ns).d
		d.Spec.Replicas = ptr.To[int32](5)
		d.Labels["team"] = "ml-platform"
		return k8s.Update(context.Background(), d, client.FieldOwner(manager))
	})
	if err != nil {
		t.Fatal(err)
	}

	eventually(t, "a DriftCorrected event naming spec.replicas and "+manager, func() (bool, string) {
		msgs := eventMessages(t, ns, v1alpha1.DriftCorrectedReason)
		for _, m := range msgs {
			if strings.Contains(m, "spec.replicas") && strings.Contains(m, manager) {
				return true, ""
			}
		}
		return false, strings.Join(msgs, " | ")
	})
	s := waitServing(t, ns, v1)
	if got := ptr.Deref(s.d.Spec.Replicas, 0); got != 2 {
		t.Errorf("replicas = %d, want 2 restored", got)
	}
	if s.d.Labels["team"] != "ml-platform" {
		t.Errorf("the label %s set has gone: %v", manager, s.d.Labels)
	}
	if got := s.d.Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation]; got != hash {
		t.Errorf("the correction rolled the pods: hash %s, want %s", got, hash)
	}
}
