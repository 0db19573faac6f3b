package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/appview"
)

type getFlags struct {
	allNamespaces bool
	output        string
	watch         bool
}

func newGetCommand(cluster *clusterFlags) *cobra.Command {
	get := &cobra.Command{
		Use:   "get",
		Short: "Show Apps: a table of every App, or one App in detail",
		Example: `  plumb get apps -A
  plumb get app web -n shop`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	var f getFlags
	apps := &cobra.Command{
		Use:     "apps",
		Aliases: []string{"app"},
		Short:   "List Apps: ready, revision, last tick, drift, failing phase; or one App in detail",
		Long: `List the Apps of a namespace (or of every namespace with -A), one row each: whether the
App is Ready, the revision it applied, how long ago it last ticked, how many objects are
drifted, which phase fails, and Ready's message. With a NAME, show that App in detail: each
condition, each phase's last success and failure, the last change set, drift (with who
changed what, and the drift episodes from events), health and recent events.`,
		Example: `  # Every App of every namespace
  plumb get apps -A

  # Follow the Apps of namespace shop as they tick
  plumb get apps -n shop --watch

  # One App in detail
  plumb get app web -n shop`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: cluster.completeApps,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				return getApp(cmd, cluster, args[0], f)
			}
			return getApps(cmd, cluster, f)
		},
	}
	flags := apps.Flags()
	flags.BoolVarP(&f.allNamespaces, "all-namespaces", "A", false, "list the Apps of every namespace")
	flags.StringVarP(&f.output, "output", "o", "", "output format: wide, json or yaml (default: a table; json and yaml print the Apps as the API server holds them)")
	flags.BoolVarP(&f.watch, "watch", "w", false, "after the list, print an App's row again each time it changes (Ctrl-C stops)")
	_ = apps.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"wide", "json", "yaml"}, cobra.ShellCompDirectiveNoFileComp))
	get.AddCommand(apps)
	return get
}

func getApps(cmd *cobra.Command, cluster *clusterFlags, f getFlags) error {
	switch f.output {
	case "", "wide", "json", "yaml":
	default:
		return fmt.Errorf("--output %q: use wide, json or yaml", f.output)
	}
	if f.watch && (f.output == "json" || f.output == "yaml") {
		return fmt.Errorf("--watch prints table rows: leave out -o %s", f.output)
	}
	c, err := cluster.appsClient()
	if err != nil {
		return err
	}
	var scope []client.ListOption
	namespace := ""
	if !f.allNamespaces {
		if namespace, err = cluster.namespace(); err != nil {
			return err
		}
		scope = append(scope, client.InNamespace(namespace))
	}
	ctx := contextOf(cmd)
	list := &plumbv1.AppList{}
	if err := c.List(ctx, list, scope...); err != nil {
		return explainList(err, namespace)
	}
	out := cmd.OutOrStdout()
	switch f.output {
	case "json", "yaml":
		list.APIVersion, list.Kind = plumbv1.GroupVersion.String(), "AppList"
		for i := range list.Items {
			list.Items[i].APIVersion, list.Items[i].Kind = plumbv1.GroupVersion.String(), "App"
		}
		return printObject(out, f.output, list)
	}
	opts := appview.TableOptions{AllNamespaces: f.allNamespaces, Wide: f.output == "wide", Now: time.Now()}
	if len(list.Items) == 0 && !f.watch {
		if f.allNamespaces {
			fmt.Fprintln(cmd.ErrOrStderr(), "No Apps in any namespace.")
		} else {
			fmt.Fprintf(cmd.ErrOrStderr(), "No Apps in namespace %s.\n", namespace)
		}
		return nil
	}
	if err := appview.Table(out, list.Items, opts); err != nil {
		return err
	}
	if !f.watch {
		return nil
	}
	opts.NoHeaders = true
	pause := time.Second
	for resourceVersion := list.ResourceVersion; ; {
		next, err := watchApps(ctx, c, scope, namespace, resourceVersion, out, opts)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil && (apierrors.IsForbidden(err) || errors.Is(err, errNoCRD) || apierrors.IsUnauthorized(err)):
			return err
		case err != nil:
			// The API server may be restarting: watch again, less often.
			fmt.Fprintf(cmd.ErrOrStderr(), "Watching again in %s: %s\n", pause, appview.Printable(err.Error()))
			pause = min(2*pause, 30*time.Second)
		default:
			resourceVersion, pause = next, time.Second
		}
		select { // the watch ended: a moment before the next one
		case <-ctx.Done():
			return nil
		case <-time.After(pause):
		}
	}
}

// watchApps prints a row for each change of an App until the watch ends;
// it returns the resourceVersion to watch from next ("" to list afresh,
// after the API server said the version is too old).
func watchApps(ctx context.Context, c client.WithWatch, scope []client.ListOption, namespace, resourceVersion string, out io.Writer,
	opts appview.TableOptions) (string, error) {
	watcher, err := c.Watch(ctx, &plumbv1.AppList{}, append(scope, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: resourceVersion}})...)
	if err != nil {
		return resourceVersion, explainList(err, namespace)
	}
	defer watcher.Stop()
	for event := range watcher.ResultChan() {
		switch event.Type {
		case watch.Error:
			if status, ok := event.Object.(*metav1.Status); ok && status.Code == http.StatusGone {
				return "", nil // too old: watch from now
			}
			return "", fmt.Errorf("watching Apps: %v", apierrors.FromObject(event.Object))
		case watch.Added, watch.Modified, watch.Deleted:
		default:
			continue
		}
		app, ok := event.Object.(*plumbv1.App)
		if !ok {
			continue
		}
		resourceVersion = app.ResourceVersion
		row := opts
		row.Now, row.Deleted = time.Now(), event.Type == watch.Deleted
		if err := appview.Table(out, []plumbv1.App{*app}, row); err != nil {
			return "", err
		}
	}
	return resourceVersion, nil // the API server closed the watch: go on from where it was
}

func getApp(cmd *cobra.Command, cluster *clusterFlags, name string, f getFlags) error {
	if f.watch || f.allNamespaces {
		return fmt.Errorf("--watch and -A list Apps: leave out the App's name")
	}
	c, _, app, err := cluster.app(cmd, name)
	if err != nil {
		return err
	}
	ctx := contextOf(cmd)
	switch f.output {
	case "json", "yaml":
		app.APIVersion, app.Kind = plumbv1.GroupVersion.String(), "App"
		return printObject(cmd.OutOrStdout(), f.output, app)
	case "", "wide":
	default:
		return fmt.Errorf("--output %q: use json or yaml", f.output)
	}
	events := &corev1.EventList{}
	selector := fields.SelectorFromSet(fields.Set{"involvedObject.kind": "App", "involvedObject.name": app.Name, "involvedObject.uid": string(app.UID)})
	if err := c.List(ctx, events, client.InNamespace(app.Namespace), client.MatchingFieldsSelector{Selector: selector}); err != nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "Warning: the App's events could not be read: %s\n", apiMessage(err))
	}
	return appview.Detail(cmd.OutOrStdout(), app, appview.SortEvents(events.Items, 20), time.Now())
}

// printObject prints obj as JSON or YAML.
func printObject(w io.Writer, format string, obj any) error {
	data, err := json.MarshalIndent(obj, "", "  ")
	if err != nil {
		return err
	}
	if format == "yaml" {
		if data, err = yaml.JSONToYAML(data); err != nil {
			return err
		}
	} else {
		data = append(data, '\n')
	}
	_, err = w.Write(data)
	return err
}
