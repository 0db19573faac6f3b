//go:build tools

// Tool module: builds cosign (Sigstore's signing tool), with which the OCI
// source tests sign artifacts as a publisher would. Never imported by plumb
// itself.
package tools

import _ "github.com/sigstore/cosign/v2/cmd/cosign"
