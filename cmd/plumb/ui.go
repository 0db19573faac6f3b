package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	authorizationv1 "k8s.io/api/authorization/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"

	"github.com/plumb-dev/plumb/preview"
	"github.com/plumb-dev/plumb/ui"
)

func newUICommand(cluster *clusterFlags) *cobra.Command {
	addr := "127.0.0.1:9400"
	cmd := &cobra.Command{
		Use:   "ui",
		Short: "Serve the web dashboard on this machine, with your kubeconfig's rights",
		Long: `Serve plumb's web dashboard locally. Every page is read, and every action (Sync, Suspend,
Resume) made, with your kubeconfig's identity, so the API server's RBAC decides what you see
and may do. The App page's diff is the preview plumb diff shows, made on this machine.
plumb opens no browser: it prints the URL. It answers only to the address it serves on
(and localhost, on loopback), so that no other site's name can reach it.`,
		Example: `  plumb ui
  plumb ui --addr 127.0.0.1:9400 --context prod`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			host, port, err := net.SplitHostPort(addr)
			if err != nil {
				return fmt.Errorf("--addr %q: %w", addr, err)
			}
			if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
				return fmt.Errorf("--addr %q serves every interface: the dashboard acts with your rights, so give the one address to serve on (127.0.0.1:%s)", addr, port)
			}
			c, err := cluster.appsClient()
			if err != nil {
				return err
			}
			cfg, err := cluster.restConfig()
			if err != nil {
				return err
			}
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("finding plumb's own binary, which renders Kustomize and Helm builds in a child process: %w", err)
			}
			cacheDir, err := os.MkdirTemp("", "plumb-ui-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(cacheDir)
			previewer, err := preview.New(preview.Options{Config: cfg, GitCacheDir: cacheDir, RenderCommand: []string{self, renderSandboxCommand}})
			if err != nil {
				return err
			}
			listener, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("listening on %s: %w (pick another with --addr)", addr, err)
			}
			_, port, _ = net.SplitHostPort(listener.Addr().String())
			allowed := []string{net.JoinHostPort(host, port)}
			if ip := net.ParseIP(host); host == "localhost" || (ip != nil && ip.IsLoopback()) {
				allowed = append(allowed, net.JoinHostPort("localhost", port), net.JoinHostPort("127.0.0.1", port), net.JoinHostPort("::1", port))
			}
			ctx, stop := signal.NotifyContext(contextOf(cmd), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			apps, scope, err := liveApps(ctx, cluster, c)
			if err != nil {
				return err
			}
			server, err := ui.New(ui.Options{
				Identity:     ui.Local{Viewer: &ui.Viewer{Name: "you", Client: c, Preview: previewer.Preview}},
				AllowedHosts: allowed,
				Apps:         apps,
			})
			if err != nil {
				return err
			}
			go func() { _ = apps.Start(ctx) }()
			srv := &http.Server{Handler: server.Handler(), ReadHeaderTimeout: 10 * time.Second}
			srv.RegisterOnShutdown(server.Close)
			go func() {
				<-ctx.Done()
				shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = srv.Shutdown(shutdown)
			}()
			fmt.Fprintf(cmd.OutOrStdout(), "Serving the dashboard at http://%s/ (Ctrl-C stops); live updates: %s\n", listener.Addr(), scope)
			if err := srv.Serve(listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&addr, "addr", addr, "address to serve the dashboard on (keep it on loopback: it acts with your rights)")
	return cmd
}

// liveApps is the cache whose App informer feeds the dashboard's live
// stream, read with the user's identity: every namespace's Apps when they
// may list them all, else those of the kubeconfig's namespace (-n).
func liveApps(ctx context.Context, cluster *clusterFlags, c client.Client) (cache.Cache, string, error) {
	cfg, err := cluster.restConfig()
	if err != nil {
		return nil, "", err
	}
	review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{Group: plumbv1.GroupVersion.Group, Resource: "apps", Verb: "watch"}}}
	if err := c.Create(ctx, review); err != nil {
		return nil, "", fmt.Errorf("asking the API server whether you may watch Apps: %s", apiMessage(err))
	}
	opts := cache.Options{Scheme: c.Scheme()}
	scope := "Apps of every namespace"
	if !review.Status.Allowed {
		ns, err := cluster.namespace()
		if err != nil {
			return nil, "", err
		}
		opts.DefaultNamespaces = map[string]cache.Config{ns: {}}
		scope = "Apps of namespace " + ns + " (you may not watch Apps in every namespace; -n picks another)"
	}
	apps, err := cache.New(cfg, opts)
	if err != nil {
		return nil, "", err
	}
	return apps, scope, nil
}
