package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/fluxcd/cli-utils/pkg/flowcontrol"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/plumb-dev/plumb/internal/controller"
	"github.com/plumb-dev/plumb/internal/shard"
	"github.com/plumb-dev/plumb/internal/source"
	"github.com/plumb-dev/plumb/webhook"
)

// controllerFlags are the flags of `plumb controller`.
type controllerFlags struct {
	kubeconfig     string
	logLevel       string
	logEncoding    string
	appSelector    string
	webhookSecrets []string // provider=path
	kubeAPIQPS     float32
	kubeAPIBurst   int
	// sinks and destinations are the ranges Notifications' sinks and
	// destination clusters may not be at.
	sinks, destinations blockedRanges
	controller.Options
}

func newControllerCommand() *cobra.Command {
	var f controllerFlags
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Run the controller: keep every App in the cluster equal to its Git source",
		Example: `  # Outside the cluster, with a kubeconfig, receiving GitHub pushes
  plumb controller --kubeconfig ~/.kube/config --webhook-secret-file github=/etc/plumb/github-secret

  # In the cluster the Helm chart runs it (helm install plumb charts/plumb)`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			return runController(ctx, f)
		},
	}
	f.register(cmd.Flags())
	return cmd
}

// register defines the flags of `plumb controller` on flags, and sets f
// to their defaults.
func (f *controllerFlags) register(flags *pflag.FlagSet) {
	f.ReadLimits = source.DefaultLimits()
	flags.StringVar(&f.kubeconfig, "kubeconfig", "", "path to a kubeconfig; defaults to $KUBECONFIG, then the in-cluster service account")
	flags.Float32Var(&f.kubeAPIQPS, "kube-api-qps", 0, "client-side limit of requests per second to the API server, on average; 0: none when the API server applies API Priority and Fairness (it protects itself, and Flux and controller-runtime then set none either), else "+fmt.Sprint(fallbackQPS)+"; negative: none")
	flags.IntVar(&f.kubeAPIBurst, "kube-api-burst", fallbackBurst, "requests to the API server allowed at once above the client-side limit, when there is one")
	flags.Int64Var(&f.RenderCacheBytes, "render-cache-bytes", source.DefaultRenderCacheBytes, "memory the cache of rendered Git revisions may take, in bytes (estimated)")
	flags.DurationVar(&f.RenderTimeout, "render-timeout", source.DefaultRenderTimeout, "how long one render may take; a Kustomize or Helm build still running then is killed")
	flags.Uint64Var(&f.RenderMemoryBytes, "render-memory-bytes", 2<<30, "memory (data and heap) a Kustomize or Helm build's process may take, in bytes")
	flags.StringVar(&f.MetricsAddr, "metrics-addr", ":8080", "address that serves Prometheus metrics on /metrics")
	flags.StringVar(&f.WebhookAddr, "webhook-addr", ":9292", "address of the push webhook receiver for Git hosts and registries (POST /hooks/<provider>)")
	flags.StringArrayVar(&f.webhookSecrets, "webhook-secret-file", nil, "provider=path of a file holding that provider's webhook secret (repeatable; providers: github, gitlab, gitea, gogs, bitbucket-server, harbor, dockerhub, quay); a provider is served only with a secret")
	flags.Int64Var(&f.WebhookMaxBodyBytes, "webhook-max-body-bytes", 1<<20, "largest webhook payload in bytes; larger ones get 413")
	flags.StringVar(&f.HealthAddr, "health-addr", ":8081", "address that serves /healthz and /readyz")
	flags.StringVar(&f.PprofAddr, "pprof-addr", "", "loopback address that serves Go's profiles on /debug/pprof/, without authentication (empty: none)")
	flags.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	flags.StringVar(&f.logEncoding, "log-encoding", "json", "log encoding: json or console")
	flags.IntVar(&f.Workers, "workers", 4, "how many Apps tick at once")
	flags.BoolVar(&f.LeaderElect, "leader-elect", true, "take a Lease so that only one replica ticks")
	flags.StringVar(&f.LeaderElectionID, "leader-election-id", "plumb-controller", "name of the leader election Lease")
	flags.StringVar(&f.LeaderElectionNamespace, "leader-election-namespace", "", "namespace of the Lease (default: the pod's namespace, or default)")
	flags.StringVar(&f.Shards, "shards", "off", "auto: spread the Apps over the replicas, each holding a Lease of its own (named after --leader-election-id and --shard-identity, in --leader-election-namespace) and ticking the Apps of its share; off: one replica ticks every App (--leader-elect)")
	flags.StringVar(&f.ShardIdentity, "shard-identity", "", "this replica's name among the shards (default: $POD_NAME, else the host name); unique per replica")
	flags.StringVar(&f.appSelector, "app-label-selector", "", "only tick Apps whose labels match this selector (to shard Apps between controllers)")
	flags.StringSliceVar(&f.WatchNamespaces, "watch-namespaces", nil, "only watch these namespaces (comma-separated): their Apps, and the objects Apps place in them; for a controller whose rights are Roles there (the chart's rbac.mode namespaces). Default: the whole cluster")
	flags.DurationVar(&f.ShutdownTimeout, "shutdown-timeout", 30*time.Second, "how long ticks under way may take to finish on SIGTERM")
	flags.StringVar(&f.GitCacheDir, "git-cache-dir", filepath.Join(os.TempDir(), "plumb", "git"), "folder of the shared Git repository cache")
	flags.IntVar(&f.ReadLimits.MaxFiles, "max-repository-files", f.ReadLimits.MaxFiles, "largest number of files a repository may hold at a revision (0: no limit)")
	flags.Int64Var(&f.ReadLimits.MaxTotalBytes, "max-repository-bytes", f.ReadLimits.MaxTotalBytes, "largest total size in bytes of a repository's files at a revision (0: no limit)")
	flags.Int64Var(&f.ReadLimits.MaxFileBytes, "max-file-bytes", f.ReadLimits.MaxFileBytes, "largest single file in bytes (0: no limit)")
	flags.IntVar(&f.ReadLimits.MaxObjects, "max-objects", f.ReadLimits.MaxObjects, "largest number of objects one App may render (0: no limit)")
	flags.Int64Var(&f.ReadLimits.MaxFetchBytes, "max-fetch-bytes", f.ReadLimits.MaxFetchBytes, "largest pack in bytes one Git fetch over HTTP(S) may download, and largest OCI content layer (a remote that sends more fails the Read with LimitExceeded)")
	flags.StringVar(&f.Policy.DefaultServiceAccount, "default-service-account", "", "ServiceAccount, in each App's own namespace, that Apps naming none in spec.serviceAccountName act as (without it such Apps act with the controller's own rights)")
	flags.BoolVar(&f.Policy.NoCrossNamespace, "no-cross-namespace", false, "refuse renders that place objects outside the App's namespace or hold cluster-scoped objects, and dependsOn on Apps of other namespaces")
	f.sinks.register(flags, "notification", "Notification's sink",
		"add your cluster's pod and service ranges if tenants must not reach in-cluster services")
	f.destinations.register(flags, "destination", "destination cluster's API server",
		"add the ranges of the networks tenants' Apps must not deploy into")
	flags.DurationVar(&f.NotificationAlertRefresh, "notification-alert-refresh", 5*time.Minute,
		"how often alerts that are open in Alertmanager are posted again, each post valid for three times as long")
	flags.BoolVar(&f.Policy.AllowFileSources, "allow-file-sources", false, "let Apps read file:// repositories (from the controller's own disk)")
	flags.BoolVar(&f.Policy.NoRemoteClusters, "no-remote-clusters", false, "refuse Apps that name another cluster (spec.destination): they fail the Observe phase, and the controller connects to no cluster but its own")
	flags.BoolVar(&f.AllowKubeConfigPlugins, "allow-kubeconfig-plugins", false, "let a destination's kubeconfig (spec.destination.kubeConfig) run an exec credential plugin or an auth-provider: a command the controller runs for a tenant")
	flags.IntVar(&f.MaxDestinations, "max-destinations", 32, "most destination clusters connected at once (each has informers and clients of its own); an App beyond fails the Observe phase")
	flags.IntVar(&f.MaxDestinationsPerNamespace, "max-destinations-per-namespace", 8, "most destination clusters connected at once for the Apps of one namespace, so that one tenant cannot take every place of --max-destinations (0: no bound but that one)")
	flags.IntVar(&f.MaxDestinationKinds, "max-destination-kinds", 64, "most kinds watched in one destination cluster; an App whose kinds would go beyond fails the Observe phase (0: no bound)")
	flags.BoolVar(&f.Policy.AllowInsecureRegistries, "allow-insecure-registries", false, "let Apps read OCI registries, Helm repositories and S3 buckets over plain HTTP (spec.source.oci.insecure, spec.source.helm.insecure, an http:// helm.repository, spec.source.bucket.insecure, spec.helm.repositories), where anyone on the path can change what is applied")
}

