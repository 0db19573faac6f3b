package reconcile

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/informers"
	"github.com/plumb-dev/plumb/internal/clusterinfo"
	"github.com/plumb-dev/plumb/internal/credentials"
	"github.com/plumb-dev/plumb/internal/impersonation"
	"github.com/plumb-dev/plumb/internal/source"
	"github.com/plumb-dev/plumb/internal/source/git/gittest"
	"github.com/plumb-dev/plumb/internal/testenv"
	"github.com/plumb-dev/plumb/queue"
	"github.com/plumb-dev/plumb/ssa"
)

// The package's local control plane and Git server, started once.
var (
	cluster   *testenv.Cluster
	gitServer *gittest.Server
)

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.Needs{Cluster: testenv.ModeAPI, CRDs: true, Git: true}, func(e *testenv.Env) { cluster, gitServer = e.Cluster, e.Git })
}

// harness is a tick assembled the way package controller assembles it —
// Apps read through an informer cache, credentials from per-Secret watches,
// live state from plumb's informers — with every request it makes counted.
type harness struct {
	r       *Reconciler
	events  *record.FakeRecorder
	counter *testenv.RequestLog
	// registry counts the requests to OCI registries.
	registry *testenv.RegistryRequests
	// enqueued counts the tick's and the informers' calls of Enqueue,
	// healthEvents the informers' health events, and after is the last
	// delay EnqueueAfter was given.
	enqueued, healthEvents, after atomic.Int64
	// observer is the tick's informer cache.
	observer *informers.Cache
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	return newHarnessAs(t, cluster.Config, Policy{})
}

// newHarnessAs assembles a tick whose clients use base (a user's
// credentials) and that enforces policy.
func newHarnessAs(t *testing.T, base *rest.Config, policy Policy) *harness {
	t.Helper()
	return newHarnessWith(t, base, policy, false)
}

// newShardedHarness is newHarness with a sharded replica's cache
// (informers.Options.Sharded), which holds the objects of the slots given
// to h.observer.Narrow.
func newShardedHarness(t *testing.T) *harness {
	t.Helper()
	return newHarnessWith(t, cluster.Config, Policy{}, true)
}

