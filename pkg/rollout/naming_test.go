package rollout

import (
	"runtime"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

type golden struct {
	Fixture struct {
		Canonical     string `json:"canonical"`
		SpecHash      string `json:"specHash"`
		Manifest      string `json:"manifest"`
		ManifestHash  string `json:"manifestHash"`
		ConfigMapName string `json:"configMapName"`
	} `json:"fixture"`
	Example struct {
		SpecHash     string `json:"specHash"`
		ManifestHash string `json:"manifestHash"`
	} `json:"example"`
	Minimal struct {
		Canonical    string `json:"canonical"`
		SpecHash     string `json:"specHash"`
		ManifestHash string `json:"manifestHash"`
	} `json:"minimal"`
	MinimalPercent struct {
		SpecHash string `json:"specHash"`
	} `json:"minimalPercent"`
	EmptyManifestHash     string `json:"emptyManifestHash"`
	DefaultConfigMapBases []struct {
		Name string `json:"name"`
		Base string `json:"base"`
	} `json:"defaultConfigMapBases"`
}

func normalize(t *testing.T, obj *v1alpha1.OpenMedModel) v1alpha1.NormalizedSpec {
	t.Helper()
	n, err := Normalize(obj)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// minimalModel is Appendix A's ns/m1: no targetRef, Recreate, defaults.
func minimalModel() *v1alpha1.OpenMedModel {
	obj := &v1alpha1.OpenMedModel{}
	obj.Name, obj.Namespace = "m1", "ns"
	obj.Spec = v1alpha1.OpenMedModelSpec{
		Family: "PII", Version: "OpenMed/x", Tier: v1alpha1.TierBase, Replicas: ptrTo(int32(1)),
		RolloutStrategy: v1alpha1.RolloutStrategy{Type: v1alpha1.RecreateRolloutStrategyType},
	}
	return obj
}

func ptrTo[T any](v T) *T { return &v }

// TestGoldenVectors checks the canonical JSON, spec and manifest hashes and
// names of fixed inputs against testdata/golden.yaml, the golden vectors of
// the Kopf operator this one replaces. One value differs from its: the
// ConfigMap the pointer names is content-addressed, so the fixture's
// ConfigMap is the base plus the first 10 hex of the manifest hash (the
// legacy name; new ones get 20).
func TestGoldenVectors(t *testing.T) {
	var g golden
	readYAML(t, "golden.yaml", &g)

	fixture := normalize(t, fixtureModel(t))
	if got := string(mustCanonical(fixture)); got != g.Fixture.Canonical {
		t.Errorf("canonical JSON\n got %s\nwant %s", got, g.Fixture.Canonical)
	}
	if got := SpecHash(fixture); got != g.Fixture.SpecHash {
		t.Errorf("spec hash %s, want %s", got, g.Fixture.SpecHash)
	}
	if got := string(ManifestJSON(fixture)); got != g.Fixture.Manifest {
		t.Errorf("manifest %s, want %s", got, g.Fixture.Manifest)
	}
	if got := ManifestHash(fixture); got != g.Fixture.ManifestHash {
		t.Errorf("manifest hash %s, want %s", got, g.Fixture.ManifestHash)
	}
	// The golden vectors' name (10 hex characters) is the legacy name; the
	// operator names new ConfigMaps with 20.
	if got := LegacyManifestConfigMapName(fixture.ManifestConfigMapName, ManifestHash(fixture)); got != g.Fixture.ConfigMapName {
		t.Errorf("legacy ConfigMap name %s, want %s", got, g.Fixture.ConfigMapName)
	}
	if got, want := ManifestConfigMapName(fixture.ManifestConfigMapName, ManifestHash(fixture)), fixture.ManifestConfigMapName+"-"+strings.TrimPrefix(ManifestHash(fixture), DigestPrefix)[:20]; got != want {
		t.Errorf("ConfigMap name %s, want %s", got, want)
	}

	// The example resource (examples/openmedmodel.yaml): name and namespace openmed-service,
	// version Small-44M, deadline 600.
	example := fixtureModel(t)
	example.Namespace = "openmed"
	example.Spec.Version = "OpenMed/OpenMed-PII-SuperClinical-Small-44M-v1"
	example.Spec.RolloutStrategy.ProgressDeadlineSeconds = ptrTo(int32(600))
	ex := normalize(t, example)
	if got := SpecHash(ex); got != g.Example.SpecHash {
		t.Errorf("example spec hash %s, want %s", got, g.Example.SpecHash)
	}
	if got := ManifestHash(ex); got != g.Example.ManifestHash {
		t.Errorf("example manifest hash %s, want %s", got, g.Example.ManifestHash)
	}

	minimal := normalize(t, minimalModel())
	if got := string(mustCanonical(minimal)); got != g.Minimal.Canonical {
		t.Errorf("minimal canonical\n got %s\nwant %s", got, g.Minimal.Canonical)
	}
	if got := SpecHash(minimal); got != g.Minimal.SpecHash {
		t.Errorf("minimal spec hash %s, want %s", got, g.Minimal.SpecHash)
	}
	if got := ManifestHash(minimal); got != g.Minimal.ManifestHash {
		t.Errorf("minimal manifest hash %s, want %s", got, g.Minimal.ManifestHash)
	}

	percent := minimalModel()
	percent.Spec.RolloutStrategy = v1alpha1.RolloutStrategy{
		Type:           v1alpha1.RollingUpdateRolloutStrategyType,
		MaxUnavailable: ptrTo(intstr.FromString("25%")),
		MaxSurge:       ptrTo(intstr.FromString("0%")),
	}
	if got := SpecHash(normalize(t, percent)); got != g.MinimalPercent.SpecHash {
		t.Errorf("percent spec hash %s, want %s", got, g.MinimalPercent.SpecHash)
	}

	if got := Digest(mustCanonical(EmptyManifest())); got != g.EmptyManifestHash {
		t.Errorf("empty manifest hash %s, want %s", got, g.EmptyManifestHash)
	}

	for _, row := range g.DefaultConfigMapBases {
		if got := DefaultConfigMapBase(row.Name); got != row.Base {
			t.Errorf("DefaultConfigMapBase(%s) = %s, want %s", row.Name, got, row.Base)
		}
	}
}

// TestHashesAreDigestsOfCanonicalJSON: SpecHash and ManifestHash, which
// encode into a reused buffer, are Digest of CanonicalJSON (encoding/json's
// Marshal) for specs with characters Marshal escapes; a spec hash
// allocates little more than the string it returns.
func TestHashesAreDigestsOfCanonicalJSON(t *testing.T) {
	base := normalize(t, minimalModel())
	for _, tc := range []struct {
		name string
		edit func(*v1alpha1.NormalizedSpec)
	}{
		{"minimal", func(*v1alpha1.NormalizedSpec) {}},
		{"replicas and percents", func(s *v1alpha1.NormalizedSpec) {
			s.Replicas = ptrTo(int32(3))
			s.RolloutStrategy.MaxSurge = intstr.FromString("25%")
			s.RolloutStrategy.BakeSeconds = 30
		}},
		{"HTML and quotes", func(s *v1alpha1.NormalizedSpec) { s.Version = `<a href="x">&'</a>` }},
		{"control characters and line separators", func(s *v1alpha1.NormalizedSpec) {
			s.Family = "tab\there\nnew\x00nul\u2028\u2029\x7f"
		}},
		{"non-ASCII and invalid UTF-8", func(s *v1alpha1.NormalizedSpec) { s.Version = "médical-\xff-模型" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := base
			tc.edit(&spec)
			want, err := CanonicalJSON(spec)
			if err != nil {
				t.Fatal(err)
			}
			if got := SpecHash(spec); got != Digest(want) {
				t.Errorf("SpecHash %s, want %s (of %s)", got, Digest(want), want)
			}
			manifest, err := CanonicalJSON(Manifest(spec))
			if err != nil {
				t.Fatal(err)
			}
			if got := ManifestHash(spec); got != Digest(manifest) {
				t.Errorf("ManifestHash %s, want %s (of %s)", got, Digest(manifest), manifest)
			}
		})
	}
	// The JSON's buffer is reused: a spec hash allocates less than half of
	// what Digest of Marshal's answer does (912 bytes, 8 allocations, when
	// this was written), in the same process.
	perCall := func(f func()) uint64 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range 100 {
			f()
		}
		runtime.ReadMemStats(&after)
		return (after.TotalAlloc - before.TotalAlloc) / 100
	}
	marshal := perCall(func() { _ = Digest(mustCanonical(base)) })
	if reused := perCall(func() { _ = SpecHash(base) }); reused*2 > marshal {
		t.Errorf("SpecHash allocates %d bytes per call, Digest of Marshal %d", reused, marshal)
	}
}

// TestMinimalDeploymentIntentRecreate: Appendix A says the strategy after the
// patch is {type: Recreate} with rollingUpdate removed; the intent sends no
// rollingUpdate, so server-side apply drops the operator's earlier values.
func TestMinimalDeploymentIntentRecreate(t *testing.T) {
	n := normalize(t, minimalModel())
	u := DeploymentIntent(n, "ns/m1", "m1-model-manifest-b8f867b81b", ManifestHash(n))
	strategy := u.Object["spec"].(map[string]any)["strategy"].(map[string]any)
	if len(strategy) != 1 || strategy["type"] != "Recreate" {
		t.Errorf("strategy = %v, want only type Recreate", strategy)
	}
}

func TestManifestConfigMapName(t *testing.T) {
	hash := "sha256:5a62c38517f97235ee02660f166bd123927813578528e33f909a5fd37ba72237"
	other := "sha256:1ecb6f1b4e1beae6703ed08f7d73ff5bfc0cadd43420314e7d416279ac7f30b1"
	cases := []struct {
		base         string
		want, legacy string
	}{
		{"openmed-service-model-manifest", "openmed-service-model-manifest-5a62c38517f97235ee02", "openmed-service-model-manifest-5a62c38517"},
		{"cfg.example", "cfg.example-5a62c38517f97235ee02", "cfg.example-5a62c38517"},
		// A 63-character default base leaves no room in its label: hashed.
		{strings.Repeat("a", 37) + "-model-manifest-822dc7494b", "", ""},
		{strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 61), "", ""},
	}
	for _, tc := range cases {
		for _, n := range []struct {
			fn        func(base, manifestHash string) string
			name      string
			want      string
			hexLength int
		}{
			{ManifestConfigMapName, "ManifestConfigMapName", tc.want, 20},
			{LegacyManifestConfigMapName, "LegacyManifestConfigMapName", tc.legacy, 10},
		} {
			got := n.fn(tc.base, hash)
			if n.want != "" && got != n.want {
				t.Errorf("%s(%s) = %s, want %s", n.name, tc.base, got, n.want)
			}
			if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 || !validName(got) {
				t.Errorf("%s(%s) = %s is not a valid name: %v", n.name, tc.base, got, errs)
			}
			if got == n.fn(tc.base, other) {
				t.Errorf("%s(%s) does not depend on the manifest", n.name, tc.base)
			}
			// The suffix: hexLength hex characters after the last dash.
			if i := strings.LastIndexByte(got, '-'); len(got)-i-1 != n.hexLength {
				t.Errorf("%s(%s) = %s: a suffix of %d characters, want %d", n.name, tc.base, got, len(got)-i-1, n.hexLength)
			}
		}
	}
}

