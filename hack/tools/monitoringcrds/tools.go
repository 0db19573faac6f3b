//go:build tools

// Package tools pins controller-gen and the Prometheus Operator's API
// types that it generates the CRDs from.
package tools

import (
	_ "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	_ "sigs.k8s.io/controller-tools/cmd/controller-gen"
)
