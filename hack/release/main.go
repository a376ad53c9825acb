// Command release builds the operator's release without Docker: the
// multi-platform OCI image (written as an OCI layout), its SPDX SBOM, the
// install manifests pinned to the image's digest and the kubectl plugin
// binaries with their checksums. `make image`, `make image-push` and
// `make release` run it:
//
//	go run ./hack/release image     --version v0.2.0 --commit <sha> --source-date-epoch <unix> [--out dist] [--image repo]
//	go run ./hack/release push      --version v0.2.0 --image registry.example.com/openmed/openmed-operator [--out dist]
//	go run ./hack/release release   --version v0.2.0 --commit <sha> [--out dist] [--image repo]
//
// release writes the manifests, the plugins and checksums.txt; manifests
// writes the manifests alone.
//
// The same commit builds the same image digest: every time in the image is
// the commit's (--source-date-epoch), the binaries are built with -trimpath
// and without VCS stamping, and the base layer is built here and pinned by
// its digest.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/mod/semver"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

// options are the flags every step takes.
type options struct {
	out, version, commit, image, root string
	epoch                             int64
}

func parse(step string, args []string) (*options, error) {
	fs := flag.NewFlagSet(step, flag.ContinueOnError)
	o := &options{}
	fs.StringVar(&o.out, "out", "dist", "output directory")
	fs.StringVar(&o.version, "version", "", "semantic version of the release, e.g. v0.2.0-rc.1 (required)")
	fs.StringVar(&o.commit, "commit", "", "git commit the release is built from (image, manifests)")
	fs.StringVar(&o.image, "image", shippedImage, "image repository the release is pushed to and the manifests pull from")
	fs.StringVar(&o.root, "root", ".", "the module's directory")
	fs.Int64Var(&o.epoch, "source-date-epoch", -1, "the commit's time in Unix seconds, stamped on the image and SBOM (image)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	// Build metadata (+…) is left out: an image tag cannot hold a "+".
	if !semver.IsValid(o.version) || semver.Canonical(o.version) != o.version {
		return nil, fmt.Errorf("--version %q is not a semantic version vMAJOR.MINOR.PATCH[-PRERELEASE]", o.version)
	}
	return o, nil
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return errors.New("usage: release image|push|manifests|release [flags]")
	}
	o, err := parse(args[0], args[1:])
	if err != nil {
		return err
	}
	switch args[0] {
	case "image":
		return imageStep(o)
	case "push":
		ref, err := Push(ctx, filepath.Join(o.out, LayoutDir), o.version, o.image)
		if err != nil {
			return err
		}
		fmt.Println(ref)
		return nil
	case "manifests":
		return manifestsStep(o)
	case "release":
		return releaseStep(o)
	default:
		return fmt.Errorf("unknown step %q: want image, push, manifests or release", args[0])
	}
}

func (o *options) build() (Build, error) {
	if o.commit == "" {
		return Build{}, errors.New("--commit is required")
	}
	root, err := filepath.Abs(o.root)
	if err != nil {
		return Build{}, err
	}
	return Build{Root: root, Version: o.version, Commit: o.commit, Created: time.Unix(o.epoch, 0).UTC()}, nil
}

// imageStep writes the OCI layout, image.digest and the SBOM.
func imageStep(o *options) error {
	if o.epoch < 0 {
		return errors.New("--source-date-epoch is required (the commit's time: git log -1 --format=%ct)")
	}
	b, err := o.build()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "openmed-release-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	img, err := b.BuildImage(work)
	if err != nil {
		return err
	}
	if err := b.WriteLayout(img, filepath.Join(o.out, LayoutDir)); err != nil {
		return err
	}
	sbom, err := b.SBOM(img, o.image)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(o.out, SBOMFile), sbom, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(o.out, DigestFile), []byte(img.Digest+"\n"), 0o644); err != nil {
		return err
	}
	fmt.Printf("%s/%s %s (%d platforms), SBOM %s\n", o.out, LayoutDir, img.Digest, len(Platforms), filepath.Join(o.out, SBOMFile))
	return nil
}

// manifestsStep writes the manifests for the image image.digest names.
func manifestsStep(o *options) error {
	raw, err := os.ReadFile(filepath.Join(o.out, DigestFile))
	if err != nil {
		return fmt.Errorf("%w (run the image step first: make image)", err)
	}
	digest := strings.TrimSpace(string(raw))
	if !strings.HasPrefix(digest, "sha256:") || len(digest) != len("sha256:")+64 {
		return fmt.Errorf("%s holds %q, not a sha256 digest", DigestFile, digest)
	}
	// The layout must hold the image the manifests will name.
	idx, err := ReadLayout(filepath.Join(o.out, LayoutDir), o.version)
	if err != nil {
		return err
	}
	if h, err := idx.Digest(); err != nil || h.String() != digest {
		return fmt.Errorf("the OCI layout's %s is %v, %s says %s: build the image again", o.version, h, DigestFile, digest)
	}
	if err := WriteManifests(o.out, o.image+"@"+digest); err != nil {
		return err
	}
	fmt.Printf("%s: %s, %s, %s (%s@%s)\n", o.out, InstallFile, InstallLockdownFile, CRDsFile, o.image, digest)
	return nil
}

// releaseStep writes the manifests, the kubectl plugins and the checksums
// of every file of the release.
func releaseStep(o *options) error {
	b, err := o.build()
	if err != nil {
		return err
	}
	if err := manifestsStep(o); err != nil {
		return err
	}
	if err := b.WritePlugins(o.out); err != nil {
		return err
	}
	if err := WriteChecksums(o.out); err != nil {
		return err
	}
	fmt.Printf("%s: %d kubectl plugins, %s\n", o.out, len(PluginPlatforms), ChecksumsFile)
	return nil
}
