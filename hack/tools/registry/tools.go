//go:build tools

// Tool module: builds the CNCF Distribution registry (an OCI registry) that
// the OCI source tests push to and read from. Never imported by plumb itself.
package tools

import _ "github.com/distribution/distribution/v3/cmd/registry"
