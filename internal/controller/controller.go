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
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/egress"
	"github.com/plumb-dev/plumb/internal/metrics"
	"github.com/plumb-dev/plumb/internal/notify"
	"github.com/plumb-dev/plumb/internal/reconcile"
	"github.com/plumb-dev/plumb/internal/source"
	"github.com/plumb-dev/plumb/queue"
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
	// Shards, when "auto", spreads the Apps over the replicas (package
	// shard): each holds a Lease of its own in LeaderElectionNamespace, in
	// the group LeaderElectionID, as ShardIdentity (the pod's name), and
	// ticks the Apps of the slots it holds; LeaderElect is then unused.
	// "" or "off": one replica ticks every App (LeaderElect).
	Shards        string
	ShardIdentity string
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
	// AllowKubeConfigPlugins lets an App's destination kubeconfig run an
	// exec credential plugin or an auth-provider.
	AllowKubeConfigPlugins bool
	// MaxDestinations bounds the destination clusters connected at once
	// (0: destination's default, 32); MaxDestinationKinds the kinds
	// watched in each (0: no bound).
	MaxDestinations int
	// MaxDestinationsPerNamespace bounds those of one namespace (0: none
	// but MaxDestinations).
	MaxDestinationsPerNamespace int
	MaxDestinationKinds         int
	// NotificationBlockedPrefixes are the addresses no Notification's sink
	// may be reached at, DestinationBlockedPrefixes those no destination
	// cluster's API server may be at (nil: egress.DefaultBlockedPrefixes()).
	DestinationBlockedPrefixes  []netip.Prefix
	NotificationBlockedPrefixes []netip.Prefix
	// NotificationAlertRefresh is how often open Alertmanager alerts are
	// posted again (0: notify's default, 5m).
	NotificationAlertRefresh time.Duration
}

// ShardsAuto is Options.Shards that spreads the Apps over the replicas.
const ShardsAuto = "auto"

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
		blocked = egress.DefaultBlockedPrefixes()
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
// request, which it tells seen of first; a deletion it tells gone of
// first. Status writes by the tick itself do not enqueue it.
func appEvents(enqueue func(types.NamespacedName), seen func(key types.NamespacedName, request string), gone func(types.NamespacedName)) toolscache.ResourceEventHandler {
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
		AddFunc: func(obj any) {
			if app, ok := obj.(*plumbv1.App); ok && app.Annotations[plumbv1.AnnotationSyncRequestedAt] != "" {
				seen(client.ObjectKeyFromObject(app), app.Annotations[plumbv1.AnnotationSyncRequestedAt])
			}
			add(obj)
		},
		DeleteFunc: func(obj any) {
			if k, ok := key(obj); ok {
				gone(k)
				enqueue(k)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(*plumbv1.App)
			n, ok2 := newObj.(*plumbv1.App)
			if !ok1 || !ok2 {
				return
			}
			request := n.Annotations[plumbv1.AnnotationSyncRequestedAt]
			newRequest := o.Annotations[plumbv1.AnnotationSyncRequestedAt] != request
			if newRequest {
				seen(client.ObjectKeyFromObject(n), request) // "" too: a request that comes back is new
			}
			if o.Generation != n.Generation || !n.DeletionTimestamp.IsZero() || newRequest {
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
