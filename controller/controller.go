// Package controller assembles the loop: a controller-runtime manager (App
// cache, Lease leader election, health probes, graceful shutdown), the
// workqueue, the informers, the Read phase, the applier and the tick, plus
// a metrics server on a private registry. It holds no logic of its own.
package controller

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"regexp"
	"sync"
	"time"

	"github.com/go-logr/zapr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/clusterinfo"
	"github.com/plumb-dev/plumb/credentials"
	"github.com/plumb-dev/plumb/impersonation"
	"github.com/plumb-dev/plumb/informers"
	"github.com/plumb-dev/plumb/leadership"
	"github.com/plumb-dev/plumb/metrics"
	"github.com/plumb-dev/plumb/notify"
	"github.com/plumb-dev/plumb/queue"
	"github.com/plumb-dev/plumb/reconcile"
	"github.com/plumb-dev/plumb/runtimelog"
	"github.com/plumb-dev/plumb/source"
	"github.com/plumb-dev/plumb/source/render"
	"github.com/plumb-dev/plumb/ssa"
	"github.com/plumb-dev/plumb/syncrequest"
	"github.com/plumb-dev/plumb/webhook"
)

// Options configure the controller.
type Options struct {
	// MetricsAddr serves /metrics; HealthAddr serves /healthz and /readyz.
	MetricsAddr string
	HealthAddr  string
	// PprofAddr, when set, serves Go's profiles on /debug/pprof/ (for
	// whoever must find where CPU or memory goes; off by default, since
	// profiles show the controller's internals).
	PprofAddr string
	// Workers is how many Apps tick at once.
	Workers int
	// LeaderElect makes only one replica tick at a time (a Lease named
	// LeaderElectionID in LeaderElectionNamespace).
	LeaderElect             bool
	LeaderElectionID        string
	LeaderElectionNamespace string
	// GitCacheDir and ReadLimits configure the Read phase.
	GitCacheDir string
	ReadLimits  source.Limits
	// ShutdownTimeout bounds how long ticks under way may take to finish.
	ShutdownTimeout time.Duration
	// RenderCacheBytes bounds the memory of cached renders (0: the default).
	RenderCacheBytes int64
	// RenderCommand starts the child process that Kustomize and Helm builds
	// run in (plumb render-sandbox); RenderTimeout and RenderMemoryBytes
	// bound each build. Without a command they run in-process.
	RenderCommand     []string
	RenderTimeout     time.Duration
	RenderMemoryBytes uint64
	// AppSelector, when set, limits this controller to the Apps whose labels
	// match it (shard Apps between controllers, like Flux's sharding).
	AppSelector labels.Selector
	// WatchNamespaces, when set, limits the controller to these namespaces:
	// it watches Apps, Notifications, ServiceAccounts and the objects it
	// manages only there, so that Roles in them are all the rights it
	// needs; objects elsewhere, and cluster-scoped ones, are out of scope
	// (ObserveFailed). Empty: the whole cluster.
	WatchNamespaces []string
	// WebhookAddr serves the push webhook receiver for the providers in
	// WebhookSecrets; with no secret the receiver is off.
	WebhookAddr    string
	WebhookSecrets map[webhook.Provider]string
	// WebhookMaxBodyBytes caps payloads (default 1 MiB).
	WebhookMaxBodyBytes int64
	// Policy holds the tenancy rules: the default ServiceAccount Apps act
	// as, and the lockdown flags.
	Policy reconcile.Policy
	// NotificationBlockedPrefixes are the addresses no Notification's sink
	// may be reached at (nil: notify.DefaultBlockedPrefixes()).
	NotificationBlockedPrefixes []netip.Prefix
	// NotificationAlertRefresh is how often open Alertmanager alerts are
	// posted again (0: notify's default, 5m).
	NotificationAlertRefresh time.Duration
}