// validate checks the flags before anything starts.
func (f controllerFlags) validate() error {
	if f.MaxDestinations < 1 || f.MaxDestinationKinds < 0 || f.MaxDestinationsPerNamespace < 0 {
		return fmt.Errorf("--max-destinations (%d) must be at least 1, --max-destination-kinds (%d) and --max-destinations-per-namespace (%d) at least 0",
			f.MaxDestinations, f.MaxDestinationKinds, f.MaxDestinationsPerNamespace)
	}
	addrs := map[string]string{"--metrics-addr": f.MetricsAddr, "--webhook-addr": f.WebhookAddr, "--health-addr": f.HealthAddr}
	if f.PprofAddr != "" {
		addrs["--pprof-addr"] = f.PprofAddr
	}
	if f.PprofAddr != "" {
		host, _, err := net.SplitHostPort(f.PprofAddr)
		if ip := net.ParseIP(host); err == nil && host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return fmt.Errorf("--pprof-addr %q: profiles are served without authentication, so only on a loopback address (127.0.0.1:PORT, [::1]:PORT or localhost:PORT); reach them with kubectl port-forward", f.PprofAddr)
		}
	}
	for name, addr := range addrs {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return fmt.Errorf("%s %q: want host:port: %w", name, addr, err)
		}
	}
	if err := f.ReadLimits.Validate(); err != nil {
		return err
	}
	if f.kubeAPIBurst < 1 {
		return fmt.Errorf("--kube-api-burst %d: want at least 1", f.kubeAPIBurst)
	}
	if f.RenderCacheBytes < 0 || f.RenderTimeout <= 0 || f.RenderMemoryBytes < 256<<20 {
		return fmt.Errorf("--render-cache-bytes must not be negative, --render-timeout must be positive and --render-memory-bytes at least 256 MiB")
	}
	if f.NotificationAlertRefresh < time.Second {
		return fmt.Errorf("--notification-alert-refresh %s: want at least 1s", f.NotificationAlertRefresh)
	}
	if f.Workers < 1 {
		return fmt.Errorf("--workers %d: want at least 1", f.Workers)
	}
	switch f.Shards {
	case "off":
	case controller.ShardsAuto:
		if errs := validation.IsDNS1123Subdomain(shard.LeaseName(f.LeaderElectionID, f.ShardIdentity)); f.ShardIdentity == "" || len(errs) > 0 {
			return fmt.Errorf("--shard-identity %q: with --leader-election-id %q, not a Lease name: %s", f.ShardIdentity, f.LeaderElectionID, strings.Join(errs, "; "))
		}
	default:
		return fmt.Errorf("--shards %q: want off or auto", f.Shards)
	}
	if sa := f.Policy.DefaultServiceAccount; sa != "" && len(validation.IsDNS1123Subdomain(sa)) > 0 {
		return fmt.Errorf("--default-service-account %q: not a ServiceAccount name: %s", sa, strings.Join(validation.IsDNS1123Subdomain(sa), "; "))
	}
	for i, ns := range f.WatchNamespaces {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return fmt.Errorf("--watch-namespaces: %q is not a namespace name: %s", ns, strings.Join(errs, "; "))
		}
		if slices.Contains(f.WatchNamespaces[:i], ns) {
			return fmt.Errorf("--watch-namespaces: %s is listed twice", ns)
		}
	}
	if _, err := labels.Parse(f.appSelector); err != nil {
		return fmt.Errorf("--app-label-selector %q: %w", f.appSelector, err)
	}
	for _, b := range []blockedRanges{f.sinks, f.destinations} {
		if _, err := b.prefixes(); err != nil {
			return err
		}
	}
	return nil
}

