package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/plumb-dev/plumb/source"
)

// controllerOptions are the flags of `plumb controller`.
type controllerOptions struct {
	kubeconfig  string
	metricsAddr string
	webhookAddr string
	healthAddr  string
	logLevel    string
	logEncoding string
	gitCacheDir string
	readLimits  source.Limits
}

func newControllerCommand() *cobra.Command {
	opts := controllerOptions{readLimits: source.DefaultLimits()}
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Run the controller: keep every App in the cluster equal to its Git source",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			return runController(ctx, opts)
		},
	}
	flags := cmd.Flags()
	flags.StringVar(&opts.kubeconfig, "kubeconfig", "", "path to a kubeconfig; defaults to $KUBECONFIG, then the in-cluster service account")
	flags.StringVar(&opts.metricsAddr, "metrics-addr", ":8080", "address that serves Prometheus metrics on /metrics")
	flags.StringVar(&opts.webhookAddr, "webhook-addr", ":9292", "address of the Git push webhook receiver (served once the receiver is built)")
	flags.StringVar(&opts.healthAddr, "health-addr", ":8081", "address that serves /healthz and /readyz")
	flags.StringVar(&opts.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	flags.StringVar(&opts.logEncoding, "log-encoding", "json", "log encoding: json or console")
	flags.StringVar(&opts.gitCacheDir, "git-cache-dir", filepath.Join(os.TempDir(), "plumb", "git"), "folder of the shared Git repository cache")
	flags.IntVar(&opts.readLimits.MaxFiles, "max-repository-files", opts.readLimits.MaxFiles, "largest number of files a repository may hold at a revision (0: no limit)")
	flags.Int64Var(&opts.readLimits.MaxTotalBytes, "max-repository-bytes", opts.readLimits.MaxTotalBytes, "largest total size in bytes of a repository's files at a revision (0: no limit)")
	flags.Int64Var(&opts.readLimits.MaxFileBytes, "max-file-bytes", opts.readLimits.MaxFileBytes, "largest single file in bytes (0: no limit)")
	flags.IntVar(&opts.readLimits.MaxObjects, "max-objects", opts.readLimits.MaxObjects, "largest number of objects one App may render (0: no limit)")
	return cmd
}

// validate checks the flags before anything starts.
func (o controllerOptions) validate() error {
	for name, addr := range map[string]string{"--metrics-addr": o.metricsAddr, "--webhook-addr": o.webhookAddr, "--health-addr": o.healthAddr} {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return fmt.Errorf("%s %q: want host:port: %w", name, addr, err)
		}
	}
	l := o.readLimits
	if l.MaxFiles < 0 || l.MaxTotalBytes < 0 || l.MaxFileBytes < 0 || l.MaxObjects < 0 {
		return fmt.Errorf("--max-repository-files, --max-repository-bytes, --max-file-bytes and --max-objects must not be negative")
	}
	return nil
}

func runController(ctx context.Context, opts controllerOptions) error {
	if err := opts.validate(); err != nil {
		return err
	}
	log, err := newLogger(os.Stderr, opts.logLevel, opts.logEncoding)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()

	cfg, err := loadRESTConfig(opts.kubeconfig)
	if err != nil {
		return err
	}
	serverVersion, err := serverVersion(ctx, cfg)
	if err != nil {
		return err
	}
	log.Info("Connected to the API server", zap.String("host", cfg.Host), zap.String("version", serverVersion))

	if _, err := source.NewReader(opts.gitCacheDir, opts.readLimits); err != nil {
		return err
	}
	log.Info("Prepared the Read phase", zap.String("gitCacheDir", opts.gitCacheDir),
		zap.Int("maxRepositoryFiles", opts.readLimits.MaxFiles), zap.Int64("maxRepositoryBytes", opts.readLimits.MaxTotalBytes),
		zap.Int64("maxFileBytes", opts.readLimits.MaxFileBytes), zap.Int("maxObjects", opts.readLimits.MaxObjects))

	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	var ready atomic.Bool
	health := http.NewServeMux()
	health.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	health.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready.Load() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	metrics := http.NewServeMux()
	metrics.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{Registry: registry}))

	group, ctx := errgroup.WithContext(ctx)
	for _, srv := range []struct {
		name    string
		addr    string
		handler http.Handler
	}{{"health", opts.healthAddr, health}, {"metrics", opts.metricsAddr, metrics}} {
		listener, err := net.Listen("tcp", srv.addr)
		if err != nil {
			return fmt.Errorf("listening for %s on %s: %w", srv.name, srv.addr, err)
		}
		server := &http.Server{Handler: srv.handler, ReadHeaderTimeout: 5 * time.Second}
		log.Info("Serving", zap.String("server", srv.name), zap.String("addr", listener.Addr().String()))
		group.Go(func() error {
			if err := server.Serve(listener); !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("%s server: %w", srv.name, err)
			}
			return nil
		})
		group.Go(func() error {
			<-ctx.Done()
			shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			return server.Shutdown(shutdownCtx)
		})
	}
	ready.Store(true)
	log.Info("Started controller")
	err = group.Wait()
	log.Info("Stopped controller")
	return err
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
