// Package kustomize renders and applies the operator's install bundle. The
// overlays in this directory (default/ for a cluster-wide install,
// namespaced/ for a single namespace) are built in-process with kustomize's
// krusty API, so neither tests nor `make run` need a kustomize binary.
package kustomize

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"runtime"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// Overlay names, relative to Dir().
const (
	// DefaultOverlay installs the operator cluster-wide in openmed-system.
	DefaultOverlay = "default"
	// NamespacedOverlay installs the operator into the one namespace it
	// watches, with a Role instead of a ClusterRole.
	NamespacedOverlay = "namespaced"
)

// FieldManager is the server-side apply field manager Apply uses.
const FieldManager = "openmed-install"

// Dir is the directory of this package, which holds the overlays.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}

// Build renders the kustomization in dir (a path on disk) and returns its
// objects in kustomize's output order.
func Build(dir string) ([]*unstructured.Unstructured, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	resMap, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("build kustomization %s: %w", dir, err)
	}
	objs := make([]*unstructured.Unstructured, 0, resMap.Size())
	for _, res := range resMap.Resources() {
		// A JSON round trip gives the value types unstructured expects
		// (int64, not kyaml's int), so the objects can be deep-copied.
		body, err := res.MarshalJSON()
		if err != nil {
			return nil, fmt.Errorf("build kustomization %s: %s: %w", dir, res.CurId(), err)
		}
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(body); err != nil {
			return nil, fmt.Errorf("build kustomization %s: %s: %w", dir, res.CurId(), err)
		}
		objs = append(objs, obj)
	}
	return objs, nil
}

// Apply server-side applies objs in order with strict field validation, as
// FieldManager and without forcing conflicts: a field another manager owns
// with a different value is an error, not taken over. Namespaces and CRDs
// must come before the objects that need them, as Build returns them. It
// returns the objects as the API server stored them.
func Apply(ctx context.Context, c client.Client, objs []*unstructured.Unstructured) ([]*unstructured.Unstructured, error) {
	applied := make([]*unstructured.Unstructured, 0, len(objs))
	for _, obj := range objs {
		body, err := json.Marshal(obj.Object)
		if err != nil {
			return applied, err
		}
		live := obj.DeepCopy()
		if err := c.Patch(ctx, live, client.RawPatch(types.ApplyPatchType, body),
			client.FieldOwner(FieldManager), client.FieldValidation("Strict")); err != nil {
			return applied, fmt.Errorf("apply %s %s: %w", obj.GetKind(), client.ObjectKeyFromObject(obj), err)
		}
		applied = append(applied, live)
	}
	return applied, nil
}
