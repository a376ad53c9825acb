//go:build tools

// Package tools pins Flux's kustomize-controller, which the end-to-end suite
// runs against the local control plane to apply examples/flux as Flux would.
package tools

import _ "github.com/fluxcd/kustomize-controller"