func runController(ctx context.Context, f controllerFlags) error {
	if f.Shards == controller.ShardsAuto && f.ShardIdentity == "" {
		f.ShardIdentity = os.Getenv("POD_NAME")
		if f.ShardIdentity == "" {
			f.ShardIdentity, _ = os.Hostname()
		}
	}
	if err := f.validate(); err != nil {
		return err
	}
	log, err := newLogger(os.Stderr, f.logLevel, f.logEncoding)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()

	cfg, err := loadRESTConfig(f.kubeconfig)
	if err != nil {
		return err
	}
	serverVersion, err := serverVersion(ctx, cfg)
	if err != nil {
		return err
	}
	limit := clientLimit(ctx, cfg, f.kubeAPIQPS, f.kubeAPIBurst, log)
	log.Info("Connected to the API server", zap.String("host", cfg.Host), zap.String("version", serverVersion),
		zap.Float32("qps", cfg.QPS), zap.Int("burst", cfg.Burst), zap.String("clientRateLimit", limit))
	f.AppSelector, _ = labels.Parse(f.appSelector)              // validated above
	f.NotificationBlockedPrefixes, _ = f.sinks.prefixes()       // validated above
	f.DestinationBlockedPrefixes, _ = f.destinations.prefixes() // validated above
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding plumb's own binary, which renders Kustomize and Helm builds in a child process: %w", err)
	}
	f.RenderCommand = []string{self, renderSandboxCommand}
	if f.WebhookSecrets, err = readWebhookSecrets(f.webhookSecrets); err != nil {
		return err
	}
	return controller.Run(ctx, cfg, f.Options, log)
}

