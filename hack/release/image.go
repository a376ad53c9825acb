package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/openmed/openmed-operator/pkg/version"
)

// The image's fixed facts. The Deployment in kustomize/manager runs the
// container as runAsUser/runAsGroup 65532 without a command, so the image's
// entrypoint and user are what the pod runs; a test keeps the two in step.
const (
	// Entrypoint is the operator binary's path in the image.
	Entrypoint = "/openmed-operator"
	// NonRootUID is the user and group the image runs as: distroless's
	// "nonroot".
	NonRootUID = 65532
	// RefNameAnnotation names the image index in the OCI layout
	// (index.json), as `crane push` and skopeo read it.
	RefNameAnnotation = "org.opencontainers.image.ref.name"
	// sourceURL is the repository the image labels name as its source.
	sourceURL = "https://github.com/openmed/openmed-operator"
)

// baseDiffID pins the base layer: the sha256 of its uncompressed tar. The
// base is built here, byte for byte the same on every machine (fixed
// modification times, owners and order), so a change to it is a change to
// this constant, made on purpose and reviewed.
const baseDiffID = "sha256:8d64fd10a65a05f4fb664590e4af7b82b8629b28a8b4cbc5d40aab68ccd7792f"

// Platforms are the platforms every image is built for.
var Platforms = []v1.Platform{
	{OS: "linux", Architecture: "amd64"},
	{OS: "linux", Architecture: "arm64"},
}

// Build describes one build of the release: the source tree, the version
// and commit it names and the time it stamps on every file and config.
type Build struct {
	// Root is the module's directory (where go.mod is).
	Root string
	// Version is the semantic version, e.g. v0.2.0-rc.1.
	Version string
	// Commit is the git commit the build is made from.
	Commit string
	// Created is the time written into the image and the SBOM: the commit's
	// time (SOURCE_DATE_EPOCH), never the time of the build, so the same
	// commit builds the same digest.
	Created time.Time
}

// ldflags strips the symbol table and debug information (smaller, and
// nothing of the build machine in the binary) and sets the version and
// commit that `--version`, the build-info metric and the User-Agent report.
func (b Build) ldflags() string {
	return fmt.Sprintf("-s -w -X %s=%s -X %s=%s", version.VersionVar, b.Version, version.CommitVar, b.Commit)
}

// goBuild builds pkg (relative to Root) for goos/goarch into out: static
// (CGO_ENABLED=0), without local paths (-trimpath) or VCS stamping, whose
// "modified" bit would make an untracked file change the digest; the version
// and commit come from the linker flags instead.
func (b Build) goBuild(pkg, goos, goarch, out string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags", b.ldflags(), "-o", out, pkg)
	cmd.Dir = b.Root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch, "GOFLAGS=")
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s for %s/%s: %w\n%s", pkg, goos, goarch, err, stderr.String())
	}
	return nil
}

// tarEntry is one file or directory of a layer.
type tarEntry struct {
	name     string
	mode     int64
	uid, gid int
	dir      bool
	body     []byte
}

