package reconcile

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/api/v1alpha1/crd"
	"github.com/plumb-dev/plumb/informers"
	"github.com/plumb-dev/plumb/localcluster"
	"github.com/plumb-dev/plumb/source"
	"github.com/plumb-dev/plumb/source/git/gittest"
	"github.com/plumb-dev/plumb/ssa"
)

// The package's local control plane and Git server, started once.
var (
	cluster   *localcluster.Cluster
	gitServer *gittest.Server
)

func TestMain(m *testing.M) {
	os.Exit(gittest.RunTests(clusterRun{m}, func(s *gittest.Server) { gitServer = s }))
}

type clusterRun struct{ m *testing.M }

func (r clusterRun) Run() int {
	return localcluster.RunTests(r.m, localcluster.Options{Mode: localcluster.ModeAPI}, func(c *localcluster.Cluster) {
		cluster = c
		if err := crd.Install(context.Background(), c.Config); err != nil {
			fmt.Fprintln(os.Stderr, "installing the CRD:", err)
			os.Exit(1)
		}
	})
}

// requestCounter counts the API requests that pass through a transport.
type requestCounter struct {
	mu       sync.Mutex
	requests []string // "METHOD path"
}

func (c *requestCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		c.mu.Lock()
		c.requests = append(c.requests, req.Method+" "+req.URL.Path)
		c.mu.Unlock()
		return rt.RoundTrip(req)
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

func (c *requestCounter) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.requests = nil
}

// count returns the requests whose path contains part.
func (c *requestCounter) count(part string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, r := range c.requests {
		if strings.Contains(r, part) {
			out = append(out, r)
		}
	}
	return out
}

// newReconciler assembles a tick the way package controller does, with
// every client's requests counted.
func newReconciler(t *testing.T, counter *requestCounter) *Reconciler {
	t.Helper()
	cfg := rest.CopyConfig(cluster.Config)
	cfg.WrapTransport = counter.wrap
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
	c, err := client.New(cfg, client.Options{Scheme: scheme, Mapper: mapper, HTTPClient: httpClient})
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		t.Fatal(err)
	}
	reader, err := source.NewReader(source.Options{CacheDir: t.TempDir(), Limits: source.DefaultLimits(), RefsTTL: -1})
	if err != nil {
		t.Fatal(err)
	}
	observer := informers.New(dyn, mapper, func(types.NamespacedName) {})
	t.Cleanup(observer.Stop)
	return &Reconciler{
		Client: c, SecretReader: c, Mapper: mapper, Reader: reader, Observer: observer,
		Applier: ssa.NewManager(c), Events: record.NewFakeRecorder(10000), Log: zap.NewNop(),
	}
}

func configMaps(n int, value func(i int) string) map[string]string {
	files := map[string]string{}
	for i := range n {
		files[fmt.Sprintf("deploy/cm-%03d.yaml", i)] = fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-%03d\ndata:\n  value: %q\n", i, value(i))
	}
	return files
}

// TestRequestsPerTick asserts the exact API cost of ticks on a 200-object
// App: an unchanged tick makes no request concerning its objects; a tick
// with 5 changed objects makes one apply each; after a restart (no memory)
// each object costs one dry-run once.
func TestRequestsPerTick(t *testing.T) {
	const objects = 200
	ctx := context.Background()
	w, err := gitServer.NewWorkdir("requests.git")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Commit("200 objects", configMaps(objects, func(int) string { return "one" })); err != nil {
		t.Fatal(err)
	}
	if err := w.Push("main"); err != nil {
		t.Fatal(err)
	}
	counter := &requestCounter{}
	r := newReconciler(t, counter)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "requests-"}}
	if err := r.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "git"},
		StringData: map[string]string{"username": gittest.Username, "password": gittest.Password}}
	if err := r.Client.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	app := &plumbv1.App{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "big"}, Spec: plumbv1.AppSpec{
		Source: plumbv1.Source{URL: gitServer.HTTPURL("requests.git"), Ref: plumbv1.GitRef{Branch: "main"}, Path: "deploy",
			SecretRef: &plumbv1.LocalObjectReference{Name: "git"}},
	}}
	if err := r.Client.Create(ctx, app); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(app)
	tick := func(r *Reconciler) {
		t.Helper()
		if _, err := r.Tick(ctx, key); err != nil {
			t.Fatalf("tick: %v", err)
		}
		got := &plumbv1.App{}
		if err := r.Client.Get(ctx, key, got); err != nil {
			t.Fatal(err)
		}
		if cond := apimeta.FindStatusCondition(got.Status.Conditions, plumbv1.ConditionReady); cond == nil || cond.Status != metav1.ConditionTrue {
			t.Fatalf("not Ready after the tick: %+v", cond)
		}
	}
	tick(r) // the first tick creates every object
	cached := func(r *Reconciler, want func(i int) string) {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			for i := range objects {
				obj, _ := r.Observer.Get(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, ns.Name, fmt.Sprintf("cm-%03d", i))
				if obj == nil || obj.Object["data"].(map[string]any)["value"] != want(i) {
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			t.Fatalf("the informer cache did not catch up: %v", err)
		}
	}
	cached(r, func(int) string { return "one" })

	t.Run("an unchanged tick", func(t *testing.T) {
		counter.reset()
		tick(r)
		if got := counter.count("/namespaces/" + ns.Name + "/configmaps/"); len(got) != 0 {
			t.Errorf("%d requests concerning the App's objects, want 0: %v", len(got), got)
		}
		if got := counter.count("/apps/big/status"); len(got) > 1 {
			t.Errorf("%d status writes, want at most 1", len(got))
		}
		t.Logf("all requests of an unchanged tick: %v", counter.count(""))
	})

	t.Run("a tick with 5 of 200 objects changed", func(t *testing.T) {
		changed := func(i int) string {
			if i < 5 {
				return "two"
			}
			return "one"
		}
		if _, err := w.Commit("5 objects change", configMaps(objects, changed)); err != nil {
			t.Fatal(err)
		}
		if err := w.Push("main"); err != nil {
			t.Fatal(err)
		}
		counter.reset()
		tick(r)
		got := counter.count("/namespaces/" + ns.Name + "/configmaps/")
		if len(got) != 5 {
			t.Errorf("%d requests concerning the App's objects, want 5 (one apply each): %v", len(got), got)
		}
		for _, req := range got {
			if !strings.HasPrefix(req, "PATCH ") {
				t.Errorf("request %q is not an apply", req)
			}
		}
		cached(r, changed)
		counter.reset()
		tick(r)
		if got := counter.count("/namespaces/" + ns.Name + "/configmaps/"); len(got) != 0 {
			t.Errorf("the tick after the change made %d requests, want 0: %v", len(got), got)
		}
	})

	t.Run("after a restart each object costs one dry-run, once", func(t *testing.T) {
		restarted := newReconciler(t, counter)
		counter.reset()
		tick(restarted)
		got := counter.count("/namespaces/" + ns.Name + "/configmaps/")
		if len(got) != objects {
			t.Errorf("%d requests concerning %d objects after a restart, want exactly one dry-run each", len(got), objects)
		}
		for _, req := range got {
			if !strings.HasPrefix(req, "PATCH ") {
				t.Errorf("request %q is not a dry-run apply", req)
				break
			}
		}
		counter.reset()
		tick(restarted)
		if got := counter.count("/namespaces/" + ns.Name + "/configmaps/"); len(got) != 0 {
			t.Errorf("the second tick after a restart made %d requests, want 0: %v", len(got), got)
		}
	})
}
