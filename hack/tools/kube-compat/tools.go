//go:build tools

// Package tools pins the Kubernetes control-plane binaries of the oldest
// supported minor, which `make test-compat` runs the core tests against.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