// Run runs the controller until ctx ends; on the way out it lets ticks
// under way finish (within ShutdownTimeout) and releases the Lease.
func Run(ctx context.Context, cfg *rest.Config, opts Options, log *zap.Logger) error {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := plumbv1.AddToScheme(scheme); err != nil {
		return err
	}
	// client-go and controller-runtime log through process-wide loggers;
	// route them into plumb's logger.
	runtimeLog := runtimelog.New(zapr.NewLogger(log.Named("runtime")), 30*time.Second, nil)
	ctrllog.SetLogger(runtimeLog)
	klog.SetLogger(runtimeLog)
	registry := prometheus.NewRegistry()
	registry.MustRegister(
		// Besides the default series, the live heap as of the last garbage
		// collection (go_gc_heap_live_bytes): what the controller's caches
		// retain, without the garbage that RSS also holds.
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(
			collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/gc/heap/live:bytes$`)})),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	loopMetrics, err := metrics.NewMetrics(registry)
	if err != nil {
		return err
	}
	// Every client below is built from cfg (impersonated ones from copies
	// of it), so every request the controller makes is counted.
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(loopMetrics.InstrumentTransport)
	if opts.LeaderElectionNamespace == "" {
		opts.LeaderElectionNamespace = inClusterNamespace()
	}
	// Leader election is plumb's own (package leadership): losing the Lease
	// ends the term of ticking, not the process.
	mgr, err := ctrl.NewManager(cfg, manager.Options{
		Scheme:                  scheme,
		Logger:                  runtimeLog,
		HealthProbeBindAddress:  opts.HealthAddr,
		PprofBindAddress:        opts.PprofAddr,
		Metrics:                 metricsserver.Options{BindAddress: "0"},   // plumb serves its own registry
		GracefulShutdownTimeout: ptr(opts.ShutdownTimeout + 5*time.Second), // the queue cancels ticks at ShutdownTimeout
		Cache:                   cacheOptions(opts.AppSelector, opts.WatchNamespaces),
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("app-cache", func(req *http.Request) error {
		if !mgr.GetCache().WaitForCacheSync(req.Context()) {
			return errors.New("the App cache has not synced")
		}
		return nil
	}); err != nil {
		return err
	}

	var isolation *render.Isolation
	if len(opts.RenderCommand) > 0 {
		isolation = &render.Isolation{Command: opts.RenderCommand, Timeout: opts.RenderTimeout, MemoryBytes: opts.RenderMemoryBytes}
	}
	reader, err := source.NewReader(source.Options{CacheDir: opts.GitCacheDir, Limits: opts.ReadLimits,
		RenderCacheBytes: opts.RenderCacheBytes, RenderTimeout: opts.RenderTimeout, Isolation: isolation})
	if err != nil {
		return err
	}
	log.Info("Prepared the Read phase", zap.String("gitCacheDir", opts.GitCacheDir),
		zap.Int("maxRepositoryFiles", opts.ReadLimits.MaxFiles), zap.Int64("maxRepositoryBytes", opts.ReadLimits.MaxTotalBytes),
		zap.Int64("maxFileBytes", opts.ReadLimits.MaxFileBytes), zap.Int("maxObjects", opts.ReadLimits.MaxObjects))

	// Applies and dry-runs go straight to the API server: a cached client
	// would start an unfiltered informer for every kind it reads.
	direct, err := client.New(cfg, client.Options{Scheme: scheme, Mapper: mgr.GetRESTMapper(), HTTPClient: mgr.GetHTTPClient()})
	if err != nil {
		return fmt.Errorf("creating the apply client: %w", err)
	}
	dyn, err := dynamic.NewForConfigAndClient(cfg, mgr.GetHTTPClient())
	if err != nil {
		return fmt.Errorf("creating the dynamic client: %w", err)
	}

	discoveryClient, err := discovery.NewDiscoveryClientForConfigAndClient(cfg, mgr.GetHTTPClient())
	if err != nil {
		return fmt.Errorf("creating the discovery client: %w", err)
	}
	clientset, err := kubernetes.NewForConfigAndClient(cfg, mgr.GetHTTPClient())
	if err != nil {
		return fmt.Errorf("creating the clientset: %w", err)
	}
	// Apps that act as a ServiceAccount share one client per ServiceAccount,
	// and one request budget between them all.
	impersonated := rest.CopyConfig(cfg)
	if cfg.QPS > 0 && cfg.Burst > 0 {
		impersonated.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(cfg.QPS, cfg.Burst)
	}
	identities := impersonation.New(impersonated, impersonation.Options[reconcile.Applier]{
		Build: func(cfg *rest.Config) (reconcile.Applier, error) {
			c, err := client.New(cfg, client.Options{Scheme: scheme, Mapper: mgr.GetRESTMapper()})
			if err != nil {
				return nil, err
			}
			return ssa.NewManager(c), nil
		},
		Exists: impersonation.ServiceAccountsIn(mgr.GetCache()),
	})
	secrets := credentials.New(clientset)
	notifier := notifications(mgr, opts, loopMetrics, log.Named("notify"))
	tick := &reconcile.Reconciler{
		Notifier:    notifier,
		Metrics:     loopMetrics,
		Client:      mgr.GetClient(),
		APIReader:   mgr.GetAPIReader(),
		Credentials: secrets,
		Mapper:      mgr.GetRESTMapper(),
		Cluster:     clusterinfo.New(discoveryClient, 0),
		Reader:      reader,
		Applier:     ssa.NewManager(direct),
		Identities:  identities,
		Policy:      opts.Policy,
		Events:      mgr.GetEventRecorderFor("plumb"),
		Log:         log.Named("tick"),
	}
	// Per-App series, read from the App cache at scrape time (and the last
	// success from the ticks, which status heartbeats lag).
	if err := registry.Register(metrics.NewAppCollector(func(ctx context.Context) ([]plumbv1.App, error) {
		list := &plumbv1.AppList{}
		if err := mgr.GetCache().List(ctx, list); err != nil {
			return nil, err
		}
		return list.Items, nil
	}, tick.LastSuccess)); err != nil {
		return err
	}
	// Each leadership term has a queue of its own; events between terms
	// are dropped (a new term starts by enqueueing every App).
	apps := &currentQueue{}
	tick.Enqueue = apps.AddEvent
	tick.EnqueueAfter = apps.AddAfter
	observer := informers.New(dyn, mgr.GetRESTMapper(), informers.Options{
		OnEvent:    tick.ObjectChanged,
		OnHealth:   tick.HealthChanged,
		IsOwnWrite: tick.IsOwnWrite,
		Namespaces: opts.WatchNamespaces,
	})
	tick.Observer = observer

	// Apps are indexed by the Apps they depend on, so that a change of one
	// enqueues those that wait for it.
	if err := mgr.GetFieldIndexer().IndexField(ctx, &plumbv1.App{}, reconcile.DependencyIndex, func(obj client.Object) []string {
		if app, ok := obj.(*plumbv1.App); ok {
			return reconcile.DependencyKeys(app)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("indexing Apps by their dependencies: %w", err)
	}
	appInformer, err := mgr.GetCache().GetInformer(ctx, &plumbv1.App{})
	if err != nil {
		return fmt.Errorf("watching Apps: %w", err)
	}
	if _, err := appInformer.AddEventHandler(appEvents(apps.Add)); err != nil {
		return err
	}
	if _, err := appInformer.AddEventHandler(dependentEvents(mgr.GetCache(), tick.DependencyChanged, log.Named("depends-on"))); err != nil {
		return err
	}
	if len(opts.WebhookSecrets) > 0 {
		index := webhook.NewIndex()
		if _, err := appInformer.AddEventHandler(indexEvents(index)); err != nil {
			return err
		}
		// Any replica may receive a push; the request reaches the leader
		// through the App's sync annotation.
		requests := syncrequest.New(mgr.GetClient(), 4, log.Named("sync-requests"))
		if err := mgr.Add(requests); err != nil {
			return err
		}
		receiver, err := webhook.NewReceiver(webhook.Options{
			Secrets: opts.WebhookSecrets, MaxBodyBytes: opts.WebhookMaxBodyBytes, Index: index,
			Trigger: requests.Request, Log: log.Named("webhook"),
			Observe: func(p webhook.Provider, event string, code, matched int) {
				loopMetrics.ObserveWebhook(string(p), event, code, matched)
			},
		})
		if err != nil {
			return err
		}
		if err := mgr.Add(httpServer("webhook", opts.WebhookAddr, receiver.Handler(), log)); err != nil {
			return err
		}
		served := []string{}
		for _, p := range receiver.Served() {
			served = append(served, string(p))
		}
		loopMetrics.ServeWebhooks(served)
		log.Info("Prepared the webhook receiver", zap.Strings("providers", served))
	} else {
		log.Info("Webhook receiver off: no provider has a secret")
	}
	// A term of ticking: a new queue with every App in it, until the Lease
	// is lost (ticks cancelled at once) or the process stops (ticks drain).
	term := func(lost, stop <-chan struct{}) {
		tick.StartTerm()
		q := queue.New("apps", tick.Tick, queue.Options[types.NamespacedName]{Workers: opts.Workers, DrainTimeout: opts.ShutdownTimeout,
			MetricsProvider: loopMetrics.WorkqueueProvider()})
		runCtx, stopRun := context.WithCancel(context.Background())
		ran := make(chan struct{})
		go func() {
			select {
			case <-lost:
				q.CancelTicks()
				stopRun()
			case <-stop:
				stopRun()
				select { // losing the Lease during the drain still ends the ticks at once
				case <-lost:
					q.CancelTicks()
				case <-ran:
				}
			}
		}()
		apps.set(q)
		list := &plumbv1.AppList{}
		if mgr.GetCache().WaitForCacheSync(runCtx) && mgr.GetCache().List(runCtx, list) == nil {
			for i := range list.Items {
				q.Add(client.ObjectKeyFromObject(&list.Items[i]))
			}
		}
		// Notifications are delivered for the term: what it queued and the
		// alerts it opened end with it (a replica that lost the Lease must
		// not refresh alerts the next leader resolved).
		delivering, stopDelivering := context.WithCancel(context.Background())
		delivered := notifier.Begin(delivering)
		log.Info("Started ticking", zap.Int("workers", opts.Workers))
		q.Run(runCtx)
		close(ran)
		stopDelivering()
		delivered()
		apps.set(nil)
		observer.Stop()
		secrets.Stop()
		log.Info("Stopped ticking")
	}
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		if !opts.LeaderElect {
			term(nil, ctx.Done())
			return nil
		}
		return leadership.Run(ctx, leadership.Config{Client: clientset, Namespace: opts.LeaderElectionNamespace, Name: opts.LeaderElectionID}, term, log)
	})); err != nil {
		return err
	}
	if err := mgr.Add(metricsServer(opts.MetricsAddr, registry, log)); err != nil {
		return err
	}
	log.Info("Started controller", zap.Bool("leaderElection", opts.LeaderElect))
	err = mgr.Start(ctx)
	log.Info("Stopped controller")
	return err
}

func ptr[T any](v T) *T { return &v }

// notifications makes the Terms that deliver what ticks tell them to the
// Notifications of each App's namespace, read from the manager's cache
// (started on first use, so that a cluster without the Notification CRD
// only logs), with Secrets read from the API server one at a time (no
// cache of every Secret). Each leadership term runs a Dispatcher of its
// own.
func notifications(mgr manager.Manager, opts Options, m *metrics.Metrics, log *zap.Logger) *notify.Terms {
	blocked := opts.NotificationBlockedPrefixes
	if blocked == nil {
		blocked = notify.DefaultBlockedPrefixes()
	}
	return notify.NewTerms(notify.Options{
		Notifications: func(ctx context.Context, namespace string) ([]plumbv1.Notification, error) {
			list := &plumbv1.NotificationList{}
			if err := mgr.GetCache().List(ctx, list, client.InNamespace(namespace)); err != nil {
				return nil, err
			}
			return list.Items, nil
		},
		Secrets: func(ctx context.Context, key types.NamespacedName) (*corev1.Secret, error) {
			secret := &corev1.Secret{}
			if err := mgr.GetAPIReader().Get(ctx, key, secret); err != nil {
				return nil, err
			}
			return secret, nil
		},
		Report:       notify.StatusWriter(mgr.GetAPIReader(), mgr.GetClient(), log),
		Client:       notify.NewClient(blocked),
		AlertRefresh: opts.NotificationAlertRefresh,
		Metrics:      m,
		QueueMetrics: m.WorkqueueProvider(),
		Log:          log,
	})
}

// currentQueue forwards to the queue of the current leadership term, if any.
type currentQueue struct {
	mu sync.Mutex
	q  *queue.Queue[types.NamespacedName]
}

func (c *currentQueue) set(q *queue.Queue[types.NamespacedName]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.q = q
}

func (c *currentQueue) get() *queue.Queue[types.NamespacedName] {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.q
}

// Add asks the current term for a tick of key now.
func (c *currentQueue) Add(key types.NamespacedName) {
	if q := c.get(); q != nil {
		q.Add(key)
	}
}

// AddAfter asks the current term for an event tick of key after delay.
func (c *currentQueue) AddAfter(key types.NamespacedName, delay time.Duration) {
	if q := c.get(); q != nil {
		q.AddAfter(key, delay)
	}
}

// AddEvent asks the current term for an event tick of key.
func (c *currentQueue) AddEvent(key types.NamespacedName) {
	if q := c.get(); q != nil {
		q.AddEvent(key)
	}
}

// cacheOptions limits the App cache to the selected Apps. Nothing reads
// the managedFields of the objects this cache holds (Apps): they are not
// kept.
func cacheOptions(selector labels.Selector, namespaces []string) cache.Options {
	opts := cache.Options{DefaultTransform: cache.TransformStripManagedFields()}
	if len(namespaces) > 0 {
		opts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range namespaces {
			opts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	if selector != nil && !selector.Empty() {
		opts.ByObject = map[client.Object]cache.ByObject{&plumbv1.App{}: {Label: selector}}
	}
	return opts
}

// appEvents enqueues an App when it is created, deleted, or changed in a
// way a tick must see: its spec (generation), its deletion, or a sync
// request. Status writes by the tick itself do not enqueue it.
func appEvents(enqueue func(types.NamespacedName)) toolscache.ResourceEventHandler {
	key := func(obj any) (types.NamespacedName, bool) {
		if tombstone, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = tombstone.Obj
		}
		app, ok := obj.(*plumbv1.App)
		if !ok {
			return types.NamespacedName{}, false
		}
		return client.ObjectKeyFromObject(app), true
	}
	add := func(obj any) {
		if k, ok := key(obj); ok {
			enqueue(k)
		}
	}
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    add,
		DeleteFunc: add,
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(*plumbv1.App)
			n, ok2 := newObj.(*plumbv1.App)
			if !ok1 || !ok2 {
				return
			}
			if o.Generation != n.Generation || !n.DeletionTimestamp.IsZero() ||
				o.Annotations[plumbv1.AnnotationSyncRequestedAt] != n.Annotations[plumbv1.AnnotationSyncRequestedAt] {
				enqueue(client.ObjectKeyFromObject(n))
			}
		},
	}
}

// indexEvents keeps the webhook index in step with the App cache.
func indexEvents(index *webhook.Index) toolscache.ResourceEventHandler {
	set := func(obj any) {
		if app, ok := obj.(*plumbv1.App); ok {
			index.Set(app)
		}
	}
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    set,
		UpdateFunc: func(_, newObj any) { set(newObj) },
		DeleteFunc: func(obj any) {
			if tombstone, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = tombstone.Obj
			}
			if app, ok := obj.(*plumbv1.App); ok {
				index.Delete(client.ObjectKeyFromObject(app))
			}
		},
	}
}

// metricsServer serves a private Prometheus registry (no global state).
func metricsServer(addr string, registry *prometheus.Registry, log *zap.Logger) manager.Runnable {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{Registry: registry}))
	return httpServer("metrics", addr, mux, log)
}

// httpServer runs a handler with timeouts that bound slow clients.
func httpServer(name, addr string, handler http.Handler, log *zap.Logger) manager.Runnable {
	return &serverRunnable{name: name, addr: addr, log: log, server: &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      15 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}}
}

// serverRunnable runs an HTTP server on every replica, leader or not.
type serverRunnable struct {
	name   string
	server *http.Server
	addr   string
	log    *zap.Logger
}

func (s *serverRunnable) NeedLeaderElection() bool { return false }

func (s *serverRunnable) Start(ctx context.Context) error {
	listener, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("listening for %s on %s: %w", s.name, s.addr, err)
	}
	s.log.Info("Serving", zap.String("server", s.name), zap.String("addr", listener.Addr().String()))
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.server.Shutdown(shutdownCtx)
	}()
	if err := s.server.Serve(listener); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// inClusterNamespace is the pod's namespace, or "default" out of a cluster.
func inClusterNamespace() string {
	data, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
	if err != nil || len(data) == 0 {
		return "default"
	}
	return string(data)
}
