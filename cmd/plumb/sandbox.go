package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/plumb-dev/plumb/internal/source/render"
)

// renderSandboxCommand is the child process the controller runs every
// Kustomize and Helm build in (see render.Isolation). Hidden: people never
// run it.
const renderSandboxCommand = "render-sandbox"

func newRenderSandboxCommand() *cobra.Command {
	return &cobra.Command{
		Use:    renderSandboxCommand,
		Short:  "Render one Kustomize or Helm build read from stdin (the controller's child process)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return render.ServeIsolated(os.Stdin, os.Stdout)
		},
	}
}
