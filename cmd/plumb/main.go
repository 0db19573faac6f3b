// Command plumb is the GitOps controller and its CLI. main only wires things
// up: every subcommand's work lives in plumb's packages.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/plumb-dev/plumb/internal/appview"

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
		code := 1
		var exit *exitError
		if errors.As(err, &exit) {
			code, err = exit.code, exit.err
		}
		if err != nil {
			// Messages may quote what others wrote (a render's failure,
			// a webhook's denial): no escape sequence reaches the terminal.
			fmt.Fprintln(os.Stderr, "Error:", appview.Printable(err.Error()))
		}
		os.Exit(code)
	}
}

// exitError ends plumb with its exit status, and prints err when there is
// one (plumb diff's 1, "the cluster differs from Git", prints nothing).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }
