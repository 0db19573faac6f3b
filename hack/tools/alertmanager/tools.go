//go:build tools

// Package tools pins the alertmanager command that hack/tools.sh builds.
package tools

import _ "github.com/prometheus/alertmanager/cmd/alertmanager"