// layerTar writes entries as a tar with every header fixed: the given
// modification time, numeric owners only, PAX format, in the given order.
func layerTar(entries []tarEntry, mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{
			Name:    e.name,
			Mode:    e.mode,
			Uid:     e.uid,
			Gid:     e.gid,
			ModTime: mtime,
			Format:  tar.FormatPAX,
		}
		if e.dir {
			hdr.Typeflag = tar.TypeDir
			hdr.Name += "/"
		} else {
			hdr.Typeflag = tar.TypeReg
			hdr.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// baseEntries are the files of distroless static's "nonroot" variant that
// the operator uses: the users and groups (so the runtime and tools resolve
// 65532 to "nonroot"), the home it may write, /tmp, and the resolver's
// order. There is no shell, no package manager and no CA bundle: the
// operator trusts only the cluster CA mounted with its ServiceAccount.
func baseEntries() []tarEntry {
	return []tarEntry{
		{name: "etc", mode: 0o755, dir: true},
		{name: "etc/group", mode: 0o644, body: []byte("root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n")},
		{name: "etc/nsswitch.conf", mode: 0o644, body: []byte("hosts: files dns\n")},
		{name: "etc/passwd", mode: 0o644, body: []byte(
			"root:x:0:0:root:/root:/sbin/nologin\n" +
				"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
				"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{name: "home", mode: 0o755, dir: true},
		{name: "home/nonroot", mode: 0o700, uid: NonRootUID, gid: NonRootUID, dir: true},
		{name: "root", mode: 0o700, dir: true},
		{name: "tmp", mode: 0o1777, dir: true},
	}
}

// baseLayer is the pinned base layer. Its files carry the Unix epoch as
// their time, so it does not change with the commit.
func baseLayer() (v1.Layer, error) {
	body, err := layerTar(baseEntries(), time.Unix(0, 0))
	if err != nil {
		return nil, err
	}
	if got := digestOf(body); got != baseDiffID {
		return nil, fmt.Errorf("the base layer is %s, pinned %s: a change to the base must update baseDiffID", got, baseDiffID)
	}
	return bytesLayer(body)
}

// bytesLayer is an OCI gzip layer of an uncompressed tar.
func bytesLayer(body []byte) (v1.Layer, error) {
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(body)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// digestOf is the OCI digest of data.
func digestOf(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// labels are the OCI annotations and config labels of a release.
func (b Build) labels() map[string]string {
	return map[string]string{
		"org.opencontainers.image.created":  b.Created.UTC().Format(time.RFC3339),
		"org.opencontainers.image.revision": b.Commit,
		"org.opencontainers.image.source":   sourceURL,
		"org.opencontainers.image.title":    "openmed-operator",
		"org.opencontainers.image.version":  b.Version,
		"org.opencontainers.image.licenses": "Apache-2.0",
	}
}

// platformImage builds the operator for p and makes its image: the base
// layer, then a layer holding only the binary at Entrypoint.
func (b Build) platformImage(p v1.Platform, workDir string) (v1.Image, string, error) {
	bin := filepath.Join(workDir, "openmed-operator-"+p.OS+"-"+p.Architecture)
	if err := b.goBuild("./cmd/openmed-operator", p.OS, p.Architecture, bin); err != nil {
		return nil, "", err
	}
	exe, err := os.ReadFile(bin)
	if err != nil {
		return nil, "", err
	}
	binTar, err := layerTar([]tarEntry{{name: strings.TrimPrefix(Entrypoint, "/"), mode: 0o755, body: exe}}, b.Created)
	if err != nil {
		return nil, "", err
	}
	base, err := baseLayer()
	if err != nil {
		return nil, "", err
	}
	binLayer, err := bytesLayer(binTar)
	if err != nil {
		return nil, "", err
	}
	created := v1.Time{Time: b.Created.UTC()}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, MediaType: types.OCILayer, History: v1.History{Created: v1.Time{Time: time.Unix(0, 0).UTC()}, CreatedBy: "openmed base: nonroot user, /tmp, /home/nonroot", Comment: baseDiffID}},
		mutate.Addendum{Layer: binLayer, MediaType: types.OCILayer, History: v1.History{Created: created, CreatedBy: "go build -trimpath ./cmd/openmed-operator (CGO_ENABLED=0)"}},
	)
	if err != nil {
		return nil, "", err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, "", err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS, cf.Variant = p.Architecture, p.OS, p.Variant
	cf.Created = created
	cf.Config = v1.Config{
		User:       fmt.Sprintf("%d:%d", NonRootUID, NonRootUID),
		Entrypoint: []string{Entrypoint},
		WorkingDir: "/",
		Labels:     b.labels(),
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, "", err
	}
	return img, bin, nil
}

// Image is a built release image.
type Image struct {
	// Index is the multi-platform image index; its digest is the image's.
	Index v1.ImageIndex
	// Digest is the index's digest, sha256:….
	Digest string
	// Binaries are the built operator binaries by platform ("linux/amd64").
	Binaries map[string]string
}

// BuildImage builds the operator for every platform and assembles the
// multi-platform index. Work files go to workDir.
func (b Build) BuildImage(workDir string) (*Image, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	out := &Image{Binaries: map[string]string{}}
	for _, p := range Platforms {
		img, bin, err := b.platformImage(p, workDir)
		if err != nil {
			return nil, err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
		out.Binaries[p.OS+"/"+p.Architecture] = bin
	}
	annotated, ok := mutate.Annotations(idx, b.labels()).(v1.ImageIndex)
	if !ok {
		return nil, fmt.Errorf("annotating the image index gave no index")
	}
	h, err := annotated.Digest()
	if err != nil {
		return nil, err
	}
	out.Index, out.Digest = annotated, h.String()
	return out, nil
}

// WriteLayout writes img as an OCI image layout in dir (replacing what was
// there), the index named by the version.
func (b Build) WriteLayout(img *Image, dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	return p.AppendIndex(img.Index, layout.WithAnnotations(map[string]string{RefNameAnnotation: b.Version}))
}

// ReadLayout returns the image index the layout in dir names version.
func ReadLayout(dir, version string) (v1.ImageIndex, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, err
	}
	root, err := p.ImageIndex()
	if err != nil {
		return nil, err
	}
	m, err := root.IndexManifest()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, d := range m.Manifests {
		name := d.Annotations[RefNameAnnotation]
		names = append(names, name)
		if name == version {
			return root.ImageIndex(d.Digest)
		}
	}
	sort.Strings(names)
	return nil, fmt.Errorf("the OCI layout %s holds no image %q (it holds %v)", dir, version, names)
}
