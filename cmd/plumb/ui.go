package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/preview"
	"github.com/plumb-dev/plumb/internal/reconcile"
	"github.com/plumb-dev/plumb/internal/source"
	"github.com/plumb-dev/plumb/internal/ui"
)

// uiFlags are plumb ui's flags.
type uiFlags struct {
	endpoint ui.Endpoint
	// proxy mode
	userHeader, groupsHeader string
	userPrefix, groupsPrefix string
	// the controller's lockdown and limits, for previews
	policy            reconcile.Policy
	limits            source.Limits
	renderTimeout     time.Duration
	renderMemoryBytes uint64
	maxPreviews       int
	allowPlugins      bool
	destinations      blockedRanges
}

func newUICommand(cluster *clusterFlags) *cobra.Command {
	f := uiFlags{endpoint: ui.Endpoint{Addr: "127.0.0.1:9400"}, limits: source.DefaultLimits()}
	cmd := &cobra.Command{
		Use:   "ui",
		Short: "Serve the web dashboard, with your kubeconfig's rights (or, behind a proxy, each user's)",
		Long: `Serve plumb's web dashboard. Every page is read, and every action (Sync, Suspend, Resume)
made, with your kubeconfig's identity, so the API server's RBAC decides what you see and may
do. The App page's diff is the preview plumb diff shows. plumb opens no browser: it prints
the URL, which holds a session token (other users of this machine can reach its port too):
a browser that opens it gets a session cookie, and a request without it is refused.
PLUMB_UI_TOKEN sets the token (to keep the URL across restarts). It serves only on a
loopback address, and answers only to that address and localhost, so that no other site's
name can reach it.

With --proxy it serves many people from inside the cluster, behind an authenticating proxy
(oauth2-proxy, for instance): each request acts, by impersonation, for the user and groups
the proxy's headers name, and those headers are believed only on requests from the proxy:
over a Unix socket (--addr unix:///PATH, which a proxy in the same pod shares and kubectl
port-forward cannot reach), with the shared secret of --proxy-secret-file in the
X-Plumb-Proxy-Secret header, from --trusted-proxy addresses (never loopback: a port-forward
arrives from there), or with a client certificate signed by --client-ca-file; any other
request is refused. Its own identity needs impersonate on users and groups, create on
subjectaccessreviews, and list and watch on Apps.`,
		Example: `  plumb ui
  plumb ui --addr 127.0.0.1:9400 --context prod

  # In the cluster, behind oauth2-proxy in the same pod (--upstream=unix:///run/plumb-dashboard/ui.sock)
  plumb ui --proxy --addr unix:///run/plumb-dashboard/ui.sock`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runUI(cmd, cluster, f) },
	}
	flags := cmd.Flags()
	flags.StringVar(&f.endpoint.Addr, "addr", f.endpoint.Addr, "address to serve the dashboard on (keep it on loopback unless --proxy: it acts with your rights)")
	flags.BoolVar(&f.endpoint.Proxy, "proxy", false, "serve behind an authenticating proxy, acting for the user its headers name")
	flags.StringSliceVar(&f.endpoint.TrustedProxies, "trusted-proxy", nil, "with --proxy: an address or CIDR the proxy connects from (repeatable); only its headers are believed")
	flags.StringVar(&f.userHeader, "user-header", "X-Forwarded-User", "with --proxy: the header naming the authenticated user")
	flags.StringVar(&f.groupsHeader, "groups-header", "X-Forwarded-Groups", "with --proxy: the header naming the user's groups (comma-separated)")
	flags.StringVar(&f.endpoint.TLSCertFile, "tls-cert-file", "", "serve HTTPS with this certificate (and --tls-key-file)")
	flags.StringVar(&f.endpoint.TLSKeyFile, "tls-key-file", "", "the key of --tls-cert-file")
	flags.StringVar(&f.endpoint.ClientCAFile, "client-ca-file", "", "with --proxy and TLS: believe the headers of connections whose client certificate this CA signed and --client-cert-name names (mutual TLS with the proxy)")
	flags.StringSliceVar(&f.endpoint.ClientCertNames, "client-cert-name", nil, "with --client-ca-file: the proxy's certificate's common name or DNS name (repeatable)")
	flags.StringVar(&f.userPrefix, "user-prefix", "", "with --proxy: put before the user the proxy names (as the API server's --oidc-username-prefix), so that its logins are no other authenticator's users")
	flags.StringVar(&f.groupsPrefix, "groups-prefix", "", "with --proxy: put before each group the proxy names (as --oidc-groups-prefix)")
	flags.StringVar(&f.endpoint.ProxySecretFile, "proxy-secret-file", "", "with --proxy: a file holding a secret that the proxy sends in the X-Plumb-Proxy-Secret header: requests with it are the proxy's")
	flags.BoolVar(&f.policy.NoCrossNamespace, "no-cross-namespace", false, "preview (the App page's diff) as a controller run with --no-cross-namespace ticks")
	flags.BoolVar(&f.policy.NoRemoteClusters, "no-remote-clusters", false, "preview as a controller run with --no-remote-clusters ticks: an App naming another cluster fails")
	flags.BoolVar(&f.policy.AllowInsecureRegistries, "allow-insecure-registries", false, "preview as a controller run with --allow-insecure-registries ticks: an OCI, Helm or bucket App may read its registry, repository or S3 server over plain HTTP, and a chart its dependencies")
	flags.StringVar(&f.policy.DefaultServiceAccount, "default-service-account", "", "preview as a controller run with --default-service-account ticks (with --proxy, the App page says such Apps cannot be previewed: Kubernetes impersonates once)")
	flags.IntVar(&f.limits.MaxFiles, "max-repository-files", f.limits.MaxFiles, "previews: the controller's --max-repository-files")
	flags.Int64Var(&f.limits.MaxTotalBytes, "max-repository-bytes", f.limits.MaxTotalBytes, "previews: the controller's --max-repository-bytes")
	flags.Int64Var(&f.limits.MaxFileBytes, "max-file-bytes", f.limits.MaxFileBytes, "previews: the controller's --max-file-bytes")
	flags.IntVar(&f.limits.MaxObjects, "max-objects", f.limits.MaxObjects, "previews: the controller's --max-objects")
	flags.Int64Var(&f.limits.MaxFetchBytes, "max-fetch-bytes", f.limits.MaxFetchBytes, "previews: the controller's --max-fetch-bytes")
	flags.DurationVar(&f.renderTimeout, "render-timeout", source.DefaultRenderTimeout, "previews: how long one Kustomize or Helm build may take")
	flags.Uint64Var(&f.renderMemoryBytes, "render-memory-bytes", preview.DefaultRenderMemoryBytes, "previews: memory one Kustomize or Helm build's process may take, in bytes")
	flags.BoolVar(&f.allowPlugins, "allow-kubeconfig-plugins", false, "preview as a controller run with --allow-kubeconfig-plugins ticks: a destination's kubeconfig may run an exec credential plugin or an auth-provider, here")
	f.destinations.register(flags, "destination", "destination cluster's API server",
		"previews: the controller's --destination-blocked-cidrs")
	flags.IntVar(&f.maxPreviews, "max-previews", ui.DefaultMaxPreviews, "how many previews (App pages' diffs) run at once, for everyone: each may take --render-memory-bytes")
	return cmd
}