// newHarnessWith is newHarnessAs, with a sharded cache when sharded.
func newHarnessWith(t *testing.T, base *rest.Config, policy Policy, sharded bool) *harness {
	t.Helper()
	counter := &testenv.RequestLog{}
	cfg := counter.Wrap(base)
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = plumbv1.AddToScheme(scheme)
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, httpClient)
	if err != nil {
		t.Fatal(err)
	}
	appCache, err := cache.New(cfg, cache.Options{Scheme: scheme, Mapper: mapper, HTTPClient: httpClient})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = appCache.Start(ctx) }()
	if _, err := appCache.GetInformer(ctx, &plumbv1.App{}); err != nil {
		t.Fatal(err)
	}
	if !appCache.WaitForCacheSync(ctx) {
		t.Fatal("the App cache did not sync")
	}
	apps, err := client.New(cfg, client.Options{Scheme: scheme, Mapper: mapper, HTTPClient: httpClient,
		Cache: &client.CacheOptions{Reader: appCache}})
	if err != nil {
		t.Fatal(err)
	}
	direct, err := client.New(cfg, client.Options{Scheme: scheme, Mapper: mapper, HTTPClient: httpClient})
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		t.Fatal(err)
	}
	clientset, err := kubernetes.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		t.Fatal(err)
	}
	discoveryClient, err := discovery.NewDiscoveryClientForConfigAndClient(cfg, httpClient)
	if err != nil {
		t.Fatal(err)
	}
	registry := &testenv.RegistryRequests{}
	reader, err := source.NewReader(source.Options{CacheDir: t.TempDir(), Limits: source.DefaultLimits(), RefsTTL: -1,
		RegistryTransport: registry, AllowInsecureRegistries: policy.AllowInsecureRegistries, HelmIndexMaxAge: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	secrets := credentials.New(clientset, nil)
	t.Cleanup(secrets.Stop)
	events := record.NewFakeRecorder(10000)
	h := &harness{events: events, counter: counter, registry: registry}
	r, err := New(Deps{
		Client: apps, APIReader: direct, Credentials: secrets, Mapper: mapper, Cluster: clusterinfo.New(discoveryClient, 0),
		Reader: reader, Applier: ssa.NewManager(direct), Events: events, Log: zap.NewNop(), Policy: policy,
		Identities: impersonation.New(cfg, impersonation.Options[Applier]{
			Build: func(cfg *rest.Config) (Applier, error) {
				c, err := client.New(cfg, client.Options{Scheme: scheme, Mapper: mapper})
				if err != nil {
					return nil, err
				}
				return ssa.NewManager(c), nil
			},
			Exists: impersonation.ServiceAccountsIn(appCache),
		}),
		// No queue: what the tick and the informers would enqueue is counted.
		Enqueue:      func(types.NamespacedName) { h.enqueued.Add(1) },
		EnqueueAfter: func(_ types.NamespacedName, d time.Duration) { h.after.Store(int64(d)) },
		NewObserver: func(events ObjectEvents) Observer {
			observer := informers.New(dyn, mapper, informers.Options{IsOwnWrite: events.IsOwnWrite,
				OnEvent:  events.ObjectChanged,
				OnHealth: func(key types.NamespacedName) { h.healthEvents.Add(1); events.HealthChanged(key) },
				Sharded:  sharded})
			t.Cleanup(observer.Stop)
			h.observer = observer
			return observer
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	h.r = r
	return h
}

// admin is an uncounted client for the tests' own reads and writes.
func admin(t *testing.T) client.Client {
	t.Helper()
	return cluster.Client(t)
}

// newApp makes a namespace, the credentials Secret and an App tracking
// main/deploy of repo on the package's Git server.
func newApp(t *testing.T, repo string, mutate func(*plumbv1.App)) *plumbv1.App {
	t.Helper()
	ctx := context.Background()
	c := admin(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "reconcile-"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "git"},
		StringData: map[string]string{"username": gittest.Username, "password": gittest.Password}}
	if err := c.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	app := &plumbv1.App{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "app"}, Spec: plumbv1.AppSpec{
		Source: plumbv1.Source{URL: gitServer.HTTPURL(repo), Ref: plumbv1.GitRef{Branch: "main"}, Path: "deploy",
			SecretRef: &plumbv1.LocalObjectReference{Name: "git"}},
	}}
	if mutate != nil {
		mutate(app)
	}
	if err := c.Create(ctx, app); err != nil {
		t.Fatal(err)
	}
	return app
}

// noWait makes an App Ready once applied, whatever its objects' health:
// this package's control plane runs no kube-controller-manager, so its
// Deployments never roll out.
func noWait(a *plumbv1.App) {
	wait := false
	a.Spec.Wait = &wait
}

// pushed pushes files (an empty content deletes one) to repo's main.
func pushed(t *testing.T, w *gittest.Workdir, files map[string]string) string {
	t.Helper()
	hash, err := w.Commit("change", files)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Push("main"); err != nil {
		t.Fatal(err)
	}
	return hash
}

// repos numbers the repositories, so that one test may make several.
var repos atomic.Int64

// newRepo makes a repository named after the test with files on main.
func newRepo(t *testing.T, files map[string]string) (*gittest.Workdir, string) {
	t.Helper()
	name := fmt.Sprintf("%s-%d.git", strings.ToLower(strings.NewReplacer("/", "-", "_", "-", " ", "-").Replace(t.Name())), repos.Add(1))
	w, err := gitServer.NewWorkdir(name)
	if err != nil {
		t.Fatal(err)
	}
	pushed(t, w, files)
	return w, name
}

// tick runs one tick and returns the App as the API server has it after.
func (h *harness) tick(t *testing.T, key types.NamespacedName, trigger queue.Wake) *plumbv1.App {
	t.Helper()
	_, _ = h.r.Tick(context.Background(), key, trigger)
	app := &plumbv1.App{}
	if err := admin(t).Get(context.Background(), key, app); err != nil {
		t.Fatal(err)
	}
	return app
}

// ready fails the test unless the App's Ready condition is True.
func ready(t *testing.T, app *plumbv1.App) {
	t.Helper()
	if cond := apimeta.FindStatusCondition(app.Status.Conditions, plumbv1.ConditionReady); cond == nil || cond.Status != metav1.ConditionTrue {
		t.Fatalf("App not Ready: %+v", cond)
	}
}

// recorded drains the Events recorded so far ("Type Reason message").
func (h *harness) recorded() []string {
	var out []string
	for {
		select {
		case e := <-h.events.Events:
			out = append(out, e)
		default: // Eventf sends before it returns: every Event is there
			return out
		}
	}
}

func configMaps(n int, value func(i int) string) map[string]string {
	files := map[string]string{}
	for i := range n {
		files[fmt.Sprintf("deploy/cm-%03d.yaml", i)] = fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-%03d\ndata:\n  value: %q\n", i, value(i))
	}
	return files
}

// useObserver makes the tick observe plumb's own cluster through o.
func (h *harness) useObserver(o Observer) {
	h.r.Observer = o
	h.r.local.Observer = o
}
