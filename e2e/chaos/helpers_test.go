package chaos_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/localrun"
)

// leads reports whether op holds the Lease (client-go's
// leader_election_master_status on its /metrics).
func leads(op *localrun.Operator) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	body, err := op.Read(ctx, "/metrics")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "leader_election_master_status{") && strings.HasSuffix(line, " 1") {
			return true
		}
	}
	return false
}

// leafFields lists the leaves of a managedFields fieldsV1 set as paths.
func leafFields(t *testing.T, raw []byte) []string {
	t.Helper()
	set := &fieldpath.Set{}
	if err := set.FromJSON(bytes.NewReader(raw)); err != nil {
		t.Fatal(err)
	}
	var out []string
	set.Leaves().Iterate(func(p fieldpath.Path) { out = append(out, p.String()) })
	return out
}

// allowed reports whether a leaf is one of the fields the operator owns, which pkg/rollout gives
// the operator.
func allowed(path string) bool {
	env := `.spec.template.spec.containers[name="openmed-service"].env[name="` + v1alpha1.PreloadEnvVar + `"]`
	switch {
	case path == ".metadata.annotations."+v1alpha1.ModelResourceAnnotation,
		path == ".spec.replicas", path == ".spec.progressDeadlineSeconds",
		strings.HasPrefix(path, ".spec.strategy."),
		path == ".spec.template.metadata.annotations."+v1alpha1.ManifestHashAnnotation,
		path == ".spec.template.metadata.annotations."+v1alpha1.ModelResourceAnnotation,
		path == ".spec.template.metadata.labels."+v1alpha1.BakeLabel,
		path == `.spec.template.spec.containers[name="openmed-service"].name`,
		path == env+".name", path == env+".value", strings.HasPrefix(path, env+".valueFrom."):
		return true
	}
	return false
}

// TestAllowedFields pins what allowed accepts.
func TestAllowedFields(t *testing.T) {
	env := `.spec.template.spec.containers[name="openmed-service"].env[name="OPENMED_SERVICE_PRELOAD_MODELS"]`
	for path, want := range map[string]bool{
		".spec.replicas": true, ".spec.strategy.rollingUpdate.maxSurge": true, env + ".valueFrom.configMapKeyRef": true,
		".spec.template.spec.containers[name=\"openmed-service\"].image": false, ".metadata.labels.app": false,
		`.spec.template.spec.containers[name="openmed-service"].env[name="OTHER"].value`: false,
	} {
		if got := allowed(path); got != want {
			t.Errorf("allowed(%s) = %v, want %v", path, got, want)
		}
	}
}
