// Command plumb is the GitOps controller and its CLI. main only wires things
// up: every subcommand's work lives in plumb's packages.
package main

import (
	"fmt"
	"os"
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
