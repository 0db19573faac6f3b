package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// buildInfo identifies a plumb binary.
type buildInfo struct {
	// Version is plumb's version (git describe), "dev" when built without it.
	Version string
	// Commit is the git commit plumb was built from.
	Commit string
}

func newVersionCommand(info buildInfo) *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "Print plumb's version and commit, and the Go and client-go versions it was built with",
		Example: "  plumb version",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return writeVersion(cmd.OutOrStdout(), info)
		},
	}
}

func writeVersion(w io.Writer, info buildInfo) error {
	_, err := fmt.Fprintf(w, "plumb:     %s\ncommit:    %s\ngo:        %s\nclient-go: %s\n",
		info.Version, info.Commit, runtime.Version(), moduleVersion("k8s.io/client-go"))
	return err
}

// moduleVersion is the version of a dependency compiled into this binary.
func moduleVersion(path string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	for _, dep := range bi.Deps {
		if dep.Path == path {
			if dep.Replace != nil {
				return dep.Replace.Version
			}
			return dep.Version
		}
	}
	return "unknown"
}
