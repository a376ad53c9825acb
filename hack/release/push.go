package main

import (
	"context"
	"fmt"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Push pushes the image the OCI layout in layoutDir names version to
// repository, tagged version, with the credentials docker and podman keep
// (~/.docker/config.json, $DOCKER_CONFIG, credential helpers). It returns
// the pushed reference by digest, which is the digest the layout holds: a
// registry cannot change it.
func Push(ctx context.Context, layoutDir, version, repository string) (string, error) {
	idx, err := ReadLayout(layoutDir, version)
	if err != nil {
		return "", err
	}
	tag, err := name.NewTag(repository + ":" + version)
	if err != nil {
		return "", fmt.Errorf("image repository %q: %w", repository, err)
	}
	if err := remote.WriteIndex(tag, idx, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return "", fmt.Errorf("push %s: %w", tag, err)
	}
	h, err := idx.Digest()
	if err != nil {
		return "", err
	}
	return repository + "@" + h.String(), nil
}
