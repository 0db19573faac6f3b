//go:build tools

// Tool module: builds versitygw (Versity's S3 gateway, on its POSIX
// backend), the real S3 server of the bucket source tests. Never imported
// by plumb itself.
package tools

import _ "github.com/versity/versitygw/cmd/versitygw"