// readWebhookSecrets reads provider=path flags. Secrets come from files (a
// mounted Secret in a cluster), never from the command line.
func readWebhookSecrets(flags []string) (map[webhook.Provider]string, error) {
	secrets := map[webhook.Provider]string{}
	for _, flag := range flags {
		name, path, ok := strings.Cut(flag, "=")
		if !ok || path == "" {
			return nil, fmt.Errorf("--webhook-secret-file %q: want provider=path", flag)
		}
		provider := webhook.Provider(name)
		if !slices.Contains(webhook.Providers, provider) {
			return nil, fmt.Errorf("--webhook-secret-file: unknown provider %q (want one of %v)", name, webhook.Providers)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("reading the %s webhook secret: %w", name, err)
		}
		secret := strings.TrimSpace(string(data))
		if secret == "" {
			return nil, fmt.Errorf("the %s webhook secret in %s is empty: refusing to serve %s unverified", name, path, name)
		}
		if err := webhook.CheckSecret(provider, secret); err != nil {
			return nil, fmt.Errorf("%w (%s)", err, path)
		}
		secrets[provider] = secret
	}
	return secrets, nil
}

// loadRESTConfig reads the kubeconfig at path, or else $KUBECONFIG, or else
// the in-cluster service account.
func loadRESTConfig(path string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading the kubeconfig: %w", err)
	}
	return cfg, nil
}

// serverVersion asks the API server for its version, so a wrong kubeconfig
// fails at start rather than on the first tick.
// The client-side rate limit where the API server does not apply API
// Priority and Fairness (Flux's controllers' defaults).
const (
	fallbackQPS   = 50
	fallbackBurst = 300
)

// clientLimit sets cfg's client-side rate limit from --kube-api-qps and
// --kube-api-burst and says which it set. By default (qps 0) there is none
// when the API server applies API Priority and Fairness, which queues and
// sheds load by priority itself (SIG API Machinery's advice; Flux and
// controller-runtime do the same); otherwise, or when the server cannot be
// asked, fallbackQPS. A negative qps sets none, a positive one that limit.
func clientLimit(ctx context.Context, cfg *rest.Config, qps float32, burst int, log *zap.Logger) string {
	cfg.Burst = burst
	switch {
	case qps > 0:
		cfg.QPS = qps
		return "set by --kube-api-qps"
	case qps < 0:
		cfg.QPS = -1
		return "none: --kube-api-qps is negative"
	}
	probeCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	enabled, err := flowcontrol.IsEnabled(probeCtx, cfg)
	if err != nil {
		log.Warn("Could not tell whether the API server applies API Priority and Fairness; limiting requests client-side",
			zap.Float32("qps", fallbackQPS), zap.Error(err))
	}
	if enabled {
		cfg.QPS = -1
		return "none: the API server applies API Priority and Fairness"
	}
	cfg.QPS = fallbackQPS
	return "the default: the API server does not apply API Priority and Fairness"
}

func serverVersion(ctx context.Context, cfg *rest.Config) (string, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = 15 * time.Second
	client, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return "", fmt.Errorf("building a discovery client: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	info, err := client.ServerVersion()
	if err != nil {
		return "", fmt.Errorf("reaching the API server at %s: %w", cfg.Host, err)
	}
	return info.GitVersion, nil
}