// validate checks plumb ui's flags before anything starts.
func (f uiFlags) validate() error {
	if err := f.endpoint.Validate(); err != nil {
		return err
	}
	if err := f.limits.Validate(); err != nil {
		return err
	}
	if f.renderTimeout <= 0 || f.renderMemoryBytes < 256<<20 || f.maxPreviews < 1 {
		return errors.New("--render-timeout must be positive, --render-memory-bytes at least 256 MiB and --max-previews at least 1")
	}
	_, err := f.destinations.prefixes()
	return err
}

func runUI(cmd *cobra.Command, cluster *clusterFlags, f uiFlags) error {
	if err := f.validate(); err != nil {
		return err
	}
	e := f.endpoint
	socket, onSocket := e.Socket()
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
	blocked, _ := f.destinations.prefixes() // validated above
	newPreview := func(cfg *rest.Config, dir string) (ui.PreviewFunc, error) {
		previewer, err := preview.New(preview.Options{Config: cfg, GitCacheDir: dir, Policy: f.policy, Limits: &f.limits,
			RenderCommand: []string{self, renderSandboxCommand}, RenderTimeout: f.renderTimeout, RenderMemoryBytes: f.renderMemoryBytes,
			AllowKubeConfigPlugins: f.allowPlugins, DestinationBlocked: blocked})
		if err != nil {
			return nil, err
		}
		return previewer.Preview, nil
	}

	ctx, stop := signal.NotifyContext(contextOf(cmd), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	apps, namespaces, scope, err := liveApps(ctx, cluster, c)
	if err != nil {
		return err
	}
	opts := ui.Options{AppsNamespaces: namespaces, MaxPreviews: f.maxPreviews}
	if apps != nil {
		opts.Apps = apps
	}
	trusted, secret, tlsConfig, err := e.ProxyTrust()
	if err != nil {
		return err
	}
	if e.Proxy {
		identity, err := ui.NewProxy(ui.ProxyOptions{Config: cfg, Scheme: c.Scheme(), Mapper: c.RESTMapper(),
			UserHeader: f.userHeader, GroupsHeader: f.groupsHeader, UserPrefix: f.userPrefix, GroupsPrefix: f.groupsPrefix,
			TrustedProxies: trusted, ClientCertNames: e.ClientCertNames, Socket: onSocket, Secret: secret,
			NewPreview: newPreview, GitCacheDir: cacheDir})
		if err != nil {
			return fmt.Errorf("--proxy: %w (serve on --addr unix:///PATH, or give --proxy-secret-file, --trusted-proxy or --client-ca-file)", err)
		}
		opts.Identity = identity
	} else {
		previewApp, err := newPreview(cfg, cacheDir)
		if err != nil {
			return err
		}
		opts.Identity = ui.Local{Viewer: &ui.Viewer{Name: "you", Key: "local", Client: c, Preview: previewApp}}
		if opts.Token = os.Getenv("PLUMB_UI_TOKEN"); opts.Token == "" {
			if opts.Token, err = randomToken(); err != nil {
				return err
			}
		}
	}

	listener, err := e.Listen()
	if err != nil {
		return err
	}
	opts.AllowedHosts = e.AllowedHosts(listener)
	server, err := ui.New(opts)
	if err != nil {
		return err
	}
	if apps != nil {
		go func() { _ = apps.Start(ctx) }()
	}
	srv := &http.Server{Handler: server.Handler(), ReadHeaderTimeout: 10 * time.Second, TLSConfig: tlsConfig, ConnContext: ui.SocketConnContext}
	srv.RegisterOnShutdown(server.Close)
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	scheme, mode := "http", ""
	if tlsConfig != nil {
		scheme = "https"
	}
	if e.Proxy {
		mode = " behind an authenticating proxy (" + f.userHeader + " believed from " + strings.Join(e.ProxyKnownBy(), ", ") + ")"
	}
	query := ""
	if opts.Token != "" {
		query = "?token=" + opts.Token
	}
	where := scheme + "://" + listener.Addr().String() + "/"
	if onSocket {
		where = "unix://" + socket
	}
	fmt.Fprintf(cmd.OutOrStdout(), "Serving the dashboard at %s%s%s (Ctrl-C stops); live updates: %s\n", where, query, mode, scope)
	if tlsConfig != nil {
		err = srv.ServeTLS(listener, e.TLSCertFile, e.TLSKeyFile)
	} else {
		err = srv.Serve(listener)
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// liveApps is the cache whose App informer feeds the dashboard's live
// stream, read with the identity the dashboard runs as: every namespace's
// Apps when it may watch them all, else those of the kubeconfig's
// namespace (-n).
func liveApps(ctx context.Context, cluster *clusterFlags, c client.Client) (cache.Cache, []string, string, error) {
	cfg, err := cluster.restConfig()
	if err != nil {
		return nil, nil, "", err
	}
	review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{Group: plumbv1.GroupVersion.Group, Resource: "apps", Verb: "watch"}}}
	if err := c.Create(ctx, review); err != nil {
		return nil, nil, "", fmt.Errorf("asking the API server whether you may watch Apps: %s", apiMessage(err))
	}
	opts := cache.Options{Scheme: c.Scheme(), Mapper: c.RESTMapper()}
	scope := "Apps of every namespace"
	var namespaces []string
	if !review.Status.Allowed {
		ns, err := cluster.namespace()
		if err != nil {
			return nil, nil, "", err
		}
		review.Spec.ResourceAttributes.Namespace = ns
		if err := c.Create(ctx, review); err != nil {
			return nil, nil, "", fmt.Errorf("asking the API server whether you may watch Apps in %s: %s", ns, apiMessage(err))
		}
		if !review.Status.Allowed {
			return nil, nil, "none (you may watch Apps neither in every namespace nor in " + ns + "; -n picks another)", nil
		}
		opts.DefaultNamespaces = map[string]cache.Config{ns: {}}
		namespaces = []string{ns}
		scope = "Apps of namespace " + ns + " (you may not watch Apps in every namespace; -n picks another)"
	}
	apps, err := cache.New(cfg, opts)
	if err != nil {
		return nil, nil, "", err
	}
	return apps, namespaces, scope, nil
}

// randomToken is the secret of a plumb ui session.
func randomToken() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}
