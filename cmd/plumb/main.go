// Command plumb is the GitOps controller and its CLI. main only wires things
// up: every subcommand's work lives in plumb's packages.
package main

import (
	"fmt"
	"os"

	// Mozilla's root certificates, which Go uses only where the system has
	// none: plumb's image has an empty base, and its https:// Git fetches
	// and notification sinks must still verify their servers.
	_ "golang.org/x/crypto/x509roots/fallback"
)

// Set by the linker (see the Makefile's LDFLAGS); the defaults mark a build
// made without them.
var (
	version = "dev"
	commit  = "unknown"
)

func main() {
	root := newRootCommand(buildInfo{Version: version, Commit: commit})
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}
