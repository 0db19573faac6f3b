package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/zapr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	"github.com/plumb-dev/plumb/informers"
	"github.com/plumb-dev/plumb/internal/clusterinfo"
	"github.com/plumb-dev/plumb/internal/controller/leadership"
	"github.com/plumb-dev/plumb/internal/controller/runtimelog"
	"github.com/plumb-dev/plumb/internal/credentials"
	"github.com/plumb-dev/plumb/internal/destination"
	"github.com/plumb-dev/plumb/internal/impersonation"
	"github.com/plumb-dev/plumb/internal/metrics"
	"github.com/plumb-dev/plumb/internal/notify"
	"github.com/plumb-dev/plumb/internal/reconcile"
	"github.com/plumb-dev/plumb/internal/shard"
	"github.com/plumb-dev/plumb/internal/source"
	"github.com/plumb-dev/plumb/internal/source/render"
	"github.com/plumb-dev/plumb/internal/syncrequest"
	"github.com/plumb-dev/plumb/queue"
	"github.com/plumb-dev/plumb/ssa"
	"github.com/plumb-dev/plumb/webhook"
)

// loop is the controller's parts, as Run puts them together step by step.
type loop struct {
	opts     Options
	log      *zap.Logger
	cfg      *rest.Config // every request through it is counted
	scheme   *runtime.Scheme
	registry *prometheus.Registry
	metrics  *metrics.Metrics
	mgr      manager.Manager
	clients  clients
	tick     *reconcile.Reconciler
	apps     *currentQueue // the current term's queue
	observer *informers.Cache
	secrets  *credentials.Cache
	// destinations are the other clusters Apps deploy into (nil with
	// --no-remote-clusters).
	destinations *destination.Manager[*remote]
	notifier     *notify.Terms
}

// clients are the API clients the tick uses besides the manager's.
type clients struct {
	direct    client.Client // applies and dry-runs, uncached
	dynamic   dynamic.Interface
	discovery discovery.DiscoveryInterface
	clientset kubernetes.Interface
}

// Run runs the controller until ctx ends; on the way out it lets ticks
// under way finish (within ShutdownTimeout) and releases the Lease.
func Run(ctx context.Context, cfg *rest.Config, opts Options, log *zap.Logger) error {
	l := &loop{opts: opts, log: log}
	if l.opts.LeaderElectionNamespace == "" {
		l.opts.LeaderElectionNamespace = inClusterNamespace()
	}
	runtimeLog := l.routeRuntimeLogs()
	for _, step := range []func() error{
		func() error { return l.newMetrics(cfg) },
		func() error { return l.newManager(runtimeLog) },
		l.newClients,
		l.newTick,
		func() error { return l.watchApps(ctx) },
		l.addTerms,
		func() error { return l.mgr.Add(metricsServer(l.opts.MetricsAddr, l.registry, l.log)) },
	} {
		if err := step(); err != nil {
			return err
		}
	}
	log.Info("Started controller", zap.Bool("leaderElection", l.opts.LeaderElect))
	err := l.mgr.Start(ctx)
	log.Info("Stopped controller")
	return err
}

// routeRuntimeLogs sends what client-go and controller-runtime log, through
// their process-wide loggers, into plumb's logger.
func (l *loop) routeRuntimeLogs() logr.Logger {
	runtimeLog := runtimelog.New(zapr.NewLogger(l.log.Named("runtime")), 30*time.Second, nil)
	ctrllog.SetLogger(runtimeLog)
	klog.SetLogger(runtimeLog)
	return runtimeLog
}

