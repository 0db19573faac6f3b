package main

import (
	"github.com/spf13/cobra"
)

// newRootCommand builds the plumb command tree.
func newRootCommand(info buildInfo) *cobra.Command {
	root := &cobra.Command{
		Use:   "plumb",
		Short: "plumb keeps a Kubernetes cluster equal to what Git says",
		Long: "plumb is a GitOps controller: it reads the desired state from Git, observes the live state\n" +
			"from informer caches, diffs the two and applies the difference with server-side apply.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newVersionCommand(info), newControllerCommand(), newRenderSandboxCommand())
	// The operator's commands share kubectl's cluster flags.
	cluster := newClusterFlags()
	operator := []*cobra.Command{newGetCommand(cluster), newDiffCommand(cluster), newSyncCommand(cluster),
		newTreeCommand(cluster), newSuspendCommand(cluster), newResumeCommand(cluster), newUICommand(cluster)}
	for _, cmd := range operator {
		cluster.addTo(cmd)
	}
	root.AddCommand(operator...)
	return root
}
