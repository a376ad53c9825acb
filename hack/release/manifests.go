package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/openmed/openmed-operator/kustomize"
	"github.com/openmed/openmed-operator/pkg/localrun"
)

// shippedImage is the image name the bundles' Deployment runs
// (kustomize/manager's images: entry); a release replaces it, with its tag,
// by the repository and digest it was built as.
const shippedImage = "ghcr.io/openmed/openmed-operator"

// The release's files, relative to its output directory.
const (
	InstallFile         = "install.yaml"
	InstallLockdownFile = "install-lockdown.yaml"
	CRDsFile            = "crds.yaml"
	SBOMFile            = "openmed-operator.spdx.json"
	DigestFile          = "image.digest"
	LayoutDir           = "oci"
	ChecksumsFile       = "checksums.txt"
)

// crdOverlay is the kustomization of the CRD alone, which runs no image.
const crdOverlay = "crd"

// PluginPlatforms are the platforms the kubectl plugin is built for.
var PluginPlatforms = []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64"}

// PluginFile is the file name of the kubectl plugin for goos/goarch.
func PluginFile(goos, goarch string) string {
	return "kubectl-openmed_" + goos + "_" + goarch
}

// bundle renders a kustomize overlay and pins every container that runs the
// shipped image to image (repository@digest). It fails when no container
// runs it, so a renamed image cannot ship a bundle that still pulls a tag.
func bundle(overlay, image string) ([]byte, error) {
	objs, err := kustomize.Build(filepath.Join(kustomize.Dir(), overlay))
	if err != nil {
		return nil, err
	}
	pinned := 0
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		containers, _, err := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		if err != nil {
			return nil, err
		}
		for i, c := range containers {
			cm, _ := c.(map[string]any)
			ref, _ := cm["image"].(string)
			if ref == shippedImage || strings.HasPrefix(ref, shippedImage+":") || strings.HasPrefix(ref, shippedImage+"@") {
				cm["image"] = image
				containers[i] = cm
				pinned++
			}
		}
		if err := unstructured.SetNestedSlice(o.Object, containers, "spec", "template", "spec", "containers"); err != nil {
			return nil, err
		}
	}
	if overlay != crdOverlay && pinned == 0 {
		return nil, fmt.Errorf("overlay %s runs no container of %s", overlay, shippedImage)
	}
	return localrun.MarshalObjects(objs)
}

// WriteManifests writes install.yaml (the cluster-wide bundle),
// install-lockdown.yaml and crds.yaml to dir, each running image.
func WriteManifests(dir, image string) error {
	for _, f := range []struct{ overlay, file string }{
		{kustomize.DefaultOverlay, InstallFile},
		{kustomize.LockdownOverlay, InstallLockdownFile},
		{crdOverlay, CRDsFile},
	} {
		body, err := bundle(f.overlay, image)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, f.file), body, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// WritePlugins builds the kubectl plugin for every PluginPlatforms entry
// into dir.
func (b Build) WritePlugins(dir string) error {
	for _, p := range PluginPlatforms {
		goos, goarch, _ := strings.Cut(p, "/")
		if err := b.goBuild("./cmd/kubectl-openmed", goos, goarch, filepath.Join(dir, PluginFile(goos, goarch))); err != nil {
			return err
		}
	}
	return nil
}

// WriteChecksums writes checksums.txt in dir: the sha256 of every regular
// file there (the OCI layout's blobs name their own digests), in the format
// `sha256sum -c` reads.
func WriteChecksums(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var names []string
	for _, e := range entries {
		if e.Type().IsRegular() && e.Name() != ChecksumsFile {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	var buf bytes.Buffer
	for _, n := range names {
		data, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			return err
		}
		sum := sha256.Sum256(data)
		fmt.Fprintf(&buf, "%s  %s\n", hex.EncodeToString(sum[:]), n)
	}
	return os.WriteFile(filepath.Join(dir, ChecksumsFile), buf.Bytes(), 0o644)
}
