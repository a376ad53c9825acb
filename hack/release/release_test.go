package main

import (
	"bytes"
	"context"
	"debug/elf"
	"debug/macho"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	spdxjson "github.com/spdx/tools-golang/json"
	"github.com/spdx/tools-golang/spdxlib"
	"golang.org/x/mod/modfile"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"

	"github.com/openmed/openmed-operator/pkg/localrun"
)

// testBuild is a release of this tree as `make image` builds it.
var testBuild = Build{
	Root:    filepath.Join("..", ".."),
	Version: "v0.2.0-rc.1",
	Commit:  "0123456789abcdef0123456789abcdef01234567",
	Created: time.Unix(1700000000, 0).UTC(),
}

var (
	// workDir holds the binaries of the package's one build.
	workDir   string
	builtOnce sync.Once
	built     *Image
	builtErr  error
)

// image is testBuild's image, built once for the package.
func image(t *testing.T) *Image {
	t.Helper()
	builtOnce.Do(func() { built, builtErr = testBuild.BuildImage(workDir) })
	if builtErr != nil {
		t.Fatal(builtErr)
	}
	return built
}

func TestMain(m *testing.M) {
	var err error
	if workDir, err = os.MkdirTemp("", "openmed-release-test-"); err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(workDir)
	os.Exit(code)
}

// TestImage checks the image a release is: one index of linux/amd64 and
// linux/arm64 images, each the pinned base layer and one layer with a
// static binary for its platform at the entrypoint, run as 65532; and the
// same commit built a second time gives the same digest.
func TestImage(t *testing.T) {
	img := image(t)
	again, err := testBuild.BuildImage(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if again.Digest != img.Digest {
		t.Errorf("the same commit built %s, then %s", img.Digest, again.Digest)
	}

	im, err := img.Index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var platforms []string
	for _, d := range im.Manifests {
		platforms = append(platforms, d.Platform.String())
		child, err := img.Index.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := child.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.OS != d.Platform.OS || cf.Architecture != d.Platform.Architecture {
			t.Errorf("%s: the config says %s/%s", d.Platform, cf.OS, cf.Architecture)
		}
		if cf.Config.User != "65532:65532" || strings.Join(cf.Config.Entrypoint, " ") != Entrypoint {
			t.Errorf("%s: user %q, entrypoint %q; want 65532:65532 and %s", d.Platform, cf.Config.User, cf.Config.Entrypoint, Entrypoint)
		}
		if got := cf.Config.Labels["org.opencontainers.image.version"]; got != testBuild.Version {
			t.Errorf("%s: version label %q", d.Platform, got)
		}
		layers, err := child.Layers()
		if err != nil {
			t.Fatal(err)
		}
		if len(layers) != 2 {
			t.Fatalf("%s: %d layers, want the base and the binary", d.Platform, len(layers))
		}
		if diff, _ := layers[0].DiffID(); diff.String() != baseDiffID {
			t.Errorf("%s: base layer %s, pinned %s", d.Platform, diff, baseDiffID)
		}
		checkELF(t, img.Binaries[d.Platform.OS+"/"+d.Platform.Architecture], d.Platform.Architecture)
	}
	if got, want := strings.Join(platforms, ","), "linux/amd64,linux/arm64"; got != want {
		t.Errorf("platforms %s, want %s", got, want)
	}

	// The layout holds the same index, named by the version.
	dir := filepath.Join(t.TempDir(), LayoutDir)
	if err := testBuild.WriteLayout(img, dir); err != nil {
		t.Fatal(err)
	}
	idx, err := ReadLayout(dir, testBuild.Version)
	if err != nil {
		t.Fatal(err)
	}
	if h, _ := idx.Digest(); h.String() != img.Digest {
		t.Errorf("the layout's index is %s, built %s", h, img.Digest)
	}
	if _, err := ReadLayout(dir, "v9.9.9"); err == nil {
		t.Error("the layout gave an image for a version it does not hold")
	}
}

// checkELF checks that path is a statically linked Linux executable for
// arch (no interpreter, no shared libraries).
func checkELF(t *testing.T, path, arch string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch]
	if f.Machine != want {
		t.Errorf("%s: machine %s, want %s", path, f.Machine, want)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s: dynamically linked (has an interpreter)", path)
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("%s: links %v", path, libs)
	}
}

