package kustomize_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/openmed/openmed-operator/kustomize"
)

// TestDockerfileMatchesManifest checks the image the Deployment runs
// against the Dockerfile, which cannot be built here: a multi-stage build of
// a static binary onto distroless, run as the same non-root user the pod's
// securityContext names, with the entrypoint the build produces.
func TestDockerfileMatchesManifest(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(kustomize.Dir(), "..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	df := string(data)
	froms := regexp.MustCompile(`(?m)^FROM\s+(\S+.*)$`).FindAllStringSubmatch(df, -1)
	if len(froms) < 2 {
		t.Fatalf("%d FROM lines, want a multi-stage build", len(froms))
	}
	if final := froms[len(froms)-1][1]; !strings.HasPrefix(final, "gcr.io/distroless/static") || !strings.HasSuffix(final, ":nonroot") {
		t.Errorf("final stage is %q, want distroless static nonroot", final)
	}
	for _, want := range []string{
		"CGO_ENABLED=0",
		"-o /out/openmed-operator ./cmd/openmed-operator",
		"COPY --from=builder /out/openmed-operator /openmed-operator",
		`ENTRYPOINT ["/openmed-operator"]`,
	} {
		if !strings.Contains(df, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}

	var dep appsv1.Deployment
	typed(t, build(t, kustomize.DefaultOverlay), "Deployment", "openmed-operator", &dep)
	sc := dep.Spec.Template.Spec.SecurityContext
	user := fmt.Sprintf("USER %d:%d", *sc.RunAsUser, *sc.RunAsGroup)
	if !regexp.MustCompile(`(?m)^` + user + `$`).MatchString(df) {
		t.Errorf("Dockerfile lacks %q, the pod's runAsUser:runAsGroup", user)
	}
}
