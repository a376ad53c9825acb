//go:build tools

// Package tools pins Flux's notification-controller, which the end-to-end
// suite runs against the local control plane to deliver Alerts as Flux does.
// It is a module of its own so that its dependencies do not move
// kustomize-controller's (hack/tools/flux).
package tools

import _ "github.com/fluxcd/notification-controller"
