// Package examples holds the small real apps that `make demo` pushes to a
// local Git server and lets plumb apply: shop/ is a Namespace, a Deployment,
// a Service and two ConfigMaps.
package examples

import "embed"

// Shop is the files of shop/.
//
//go:embed shop/*.yaml
var Shop embed.FS
