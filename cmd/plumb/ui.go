package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
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
	"github.com/plumb-dev/plumb/preview"
	"github.com/plumb-dev/plumb/reconcile"
	"github.com/plumb-dev/plumb/ui"
)

// uiFlags are plumb ui's flags.
type uiFlags struct {
	addr string
	// proxy mode
	proxy                     bool
	trustedProxies            []string
	userHeader, groupsHeader  string
	tlsCert, tlsKey, clientCA string
}

func newUICommand(cluster *clusterFlags) *cobra.Command {
	f := uiFlags{addr: "127.0.0.1:9400"}
	cmd := &cobra.Command{
		Use:   "ui",
		Short: "Serve the web dashboard, with your kubeconfig's rights (or, behind a proxy, each user's)",
		Long: `Serve plumb's web dashboard. Every page is read, and every action (Sync, Suspend, Resume)
made, with your kubeconfig's identity, so the API server's RBAC decides what you see and may
do. The App page's diff is the preview plumb diff shows. plumb opens no browser: it prints
the URL. It answers only to the address it serves on (and localhost, on loopback), so that
no other site's name can reach it.

With --proxy it serves many people from inside the cluster, behind an authenticating proxy
(oauth2-proxy, for instance): each request acts, by impersonation, for the user and groups
the proxy's headers name, and those headers are believed only on connections from the proxy
(--trusted-proxy addresses, or a client certificate signed by --client-ca-file); any other
request is refused. Its own identity needs impersonate on users and groups, create on
subjectaccessreviews, and list and watch on Apps.`,
		Example: `  plumb ui
  plumb ui --addr 127.0.0.1:9400 --context prod

  # In the cluster, behind oauth2-proxy in the same pod
  plumb ui --proxy --addr 127.0.0.1:9400 --trusted-proxy 127.0.0.1/32`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runUI(cmd, cluster, f) },
	}
	flags := cmd.Flags()
	flags.StringVar(&f.addr, "addr", f.addr, "address to serve the dashboard on (keep it on loopback unless --proxy: it acts with your rights)")
	flags.BoolVar(&f.proxy, "proxy", false, "serve behind an authenticating proxy, acting for the user its headers name")
	flags.StringSliceVar(&f.trustedProxies, "trusted-proxy", nil, "with --proxy: an address or CIDR the proxy connects from (repeatable); only its headers are believed")
	flags.StringVar(&f.userHeader, "user-header", "X-Forwarded-User", "with --proxy: the header naming the authenticated user")
	flags.StringVar(&f.groupsHeader, "groups-header", "X-Forwarded-Groups", "with --proxy: the header naming the user's groups (comma-separated)")
	flags.StringVar(&f.tlsCert, "tls-cert-file", "", "serve HTTPS with this certificate (and --tls-key-file)")
	flags.StringVar(&f.tlsKey, "tls-key-file", "", "the key of --tls-cert-file")
	flags.StringVar(&f.clientCA, "client-ca-file", "", "with --proxy and TLS: believe the headers of connections whose client certificate this CA signed (mutual TLS with the proxy)")
	return cmd
}

