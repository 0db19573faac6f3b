//go:build tools

// Package tools pins the kwok command that hack/controlplane.sh builds.
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
