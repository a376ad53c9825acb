//go:build tools

// Package tools pins promtool, which checks and unit-tests the Prometheus
// rules in examples/monitoring.
package tools

import _ "github.com/prometheus/prometheus/cmd/promtool"
