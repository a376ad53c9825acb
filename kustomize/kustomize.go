// Package kustomize renders and applies the operator's install bundle. The
// overlays in this directory (default/ for a cluster-wide install,
// namespaced/ for a single namespace, lockdown/ for a cluster-wide install
// whose writes are all made as the models' ServiceAccounts) are built in-process with kustomize's
// krusty API, so neither tests nor `make run` need a kustomize binary.
package kustomize

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"time"

	"github.com/fluxcd/cli-utils/pkg/kstatus/polling"
	"github.com/fluxcd/pkg/ssa"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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
	// LockdownOverlay is the cluster-wide install for many tenants: the
	// operator may write no Deployment or ConfigMap itself, and makes every
	// write for a model as a ServiceAccount of the model's namespace
	// (--default-service-account=default).
	LockdownOverlay = "lockdown"
)

// FieldManager is the server-side apply field manager Apply uses (Flux's
// ssa package records it as the owner of the applied fields).
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

// Apply server-side applies objs the way Flux's kustomize-controller applies
// a bundle (fluxcd/pkg/ssa): cluster definitions first (CRDs, ClusterRoles,
// Namespaces), waiting until the CRDs are established, then the rest, each
// object only when a dry run shows a change, as FieldManager. It returns
// what changed per object.
func Apply(ctx context.Context, c client.Client, objs []*unstructured.Unstructured) (*ssa.ChangeSet, error) {
	poller := polling.NewStatusPoller(c, c.RESTMapper(), polling.Options{})
	rm := ssa.NewResourceManager(c, poller, ssa.Owner{Field: FieldManager, Group: "openmed.ai"})
	opts := ssa.DefaultApplyOptions()
	opts.WaitInterval = 200 * time.Millisecond
	copies := make([]*unstructured.Unstructured, len(objs))
	for i, o := range objs {
		copies[i] = o.DeepCopy()
	}
	cs, err := rm.ApplyAllStaged(ctx, copies, opts)
	if err != nil {
		return cs, fmt.Errorf("apply the install bundle: %w", err)
	}
	return cs, nil
}
