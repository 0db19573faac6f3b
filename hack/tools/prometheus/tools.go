//go:build tools

// Package tools pins the promtool command that hack/tools.sh builds.
package tools

import _ "github.com/prometheus/prometheus/cmd/promtool"
