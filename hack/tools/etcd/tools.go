//go:build tools

// Package tools pins the etcd server used by the test control plane.
package tools

import _ "go.etcd.io/etcd/server/v3"
