//go:build tools

// Package tools pins controller-gen, which `make generate` runs.
package tools

import _ "sigs.k8s.io/controller-tools/cmd/controller-gen"
