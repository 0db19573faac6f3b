package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/appview"
	"github.com/plumb-dev/plumb/internal/syncrequest"
)

type syncFlags struct {
	wait    bool
	timeout time.Duration
}

func newSyncCommand(cluster *clusterFlags) *cobra.Command {
	var f syncFlags
	cmd := &cobra.Command{
		Use:   "sync APP",
		Short: "Ask the controller for a tick of an App now, with a fresh read of Git",
		Long: `Ask the controller for a tick of an App now: plumb writes the App's sync annotation
(plumb.dev/sync-requested-at), which the controller's leader turns into a tick that reads
Git afresh. With --wait, plumb waits until the App's status says that very request was
handled (and, when the tick left objects rolling out, until their health is judged), then
prints what the tick changed and the revision it applied.

Exit status: 0 when the request was made (with --wait: when the App is Ready); 1 when the
App is suspended, the tick failed (the phase and its message are printed), or --timeout
passed.`,
		Example: `  # Sync App web of namespace shop and wait for the outcome
  plumb sync web -n shop --wait

  # Only ask; the controller ticks it in the background
  plumb sync web -n shop`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: cluster.completeApps,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSync(cmd, cluster, args[0], f)
		},
	}
	cmd.Flags().BoolVar(&f.wait, "wait", false, "wait until the controller has handled this request, and print the outcome")
	cmd.Flags().DurationVar(&f.timeout, "timeout", 2*time.Minute, "with --wait, how long to wait")
	return cmd
}

func runSync(cmd *cobra.Command, cluster *clusterFlags, name string, f syncFlags) error {
	if f.timeout <= 0 {
		return fmt.Errorf("--timeout %s: it must be positive", f.timeout)
	}
	c, key, app, err := cluster.app(cmd, name)
	if err != nil {
		return err
	}
	ctx := contextOf(cmd)
	if app.Spec.Suspend {
		return fmt.Errorf("App %s is suspended: the controller does not tick it (plumb resume %s -n %s resumes it, and syncs it)", key, key.Name, key.Namespace)
	}
	at := time.Now()
	if err := syncrequest.Annotate(ctx, c, key, at, plumbv1.SyncRequestedByManual); err != nil {
		return explain(err, key)
	}
	request := syncrequest.RequestValue(at)
	if !f.wait {
		fmt.Fprintf(cmd.OutOrStdout(), "Asked for a sync of App %s (request %s); plumb get app %s -n %s shows when it is handled\n",
			key, request, key.Name, key.Namespace)
		return nil
	}
	return awaitSync(cmd, c, key, request, f.timeout)
}

// awaitSync waits for the controller to handle request and prints the
// outcome.
func awaitSync(cmd *cobra.Command, c client.Reader, key types.NamespacedName, request string, timeout time.Duration) error {
	fmt.Fprintf(cmd.ErrOrStderr(), "Waiting for the controller to handle the sync of App %s (request %s)...\n", key, request)
	ctx, cancel := context.WithTimeout(contextOf(cmd), timeout)
	defer cancel()
	app, err := syncrequest.Await(ctx, c, key, request, 250*time.Millisecond)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			if app != nil && syncrequest.Answers(app.Status.LastHandledSyncRequest, request, syncrequest.Requested(app)) {
				return fmt.Errorf("the sync was handled, but the App's objects were still rolling out after %s (plumb get app %s -n %s shows them)", timeout, key.Name, key.Namespace)
			}
			return fmt.Errorf("the controller did not handle the sync within %s: is plumb's controller running, and does it watch this App (its --app-label-selector and --watch-namespaces)?", timeout)
		}
		return explain(err, key)
	}
	if app.Spec.Suspend {
		return fmt.Errorf("App %s was suspended before the controller ticked it: nothing was synced (plumb resume %s -n %s)", key, key.Name, key.Namespace)
	}
	text, outcome := appview.Outcome(app)
	fmt.Fprint(cmd.OutOrStdout(), text)
	return outcome
}

// patchApp merge-patches the App (its spec, its annotations) and
// returns it as the API server answered.
func patchApp(ctx context.Context, c client.Client, key types.NamespacedName, patch map[string]any) (*plumbv1.App, error) {
	data, err := json.Marshal(patch)
	if err != nil {
		return nil, err
	}
	app := &plumbv1.App{}
	app.Namespace, app.Name = key.Namespace, key.Name
	if err := c.Patch(ctx, app, client.RawPatch(types.MergePatchType, data)); err != nil {
		return nil, explain(err, key)
	}
	return app, nil
}
