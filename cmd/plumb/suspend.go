package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/appview"
	"github.com/plumb-dev/plumb/internal/syncrequest"
)

func newSuspendCommand(cluster *clusterFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "suspend APP",
		Short: "Stop the controller ticking an App (spec.suspend: true) until it is resumed",
		Long: `Stop the controller ticking an App: plumb sets spec.suspend to true. A suspended App is
not read, applied or pruned, and drift on its objects is neither healed nor reported, until
plumb resume. Use it to hold an App still during an incident; kubectl changes to its objects
then stay.`,
		Example:           `  plumb suspend web -n shop`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: cluster.completeApps,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, key, err := cluster.clientFor(args[0])
			if err != nil {
				return err
			}
			if _, err := patchApp(contextOf(cmd), c, key, map[string]any{"spec": map[string]any{"suspend": true}}); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Suspended App %s: the controller does not tick it until plumb resume %s -n %s\n", key, key.Name, key.Namespace)
			return nil
		},
	}
}

func newResumeCommand(cluster *clusterFlags) *cobra.Command {
	var f syncFlags
	cmd := &cobra.Command{
		Use:   "resume APP",
		Short: "Let the controller tick a suspended App again, starting with a sync now",
		Long: `Let the controller tick a suspended App again: plumb sets spec.suspend to false and, in
the same write, asks for a sync (as plumb sync does), so that the App's next tick reads Git
afresh and puts back what changed while it was suspended. With --wait, plumb waits for that
tick and prints its outcome, as plumb sync --wait.`,
		Example:           `  plumb resume web -n shop --wait`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: cluster.completeApps,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, key, err := cluster.clientFor(args[0])
			if err != nil {
				return err
			}
			if f.wait && f.timeout <= 0 {
				return fmt.Errorf("--timeout %s: it must be positive", f.timeout)
			}
			at := time.Now()
			request := syncrequest.RequestValue(at)
			_, err = patchApp(contextOf(cmd), c, key, map[string]any{
				"spec": map[string]any{"suspend": false},
				"metadata": map[string]any{"annotations": map[string]string{
					plumbv1.AnnotationSyncRequestedAt: request,
					plumbv1.AnnotationSyncRequestedBy: plumbv1.SyncRequestedByManual,
				}},
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Resumed App %s, and asked for a sync (request %s)\n", key, request)
			if !f.wait {
				return nil
			}
			return awaitSync(cmd, c, key, request, f.timeout)
		},
	}
	cmd.Flags().BoolVar(&f.wait, "wait", false, "wait until the controller has handled the sync, and print the outcome")
	cmd.Flags().DurationVar(&f.timeout, "timeout", 2*time.Minute, "with --wait, how long to wait")
	return cmd
}

func newTreeCommand(cluster *clusterFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "tree APP",
		Short: "Show an App's objects as a tree by namespace and kind, with drift and health",
		Long: `Show the objects an App applied (its inventory) as a tree by namespace and kind: each
object with its drift state (synced; drifted, with the fields and the managers who changed
them; or kept by the prune guard after it left Git) and its kstatus health. It reads the
App's status only.`,
		Example:           `  plumb tree web -n shop`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: cluster.completeApps,
		RunE: func(cmd *cobra.Command, args []string) error {
			_, _, app, err := cluster.app(cmd, args[0])
			if err != nil {
				return err
			}
			return appview.Tree(cmd.OutOrStdout(), app)
		},
	}
}