// newMetrics makes the private registry and the loop's metrics, and the
// config every client is built from, counting each request.
func (l *loop) newMetrics(cfg *rest.Config) error {
	l.registry = prometheus.NewRegistry()
	l.registry.MustRegister(
		// Besides the default series, the live heap as of the last garbage
		// collection (go_gc_heap_live_bytes): what the controller's caches
		// retain, without the garbage that RSS also holds.
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(
			collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/gc/heap/live:bytes$`)})),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	var err error
	if l.metrics, err = metrics.NewMetrics(l.registry); err != nil {
		return err
	}
	// Every client below is built from cfg (impersonated ones from copies
	// of it), so every request the controller makes is counted.
	l.cfg = rest.CopyConfig(cfg)
	l.cfg.Wrap(l.metrics.InstrumentTransport)
	return nil
}

// newManager makes the controller-runtime manager: the App cache, health
// probes, profiles and graceful shutdown. Leader election is plumb's own
// (package leadership): losing the Lease ends the term of ticking, not the
// process.
func (l *loop) newManager(runtimeLog logr.Logger) error {
	l.scheme = runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(l.scheme); err != nil {
		return err
	}
	if err := plumbv1.AddToScheme(l.scheme); err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(l.cfg, manager.Options{
		Scheme:                  l.scheme,
		Logger:                  runtimeLog,
		HealthProbeBindAddress:  l.opts.HealthAddr,
		PprofBindAddress:        l.opts.PprofAddr,
		Metrics:                 metricsserver.Options{BindAddress: "0"},     // plumb serves its own registry
		GracefulShutdownTimeout: ptr(l.opts.ShutdownTimeout + 5*time.Second), // the queue cancels ticks at ShutdownTimeout
		Cache:                   cacheOptions(l.opts.AppSelector, l.opts.WatchNamespaces),
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	l.mgr = mgr
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	return mgr.AddReadyzCheck("app-cache", func(req *http.Request) error {
		if !mgr.GetCache().WaitForCacheSync(req.Context()) {
			return errors.New("the App cache has not synced")
		}
		return nil
	})
}

// newClients makes the clients that go straight to the API server:
// applies and dry-runs (a cached client would start an unfiltered
// informer for every kind it reads), the informers', discovery's and the
// clientset.
func (l *loop) newClients() error {
	httpClient := l.mgr.GetHTTPClient()
	var err error
	if l.clients.direct, err = client.New(l.cfg, client.Options{Scheme: l.scheme, Mapper: l.mgr.GetRESTMapper(), HTTPClient: httpClient}); err != nil {
		return fmt.Errorf("creating the apply client: %w", err)
	}
	if l.clients.dynamic, err = dynamic.NewForConfigAndClient(l.cfg, httpClient); err != nil {
		return fmt.Errorf("creating the dynamic client: %w", err)
	}
	if l.clients.discovery, err = discovery.NewDiscoveryClientForConfigAndClient(l.cfg, httpClient); err != nil {
		return fmt.Errorf("creating the discovery client: %w", err)
	}
	if l.clients.clientset, err = kubernetes.NewForConfigAndClient(l.cfg, httpClient); err != nil {
		return fmt.Errorf("creating the clientset: %w", err)
	}
	return nil
}

// newReader prepares the Read phase.
func (l *loop) newReader() (*source.Reader, error) {
	opts := l.opts
	var isolation *render.Isolation
	if len(opts.RenderCommand) > 0 {
		isolation = &render.Isolation{Command: opts.RenderCommand, Timeout: opts.RenderTimeout, MemoryBytes: opts.RenderMemoryBytes}
	}
	reader, err := source.NewReader(source.Options{CacheDir: opts.GitCacheDir, Limits: opts.ReadLimits,
		RenderCacheBytes: opts.RenderCacheBytes, RenderTimeout: opts.RenderTimeout, Isolation: isolation,
		AllowInsecureRegistries: opts.Policy.AllowInsecureRegistries})
	if err != nil {
		return nil, err
	}
	l.log.Info("Prepared the Read phase", zap.String("gitCacheDir", opts.GitCacheDir),
		zap.Int("maxRepositoryFiles", opts.ReadLimits.MaxFiles), zap.Int64("maxRepositoryBytes", opts.ReadLimits.MaxTotalBytes),
		zap.Int64("maxFileBytes", opts.ReadLimits.MaxFileBytes), zap.Int("maxObjects", opts.ReadLimits.MaxObjects))
	return reader, nil
}

// identities are the appliers of Apps that act as a ServiceAccount: one
// client per ServiceAccount, and one request budget between them all.
func (l *loop) identities() *impersonation.Cache[reconcile.Applier] {
	impersonated := rest.CopyConfig(l.cfg)
	if l.cfg.QPS > 0 && l.cfg.Burst > 0 {
		impersonated.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(l.cfg.QPS, l.cfg.Burst)
	}
	return impersonation.New(impersonated, impersonation.Options[reconcile.Applier]{
		Build: func(cfg *rest.Config) (reconcile.Applier, error) {
			c, err := client.New(cfg, client.Options{Scheme: l.scheme, Mapper: l.mgr.GetRESTMapper()})
			if err != nil {
				return nil, err
			}
			return ssa.NewManager(c), nil
		},
		Exists: impersonation.ServiceAccountsIn(l.mgr.GetCache()),
	})
}

// newTick makes the tick with its phases' parts, the per-App metrics and
// the informers of the Apps' objects.
func (l *loop) newTick() error {
	reader, err := l.newReader()
	if err != nil {
		return err
	}
	l.secrets = credentials.New(l.clients.clientset, func(app types.NamespacedName) { l.tick.CredentialsChanged(app) })
	l.notifier = notifications(l.mgr, l.opts, l.metrics, l.log.Named("notify"))
	l.apps = &currentQueue{} // each term has a queue of its own; events between terms are dropped
	l.tick, err = reconcile.New(reconcile.Deps{
		Notifier: l.notifier, Metrics: l.metrics, Client: l.mgr.GetClient(), APIReader: l.mgr.GetAPIReader(),
		Credentials: l.secrets, Mapper: l.mgr.GetRESTMapper(), Cluster: clusterinfo.New(l.clients.discovery, 0),
		Reader: reader, Applier: ssa.NewManager(l.clients.direct), Identities: l.identities(), Policy: l.opts.Policy,
		Events: l.mgr.GetEventRecorderFor("plumb"), Log: l.log.Named("tick"), Shard: l.shardIdentity(),
		Enqueue: l.apps.AddEvent, EnqueueAfter: l.apps.AddAfter, NewDestinations: l.newDestinations,
		NewObserver: func(events reconcile.ObjectEvents) reconcile.Observer {
			l.observer = informers.New(l.clients.dynamic, l.mgr.GetRESTMapper(), informers.Options{
				OnEvent: events.ObjectChanged, OnHealth: events.HealthChanged, IsOwnWrite: events.IsOwnWrite, Namespaces: l.opts.WatchNamespaces,
				Sharded: l.opts.Shards == ShardsAuto,
			})
			return l.observer
		},
	})
	if err != nil {
		return err
	}
	if err := l.registry.Register(metrics.NewCachedObjects(l.observer.Len)); err != nil {
		return err
	}
	// Per-App series, read from the App cache at scrape time (and the last
	// success from the ticks, which status heartbeats lag).
	return l.registry.Register(metrics.NewAppCollector(func(ctx context.Context) ([]plumbv1.App, error) {
		list := &plumbv1.AppList{}
		if err := l.mgr.GetCache().List(ctx, list); err != nil {
			return nil, err
		}
		return list.Items, nil
	}, l.tick.LastSuccess))
}

// watchApps enqueues Apps on their changes and on their dependencies'
// (Apps are indexed by the Apps they depend on), and serves the push
// webhooks.
func (l *loop) watchApps(ctx context.Context) error {
	if err := l.mgr.GetFieldIndexer().IndexField(ctx, &plumbv1.App{}, reconcile.DependencyIndex, func(obj client.Object) []string {
		if app, ok := obj.(*plumbv1.App); ok {
			return reconcile.DependencyKeys(app)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("indexing Apps by their dependencies: %w", err)
	}
	appInformer, err := l.mgr.GetCache().GetInformer(ctx, &plumbv1.App{})
	if err != nil {
		return fmt.Errorf("watching Apps: %w", err)
	}
	seen := func(key types.NamespacedName, request string) { l.tick.SyncRequestSeen(key, request, time.Now()) }
	if _, err := appInformer.AddEventHandler(appEvents(l.apps.Add, seen, l.tick.AppDeleted)); err != nil {
		return err
	}
	if _, err := appInformer.AddEventHandler(dependentEvents(l.mgr.GetCache(), l.tick.DependencyChanged, l.log.Named("depends-on"))); err != nil {
		return err
	}
	return l.serveWebhooks(appInformer)
}

// serveWebhooks serves the push webhook receiver for the providers with a
// secret. Any replica may receive a push; the request reaches the leader
// through the App's sync annotation.
func (l *loop) serveWebhooks(appInformer cache.Informer) error {
	if len(l.opts.WebhookSecrets) == 0 {
		l.log.Info("Webhook receiver off: no provider has a secret")
		return nil
	}
	index := webhook.NewIndex()
	if _, err := appInformer.AddEventHandler(indexEvents(index)); err != nil {
		return err
	}
	requests := syncrequest.New(l.mgr.GetClient(), 4, l.log.Named("sync-requests"))
	if err := l.mgr.Add(requests); err != nil {
		return err
	}
	receiver, err := webhook.NewReceiver(webhook.Options{
		Secrets: l.opts.WebhookSecrets, MaxBodyBytes: l.opts.WebhookMaxBodyBytes, Index: index,
		Trigger: requests.Request, Log: l.log.Named("webhook"),
		Observe: func(p webhook.Provider, event string, code, matched int) {
			l.metrics.ObserveWebhook(string(p), event, code, matched)
		},
	})
	if err != nil {
		return err
	}
	if err := l.mgr.Add(httpServer("webhook", l.opts.WebhookAddr, receiver.Handler(), l.log)); err != nil {
		return err
	}
	served := []string{}
	for _, p := range receiver.Served() {
		served = append(served, string(p))
	}
	l.metrics.ServeWebhooks(served)
	l.log.Info("Prepared the webhook receiver", zap.Strings("providers", served))
	return nil
}

// addTerms runs terms of ticking: one for the process without leader
// election, else one each time this replica leads; with shards, one for
// the process, ticking the Apps of the slots this replica holds.
func (l *loop) addTerms() error {
	return l.mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		if l.opts.Shards == ShardsAuto {
			return l.shardedTerm(ctx)
		}
		if !l.opts.LeaderElect {
			l.term(nil, ctx.Done())
			return nil
		}
		return leadership.Run(ctx, leadership.Config{Client: l.clients.clientset, Namespace: l.opts.LeaderElectionNamespace,
			Name: l.opts.LeaderElectionID}, l.term, l.log)
	}))
}

// shardedTerm ticks, until ctx ends, the Apps of the slots this replica
// holds as a member of its shard group; on the way out the member releases
// its slots (their ticks drain) and then deletes its Lease, so the others
// take them at once.
func (l *loop) shardedTerm(ctx context.Context) error {
	l.tick.StartTerm()
	gate := shard.NewGate()
	q := queue.New("apps", func(ctx context.Context, key types.NamespacedName, wake queue.Wake) (queue.Outcome, error) {
		tickCtx, leave, ok := gate.Enter(ctx, shard.SlotOf(key.Namespace, key.Name))
		if !ok {
			return queue.Dropped(), nil // another replica's: taken again with its slot
		}
		defer leave()
		return l.tick.Tick(tickCtx, key, wake)
	}, queue.Options[types.NamespacedName]{Workers: l.opts.Workers, DrainTimeout: l.opts.ShutdownTimeout, MetricsProvider: l.metrics.WorkqueueProvider()})
	l.apps.set(q)
	counts, err := l.countAppsPerSlot(ctx)
	if err != nil {
		return err
	}
	member, err := shard.New(shard.Config{Client: l.clients.clientset, Namespace: l.opts.LeaderElectionNamespace, Group: l.opts.LeaderElectionID,
		Identity: l.opts.ShardIdentity, Log: l.log.Named("shard"),
		Observe: func(members []string, held []int) {
			apps := 0
			for _, slot := range held {
				apps += int(counts[slot].Load())
			}
			l.metrics.ObserveShard(len(members), len(held), apps)
		}})
	if err != nil {
		return err
	}
	delivering, stopDelivering := context.WithCancel(context.Background())
	delivered := l.notifier.Begin(delivering)
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		q.Run(ctx)
	}()
	l.log.Info("Started ticking as a shard member", zap.String("identity", l.opts.ShardIdentity), zap.Int("workers", l.opts.Workers))
	err = member.Run(ctx, &slots{gate: gate, queue: q, released: l.tick.AppReleased, apps: l.mgr.GetCache(), objects: l.observer, drain: l.opts.ShutdownTimeout, metrics: l.metrics, log: l.log.Named("shard")})
	<-ran
	l.endTerm(stopDelivering, delivered)
	return err
}

// endTerm ends a term of ticking once its queue has stopped: its
// notifications' delivery, its queue, informers and credential watches.
func (l *loop) endTerm(stopDelivering func(), delivered func()) {
	stopDelivering()
	delivered()
	l.apps.set(nil)
	l.observer.Stop()
	if l.destinations != nil {
		l.destinations.Stop()
	}
	l.secrets.Stop()
	l.log.Info("Stopped ticking")
}

// waitForShardMembers holds a leader's term while replicas of its group
// that spread the Apps over shards (--shards=auto) still hold slots: a
// rolling update from one mode to the other runs both, and both would tick
// those Apps. A member's Lease counts until it has gone unchanged for its
// duration, as this replica sees it. Where the controller may not list
// Leases it cannot tell, and goes on. It reports whether the term may
// tick (false: it ended meanwhile).
func (l *loop) waitForShardMembers(ctx context.Context) bool {
	var fresh shard.Freshness
	var waiting bool
	var lastLog time.Time
	for {
		members, err := shard.ActiveMembers(ctx, l.clients.clientset, l.opts.LeaderElectionNamespace, l.opts.LeaderElectionID, &fresh)
		switch {
		case ctx.Err() != nil:
			return false
		case apierrors.IsForbidden(err):
			l.log.Warn("Could not list the Leases of shard members (forbidden): a replica of this group that runs with --shards=auto, during a change of mode, may tick Apps at the same time", zap.Error(err))
			return true
		case err == nil && len(members) == 0:
			if waiting {
				l.log.Info("The shard members of this group have stopped")
			}
			return true
		case time.Since(lastLog) >= 30*time.Second:
			l.log.Info("Waiting for the shard members of this group (--shards=auto) to stop before ticking", zap.Strings("members", members), zap.Error(err))
			lastLog = time.Now()
		}
		waiting = true
		select {
		case <-ctx.Done():
			return false
		case <-time.After(2 * time.Second):
		}
	}
}

// shardIdentity is this replica's name in its shard group, when Apps are
// spread over replicas.
func (l *loop) shardIdentity() string {
	if l.opts.Shards != ShardsAuto {
		return ""
	}
	return l.opts.ShardIdentity
}

// countAppsPerSlot keeps, from the App informer's events, how many Apps
// each slot holds.
func (l *loop) countAppsPerSlot(ctx context.Context) (*[shard.Slots]atomic.Int64, error) {
	var counts [shard.Slots]atomic.Int64
	informer, err := l.mgr.GetCache().GetInformer(ctx, &plumbv1.App{})
	if err != nil {
		return nil, err
	}
	slotOf := func(obj any) (int, bool) {
		if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		app, ok := obj.(*plumbv1.App)
		if !ok {
			return 0, false
		}
		return shard.SlotOf(app.Namespace, app.Name), true
	}
	_, err = informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if slot, ok := slotOf(obj); ok {
				counts[slot].Add(1)
			}
		},
		DeleteFunc: func(obj any) {
			if slot, ok := slotOf(obj); ok {
				counts[slot].Add(-1)
			}
		},
	})
	return &counts, err
}

// slots is what a shard member does with its slots: it lets their Apps'
// ticks through the gate, and enqueues the Apps of a slot it takes.
type slots struct {
	gate     *shard.Gate
	queue    *queue.Queue[types.NamespacedName]
	released func(types.NamespacedName) // forgets an App another replica ticks now
	apps     cache.Cache
	objects  *informers.Cache // narrowed to the objects of the slots held
	drain    time.Duration
	metrics  *metrics.Metrics
	log      *zap.Logger
}

// takenTickDelay bounds how long the Apps of taken slots wait for the
// informers to hold their objects before they are enqueued anyway: during
// a churn of members, each change of slots starts new informers, and
// Narrow's channel closes only once none is left listing.
const takenTickDelay = 10 * time.Second

// Take lets the ticks of the Apps of taken slots through, and enqueues
// those Apps once the informers hold their objects, or after
// takenTickDelay.
func (s *slots) Take(taken []int) {
	for _, key := range s.appsOf(taken) {
		s.released(key) // what this replica remembers of it may be stale: another ticked it since
	}
	s.gate.Take(taken)
	s.metrics.ObserveSlotMoves("take", len(taken))
	// Listed again once the gate lets them through: an App created
	// meanwhile was refused by the gate when its event came.
	apps := s.appsOf(taken)
	synced := s.objects.Narrow(s.held())
	enqueue := func() {
		for _, key := range apps {
			s.queue.Add(key)
		}
	}
	go func() {
		select { // a tick before that reads what the cache lacks from the API server
		case <-synced:
			enqueue()
		case <-time.After(takenTickDelay):
			enqueue()
			// Once the informers hold the slots' objects, again: a change
			// that their initial list shows is no event.
			<-synced
			enqueue()
		}
	}()
}

// held lists the slots whose ticks the gate lets through.
func (s *slots) held() []int {
	var held []int
	for slot := range shard.Slots {
		if s.gate.Holds(slot) {
			held = append(held, slot)
		}
	}
	return held
}

// appsOf lists the Apps of slots, from the App cache.
func (s *slots) appsOf(slots []int) []types.NamespacedName {
	in := map[int]bool{}
	for _, slot := range slots {
		in[slot] = true
	}
	list := &plumbv1.AppList{}
	if err := s.apps.List(context.Background(), list); err != nil {
		s.log.Error("Could not list the Apps of the slots moved; their events bring them", zap.Error(err))
		return nil
	}
	var out []types.NamespacedName
	for i := range list.Items {
		if key := client.ObjectKeyFromObject(&list.Items[i]); in[shard.SlotOf(key.Namespace, key.Name)] {
			out = append(out, key)
		}
	}
	return out
}

func (s *slots) Release(released []int) {
	s.gate.Release(released, s.drain)
	s.metrics.ObserveSlotMoves("release", len(released))
	for _, key := range s.appsOf(released) {
		s.released(key)
	}
	if held := s.held(); len(held) > 0 {
		s.objects.Narrow(held) // the objects of released slots leave the cache
	}
	// Holding no slot (on the way out, most often), the cache is kept, as
	// Lost keeps it: narrowed to nothing it would list every kind again
	// just before it stops.
}

// Lost stops every tick. The informers keep their objects: a replica
// cut off from the API server most often takes the same slots back, and
// dropping them would make it list them all again when the server is
// back, as every replica cut off would.
func (s *slots) Lost() {
	s.gate.Lose()
	s.metrics.ObserveSlotMoves("lost", 1)
}

// term is a term of ticking: a new queue with every App in it, and a new
// delivery of notifications, until the Lease is lost (ticks cancelled at
// once) or the process stops (ticks drain).
func (l *loop) term(lost, stop <-chan struct{}) {
	l.tick.StartTerm()
	q := queue.New("apps", l.tick.Tick, queue.Options[types.NamespacedName]{Workers: l.opts.Workers, DrainTimeout: l.opts.ShutdownTimeout,
		MetricsProvider: l.metrics.WorkqueueProvider()})
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
	if l.opts.LeaderElect && !l.waitForShardMembers(runCtx) {
		close(ran) // the term ended while it waited: nothing ticked
		return
	}
	l.apps.set(q)
	list := &plumbv1.AppList{}
	if l.mgr.GetCache().WaitForCacheSync(runCtx) && l.mgr.GetCache().List(runCtx, list) == nil {
		for i := range list.Items {
			q.Add(client.ObjectKeyFromObject(&list.Items[i]))
		}
	}
	// Notifications are delivered for the term: what it queued and the
	// alerts it opened end with it (a replica that lost the Lease must not
	// refresh alerts the next leader resolved).
	delivering, stopDelivering := context.WithCancel(context.Background())
	delivered := l.notifier.Begin(delivering)
	l.log.Info("Started ticking", zap.Int("workers", l.opts.Workers))
	q.Run(runCtx)
	close(ran)
	l.endTerm(stopDelivering, delivered)
}