func runUI(cmd *cobra.Command, cluster *clusterFlags, f uiFlags) error {
	host, port, err := net.SplitHostPort(f.addr)
	if err != nil {
		return fmt.Errorf("--addr %q: %w", f.addr, err)
	}
	if ip := net.ParseIP(host); !f.proxy && (host == "" || (ip != nil && ip.IsUnspecified())) {
		return fmt.Errorf("--addr %q serves every interface: the dashboard acts with your rights, so give the one address to serve on (127.0.0.1:%s)", f.addr, port)
	}
	if (f.tlsCert == "") != (f.tlsKey == "") {
		return errors.New("--tls-cert-file and --tls-key-file go together")
	}
	if f.clientCA != "" && (!f.proxy || f.tlsCert == "") {
		return errors.New("--client-ca-file needs --proxy and --tls-cert-file: it names the proxy's certificates")
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
	newPreview := func(cfg *rest.Config, dir string) (func(context.Context, *plumbv1.App) (*reconcile.Preview, error), error) {
		previewer, err := preview.New(preview.Options{Config: cfg, GitCacheDir: dir, RenderCommand: []string{self, renderSandboxCommand}})
		if err != nil {
			return nil, err
		}
		return previewer.Preview, nil
	}

	ctx, stop := signal.NotifyContext(contextOf(cmd), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	apps, scope, err := liveApps(ctx, cluster, c)
	if err != nil {
		return err
	}
	opts := ui.Options{Apps: apps}
	var tlsConfig *tls.Config
	if f.tlsCert != "" {
		tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if f.proxy {
		trusted, err := parsePrefixes(f.trustedProxies)
		if err != nil {
			return err
		}
		if f.clientCA != "" {
			pem, err := os.ReadFile(f.clientCA)
			if err != nil {
				return fmt.Errorf("--client-ca-file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return fmt.Errorf("--client-ca-file %s holds no PEM certificate", f.clientCA)
			}
			tlsConfig.ClientCAs, tlsConfig.ClientAuth = pool, tls.RequireAndVerifyClientCert
			if len(trusted) > 0 {
				tlsConfig.ClientAuth = tls.VerifyClientCertIfGiven
			}
		}
		identity, err := ui.NewProxy(ui.ProxyOptions{Config: cfg, Scheme: c.Scheme(), Mapper: c.RESTMapper(),
			UserHeader: f.userHeader, GroupsHeader: f.groupsHeader, TrustedProxies: trusted, TrustClientCertificates: f.clientCA != "",
			NewPreview: newPreview, GitCacheDir: cacheDir})
		if err != nil {
			return fmt.Errorf("--proxy: %w (give --trusted-proxy or --client-ca-file)", err)
		}
		opts.Identity = identity
	} else {
		previewApp, err := newPreview(cfg, cacheDir)
		if err != nil {
			return err
		}
		opts.Identity = ui.Local{Viewer: &ui.Viewer{Name: "you", Client: c, Preview: previewApp}}
	}

	listener, err := net.Listen("tcp", f.addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w (pick another with --addr)", f.addr, err)
	}
	_, port, _ = net.SplitHostPort(listener.Addr().String())
	if !f.proxy {
		opts.AllowedHosts = []string{net.JoinHostPort(host, port)}
		if ip := net.ParseIP(host); host == "localhost" || (ip != nil && ip.IsLoopback()) {
			opts.AllowedHosts = append(opts.AllowedHosts, net.JoinHostPort("localhost", port), net.JoinHostPort("127.0.0.1", port), net.JoinHostPort("::1", port))
		}
	}
	server, err := ui.New(opts)
	if err != nil {
		return err
	}
	go func() { _ = apps.Start(ctx) }()
	srv := &http.Server{Handler: server.Handler(), ReadHeaderTimeout: 10 * time.Second, TLSConfig: tlsConfig}
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
	if f.proxy {
		mode = " behind an authenticating proxy (" + f.userHeader + " believed from " + strings.Join(append(f.trustedProxies, clientCAName(f.clientCA)...), ", ") + ")"
	}
	fmt.Fprintf(cmd.OutOrStdout(), "Serving the dashboard at %s://%s/%s (Ctrl-C stops); live updates: %s\n", scheme, listener.Addr(), mode, scope)
	if tlsConfig != nil {
		err = srv.ServeTLS(listener, f.tlsCert, f.tlsKey)
	} else {
		err = srv.Serve(listener)
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func clientCAName(path string) []string {
	if path == "" {
		return nil
	}
	return []string{"client certificates of " + path}
}

// parsePrefixes reads --trusted-proxy: CIDRs or single addresses.
func parsePrefixes(values []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, v := range values {
		if prefix, err := netip.ParsePrefix(v); err == nil {
			out = append(out, prefix.Masked())
			continue
		}
		addr, err := netip.ParseAddr(v)
		if err != nil {
			return nil, fmt.Errorf("--trusted-proxy %q: not an address or a CIDR", v)
		}
		out = append(out, netip.PrefixFrom(addr, addr.BitLen()))
	}
	return out, nil
}

// liveApps is the cache whose App informer feeds the dashboard's live
// stream, read with the identity the dashboard runs as: every namespace's
// Apps when it may watch them all, else those of the kubeconfig's
// namespace (-n).
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
	opts := cache.Options{Scheme: c.Scheme(), Mapper: c.RESTMapper()}
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