func TestOwnerKeyAndTargetNames(t *testing.T) {
	obj := minimalModel()
	obj.Namespace = ""
	if got := OwnerKey(obj); got != "default/m1" {
		t.Errorf("OwnerKey = %s, want default/m1", got)
	}
	obj.Spec.TargetRef = &v1alpha1.TargetReference{Name: "serving"}
	obj.Status.TargetName = "old"
	if desired, previous := TargetNames(obj); desired != "serving" || !slices.Equal(previous, []string{"old"}) {
		t.Errorf("TargetNames = %s, %v; want serving, [old]", desired, previous)
	}
	obj.Status.TargetName = "serving"
	if _, previous := TargetNames(obj); len(previous) != 0 {
		t.Errorf("previous = %v, want none", previous)
	}
	// Every recorded claim but the desired target, sorted, once each.
	obj.Status.ClaimedTargets = []string{"c", "serving", "b"}
	obj.Status.TargetName = "b"
	if _, previous := TargetNames(obj); !slices.Equal(previous, []string{"b", "c"}) {
		t.Errorf("previous = %v, want [b c]", previous)
	}
}

// TestParseOwnerKey: an owner annotation's value is kept only when it can
// name a model; a manifest hash only when it is a digest as the operator
// writes one.
func TestParseOwnerKey(t *testing.T) {
	for _, tc := range []struct {
		key, ns, name string
		ok            bool
	}{
		{key: "team-a/openmed-service", ns: "team-a", name: "openmed-service", ok: true},
		{key: "team-a/a.b-c", ns: "team-a", name: "a.b-c", ok: true},
		{key: strings.Repeat("n", 63) + "/" + strings.Repeat("m", 63) + "." + strings.Repeat("m", 63) + "." + strings.Repeat("m", 63) + "." + strings.Repeat("m", 61),
			ns: strings.Repeat("n", 63), name: strings.Repeat("m", 63) + "." + strings.Repeat("m", 63) + "." + strings.Repeat("m", 63) + "." + strings.Repeat("m", 61), ok: true},
		{key: "team-a"},
		{key: "/openmed-service"},
		{key: "team-a/"},
		{key: "Team-A/openmed-service"},
		{key: "team-a/openmed/service"},
		{key: strings.Repeat("n", 64) + "/m"},
		{key: "n/" + strings.Repeat("m", 254)},
		{key: "team-a/" + strings.Repeat("x", 200*1024)},
	} {
		ns, name, ok := ParseOwnerKey(tc.key)
		if ns != tc.ns || name != tc.name || ok != tc.ok {
			t.Errorf("ParseOwnerKey(%.40q) = %q, %q, %v; want %q, %q, %v", tc.key, ns, name, ok, tc.ns, tc.name, tc.ok)
		}
	}
	digest := Digest([]byte("x"))
	for s, want := range map[string]bool{
		digest:                          true,
		strings.ToUpper(digest):         false,
		digest[:len(digest)-1]:          false,
		digest + "0":                    false,
		"sha512:" + digest[7:]:          false,
		digest[:20] + "g" + digest[21:]: false,
	} {
		if IsDigest(s) != want {
			t.Errorf("IsDigest(%q) = %v, want %v", s, !want, want)
		}
	}
}

