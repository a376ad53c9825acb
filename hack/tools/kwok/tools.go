//go:build tools

// Package tools pins kwok, which fakes nodes and pod lifecycles for the local control plane.
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