// TestSBOM reads the SBOM back with the SPDX library, validates it, and
// checks that it describes the image by digest and lists the modules the
// binary was built from at go.mod's versions.
func TestSBOM(t *testing.T) {
	img := image(t)
	data, err := testBuild.SBOM(img, "registry.example.com/openmed/openmed-operator")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := spdxjson.Read(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if err := spdxlib.ValidateDocument(doc); err != nil {
		t.Fatal(err)
	}
	described, err := spdxlib.GetDescribedPackageIDs(doc)
	if err != nil || len(described) != 1 {
		t.Fatalf("described packages %v, %v", described, err)
	}
	versions := map[string]string{}
	for _, p := range doc.Packages {
		versions[p.PackageName] = p.PackageVersion
		if p.PackageSPDXIdentifier == described[0] {
			if len(p.PackageChecksums) != 1 || "sha256:"+p.PackageChecksums[0].Value != img.Digest {
				t.Errorf("the described package's checksums %v, the image is %s", p.PackageChecksums, img.Digest)
			}
		}
	}
	gomod, err := os.ReadFile(filepath.Join(testBuild.Root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	mf, err := modfile.Parse("go.mod", gomod, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"sigs.k8s.io/controller-runtime", "github.com/fluxcd/pkg/runtime", "k8s.io/client-go"} {
		var version string
		for _, r := range mf.Require {
			if r.Mod.Path == want {
				version = r.Mod.Version
			}
		}
		if got := versions[want]; got != version || version == "" {
			t.Errorf("the SBOM lists %s at %q, go.mod requires %q", want, got, version)
		}
	}
	if got := versions["stdlib"]; got != runtime.Version() {
		t.Errorf("the SBOM lists the standard library at %q, built with %s", got, runtime.Version())
	}
	// The image does not link the release tooling.
	if _, ok := versions["github.com/google/go-containerregistry"]; ok {
		t.Error("the SBOM lists go-containerregistry: the operator binary links the release tool")
	}
	again, err := testBuild.SBOM(img, "registry.example.com/openmed/openmed-operator")
	if err != nil || !bytes.Equal(again, data) {
		t.Errorf("the same build wrote a different SBOM (%v)", err)
	}
}

// TestPush pushes the layout's image to a registry (go-containerregistry's
// registry, served on loopback) and reads it back: the registry holds the
// digest the layout built, under the version's tag.
func TestPush(t *testing.T) {
	img := image(t)
	dir := filepath.Join(t.TempDir(), LayoutDir)
	if err := testBuild.WriteLayout(img, dir); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	repo := strings.TrimPrefix(srv.URL, "http://") + "/team/openmed-operator"
	ref, err := Push(context.Background(), dir, testBuild.Version, repo)
	if err != nil {
		t.Fatal(err)
	}
	if ref != repo+"@"+img.Digest {
		t.Errorf("pushed %s, want %s@%s", ref, repo, img.Digest)
	}
	tag, err := name.NewTag(repo + ":" + testBuild.Version)
	if err != nil {
		t.Fatal(err)
	}
	desc, err := remote.Get(tag)
	if err != nil {
		t.Fatal(err)
	}
	if desc.Digest.String() != img.Digest {
		t.Errorf("the registry's %s is %s, want %s", tag, desc.Digest, img.Digest)
	}
	pulled, err := desc.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	arm, err := pulled.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(arm.Manifests) != len(Platforms) {
		t.Errorf("the pushed index has %d images, want %d", len(arm.Manifests), len(Platforms))
	}
	for _, d := range arm.Manifests {
		if _, err := remote.Image(tag.Context().Digest(d.Digest.String())); err != nil {
			t.Errorf("the registry lacks %s's image: %v", d.Platform, err)
		}
	}
	if _, err := Push(context.Background(), dir, "v9.9.9", repo); err == nil {
		t.Error("pushed a version the layout does not hold")
	}
}

// TestRelease writes a whole release as `make release` does: the
// manifests name the image by digest in every container that runs it,
// crds.yaml holds only the CRD, the plugins are executables for their
// platforms, and `sha256sum -c` accepts checksums.txt.
func TestRelease(t *testing.T) {
	img := image(t)
	dist := t.TempDir()
	if err := testBuild.WriteLayout(img, filepath.Join(dist, LayoutDir)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dist, DigestFile), []byte(img.Digest+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const repo = "registry.example.com/openmed/openmed-operator"
	err := run(context.Background(), []string{"release", "--out", dist, "--root", testBuild.Root,
		"--version", testBuild.Version, "--commit", testBuild.Commit, "--image", repo})
	if err != nil {
		t.Fatal(err)
	}

	for _, f := range []string{InstallFile, InstallLockdownFile} {
		var images []string
		for _, o := range decode(t, filepath.Join(dist, f)) {
			if o.GetKind() != "Deployment" {
				continue
			}
			var dep appsv1.Deployment
			if err := k8sruntime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &dep); err != nil {
				t.Fatal(err)
			}
			for _, c := range append(dep.Spec.Template.Spec.InitContainers, dep.Spec.Template.Spec.Containers...) {
				images = append(images, c.Image)
			}
		}
		if got, want := strings.Join(images, ","), repo+"@"+img.Digest; got != want {
			t.Errorf("%s runs %s, want %s", f, got, want)
		}
	}
	for _, o := range decode(t, filepath.Join(dist, CRDsFile)) {
		if o.GetKind() != "CustomResourceDefinition" {
			t.Errorf("%s holds a %s", CRDsFile, o.GetKind())
		}
	}

	for _, p := range PluginPlatforms {
		goos, goarch, _ := strings.Cut(p, "/")
		path := filepath.Join(dist, PluginFile(goos, goarch))
		switch goos {
		case "linux":
			checkELF(t, path, goarch)
		case "darwin":
			f, err := macho.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]macho.Cpu{"amd64": macho.CpuAmd64, "arm64": macho.CpuArm64}[goarch]
			if f.Cpu != want {
				t.Errorf("%s: cpu %s, want %s", path, f.Cpu, want)
			}
			f.Close()
		}
	}

	sums, err := os.ReadFile(filepath.Join(dist, ChecksumsFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{InstallFile, InstallLockdownFile, CRDsFile, PluginFile("darwin", "arm64")} {
		if !strings.Contains(string(sums), "  "+want+"\n") {
			t.Errorf("%s lacks %s", ChecksumsFile, want)
		}
	}
	check := exec.Command("sha256sum", "-c", ChecksumsFile)
	check.Dir = dist
	if out, err := check.CombinedOutput(); err != nil {
		t.Errorf("sha256sum -c: %v\n%s", err, out)
	}
}

// TestVersionMustBeSemantic refuses a release whose version is not a
// semantic version, before building anything.
func TestVersionMustBeSemantic(t *testing.T) {
	for _, v := range []string{"", "0.2.0", "v0.2", "latest", "v0.2.0-rc.1+abc"} {
		err := run(context.Background(), []string{"image", "--version", v, "--out", t.TempDir()})
		if err == nil || !strings.Contains(err.Error(), "semantic version") {
			t.Errorf("version %q: err = %v, want a refusal naming semantic versions", v, err)
		}
	}
}

// decode reads a multi-document YAML file that must hold objects.
func decode(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := localrun.ReadObjects(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) == 0 {
		t.Fatalf("%s holds no objects", path)
	}
	return objs
}