func TestNormalizeRejectsValueFree(t *testing.T) {
	obj := minimalModel()
	obj.Spec.Family = "<script>secret</script>"
	_, err := Normalize(obj)
	if err == nil {
		t.Fatal("Normalize accepted an invalid family")
	}
	if strings.Contains(err.Error(), "secret") {
		t.Errorf("message echoes the value: %s", err)
	}
	if _, ok := err.(*SpecError); !ok {
		t.Errorf("error is %T, want *SpecError", err)
	}
}

func TestManifestConfigMapBuilder(t *testing.T) {
	obj := fixtureModel(t)
	n := normalize(t, obj)
	cm := ManifestConfigMap(obj, n)
	if cm.Name != "openmed-service-model-manifest-5a62c38517f97235ee02" || cm.Namespace != "synthetic" {
		t.Errorf("name %s/%s", cm.Namespace, cm.Name)
	}
	if cm.Immutable == nil || !*cm.Immutable {
		t.Error("ConfigMap is not immutable")
	}
	if cm.Data[v1alpha1.ManifestKey] != string(ManifestJSON(n))+"\n" || cm.Data[v1alpha1.PreloadEnvVar] != v1 || len(cm.Data) != 2 {
		t.Errorf("data %v", cm.Data)
	}
	if cm.Labels[v1alpha1.ManagedByLabel] != "openmed-operator" || cm.Labels[v1alpha1.ModelFamilyLabel] != "PII" {
		t.Errorf("labels %v", cm.Labels)
	}
	if cm.Annotations[v1alpha1.ModelResourceAnnotation] != "synthetic/openmed-service" {
		t.Errorf("annotations %v", cm.Annotations)
	}
	ref := cm.OwnerReferences
	if len(ref) != 1 || ref[0].UID != obj.UID || !*ref[0].Controller || !*ref[0].BlockOwnerDeletion || ref[0].Kind != "OpenMedModel" {
		t.Errorf("ownerReferences %v", ref)
	}
}
