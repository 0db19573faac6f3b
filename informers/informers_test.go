package informers

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/informers/compact"
	"github.com/plumb-dev/plumb/internal/testenv"
)

// cluster is the package's local control plane, started once in TestMain.
var cluster *testenv.Cluster

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.Needs{Cluster: testenv.ModeAPI}, func(e *testenv.Env) { cluster = e.Cluster })
}

var configMapKind = schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}

// events records the App keys that the cache reported.
type events struct {
	mu   sync.Mutex
	seen map[types.NamespacedName]int
	own  map[string]bool // resourceVersions of "plumb's own" writes
	// writing: "plumb" is writing; its result is not known yet (as the
	// tick does, the test counts every event meanwhile as its own).
	writing bool
}

func (e *events) ownWrite(obj *compact.Object) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.writing || e.own[obj.GetResourceVersion()]
}

func (e *events) setWriting(writing bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.writing = writing
}

func (e *events) markOwn(rv string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.own == nil {
		e.own = map[string]bool{}
	}
	e.own[rv] = true
}

// running lists the resource types that have an informer.
func (c *Cache) running() []schema.GroupVersionResource {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]schema.GroupVersionResource, 0, len(c.types))
	for gvr := range c.types {
		out = append(out, gvr)
	}
	return out
}

func (e *events) record(key types.NamespacedName) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.seen[key]++
}

func (e *events) count(key types.NamespacedName) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.seen[key]
}

func newCache(t *testing.T, cfg *rest.Config) (*Cache, *events) {
	t.Helper()
	return newCacheIn(t, cfg, nil)
}

// newCacheIn is newCache watching only namespaces (nil: all).
func newCacheIn(t *testing.T, cfg *rest.Config, namespaces []string) (*Cache, *events) {
	t.Helper()
	return newCacheWith(t, cfg, Options{Namespaces: namespaces})
}

// newCacheWith is newCache with opts; the events it reports are recorded.
func newCacheWith(t *testing.T, cfg *rest.Config, opts Options) (*Cache, *events) {
	t.Helper()
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, httpClient)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		t.Fatal(err)
	}
	ev := &events{seen: map[types.NamespacedName]int{}}
	opts.OnEvent, opts.IsOwnWrite = ev.record, ev.ownWrite
	c := New(dyn, mapper, opts)
	t.Cleanup(func() {
		for _, app := range []types.NamespacedName{appA, appB} {
			c.Release(app)
		}
	})
	return c, ev
}

var (
	appA = types.NamespacedName{Namespace: "apps", Name: "a"}
	appB = types.NamespacedName{Namespace: "apps", Name: "b"}
)

func newClient(t *testing.T) client.Client {
	t.Helper()
	return cluster.Client(t)
}

func namespace(t *testing.T, c client.Client) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "informers-"}}
	if err := c.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func owned(ns, name string, app types.NamespacedName) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
		Labels: map[string]string{plumbv1.LabelAppName: app.Name, plumbv1.LabelAppNamespace: app.Namespace}}}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 30*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("timed out waiting for %s", what)
	}
}

func TestOwnedObjectEventsEnqueueTheirApp(t *testing.T) {
	c := newClient(t)
	ns := namespace(t, c)
	cache, ev := newCache(t, cluster.Config)
	if err := cache.Ensure(appA, []schema.GroupVersionKind{configMapKind}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := cache.WaitForSync(ctx, []schema.GroupVersionKind{configMapKind}, nil); err != nil {
		t.Fatal(err)
	}

	cm := owned(ns, "settings", appA)
	if err := c.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the add event", func() bool { return ev.count(appA) == 1 })
	got, err := cache.Get(configMapKind, ns, "settings")
	if err != nil || got == nil {
		t.Fatalf("Get after create = %v, %v", got, err)
	}
	// The cache keeps it compacted: no content, its managedFields with
	// their field sets as text.
	if got.Content() != nil {
		t.Error("the cached object keeps its content")
	}
	if fields := got.ManagedFields(); len(fields) != 1 || !strings.Contains(fields[0].Fields.Value(), "f:labels") {
		t.Errorf("managedFields of the cached object = %+v, want the creator's entry", fields)
	}
	// Fetch reads it whole, as it is now on the server.
	whole, err := cache.Fetch(ctx, configMapKind, ns, "settings")
	if err != nil || whole == nil || whole.Content() == nil || whole.GetResourceVersion() != got.GetResourceVersion() ||
		whole.AppliedDigest() != got.AppliedDigest() {
		t.Fatalf("Fetch = %+v, %v; want the object whole, as cached", whole, err)
	}
	if labels := whole.Content().GetLabels(); labels[plumbv1.LabelAppName] != appA.Name {
		t.Errorf("the fetched object's labels = %v", labels)
	}
	if missing, err := cache.Fetch(ctx, configMapKind, ns, "nowhere"); missing != nil || err != nil {
		t.Errorf("Fetch of a missing object = %v, %v; want nil, nil", missing, err)
	}

	unowned := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "not-ours"}}
	if err := c.Create(ctx, unowned); err != nil {
		t.Fatal(err)
	}

	cm.Data = map[string]string{"color": "red"}
	if err := c.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the update event", func() bool { return ev.count(appA) == 2 })

	cm.Labels = map[string]string{"team": "other"} // someone takes the object away from plumb
	if err := c.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the object to leave the cache", func() bool {
		got, _ := cache.Get(configMapKind, ns, "settings")
		return got == nil
	})
	if ev.count(appA) < 3 {
		t.Errorf("removing the labels did not enqueue the App (events: %d)", ev.count(appA))
	}
	if got, _ := cache.Get(configMapKind, ns, "not-ours"); got != nil {
		t.Errorf("an object without plumb's labels is cached")
	}

	second := owned(ns, "second", appA)
	if err := c.Create(ctx, second); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the second object", func() bool {
		got, _ := cache.Get(configMapKind, ns, "second")
		return got != nil
	})
	before := ev.count(appA)
	if err := c.Delete(ctx, second); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the delete event", func() bool { return ev.count(appA) == before+1 })
	if ev.count(appB) != 0 {
		t.Errorf("app b got %d events for app a's objects", ev.count(appB))
	}
}

func TestInformersStartOnDemandAndStopWhenNoAppNeedsThem(t *testing.T) {
	cache, _ := newCache(t, cluster.Config)
	secretKind := schema.GroupVersionKind{Version: "v1", Kind: "Secret"}
	if err := cache.Ensure(appA, []schema.GroupVersionKind{configMapKind, secretKind}); err != nil {
		t.Fatal(err)
	}
	if err := cache.Ensure(appB, []schema.GroupVersionKind{configMapKind}); err != nil {
		t.Fatal(err)
	}
	if got := len(cache.running()); got != 2 {
		t.Fatalf("%d informers for 2 kinds", got)
	}
	// App a stops rendering Secrets: nobody needs them any more.
	if err := cache.Ensure(appA, []schema.GroupVersionKind{configMapKind}); err != nil {
		t.Fatal(err)
	}
	if got := cache.running(); len(got) != 1 || got[0].Resource != "configmaps" {
		t.Errorf("running after a's change: %v, want configmaps only", got)
	}
	cache.Release(appA)
	if got := len(cache.running()); got != 1 {
		t.Errorf("b still needs configmaps, but %d informers run", got)
	}
	cache.Release(appB)
	if got := len(cache.running()); got != 0 {
		t.Errorf("%d informers run with no App", got)
	}
}

func TestCustomResourceTypesComeAndGoWithoutARestart(t *testing.T) {
	c := newClient(t)
	ns := namespace(t, c)
	cache, ev := newCache(t, cluster.Config)
	group := ns + ".example.com"
	widgetKind := schema.GroupVersionKind{Group: group, Version: "v1", Kind: "Widget"}
	err := cache.Ensure(appA, []schema.GroupVersionKind{widgetKind})
	if !errors.Is(err, ErrUnknownKind) || !strings.Contains(err.Error(), "Widget") {
		t.Fatalf("Ensure before the CRD exists: %v, want ErrUnknownKind naming Widget", err)
	}

	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group, Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: "Widget", Plural: "widgets", ListKind: "WidgetList", Singular: "widget"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptrTrue()}}}},
		},
	}
	ctx := context.Background()
	if err := c.Create(ctx, crd); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the new kind to be known", func() bool {
		return cache.Ensure(appA, []schema.GroupVersionKind{widgetKind}) == nil
	})
	if err := cache.WaitForSync(ctx, []schema.GroupVersionKind{widgetKind}, nil); err != nil {
		t.Fatal(err)
	}
	widget := map[string]any{
		"apiVersion": group + "/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "w", "namespace": ns,
			"labels": map[string]any{plumbv1.LabelAppName: appA.Name, plumbv1.LabelAppNamespace: appA.Namespace}},
	}
	dyn := dynamic.NewForConfigOrDie(cluster.Config)
	widgets := dyn.Resource(schema.GroupVersionResource{Group: group, Version: "v1", Resource: "widgets"}).Namespace(ns)
	if _, err := widgets.Create(ctx, unstructuredOf(widget), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the custom resource's event", func() bool { return ev.count(appA) >= 1 })

	if err := c.Delete(ctx, crd); err != nil {
		t.Fatal(err)
	}
	// The kind is gone: a tick that needs it sees why instead of waiting forever.
	eventually(t, "the deleted kind to be reported", func() bool {
		ensureErr := cache.Ensure(appA, []schema.GroupVersionKind{widgetKind})
		if ensureErr != nil {
			return errors.Is(ensureErr, ErrUnknownKind)
		}
		got, _ := cache.Get(widgetKind, ns, "w")
		return got == nil
	})
}

func TestAForbiddenWatchIsReportedNotWaitedOnForever(t *testing.T) {
	cfg := rest.CopyConfig(cluster.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "nobody-in-particular"}
	cache, _ := newCache(t, cfg)
	secretKind := schema.GroupVersionKind{Version: "v1", Kind: "Secret"}
	if err := cache.Ensure(appA, []schema.GroupVersionKind{secretKind}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := cache.WaitForSync(ctx, []schema.GroupVersionKind{secretKind}, nil)
	if !errors.Is(err, ErrNotSynced) || !strings.Contains(err.Error(), "Secret") || !strings.Contains(err.Error(), "forbidden") {
		t.Errorf("WaitForSync without RBAC: %v, want ErrNotSynced naming Secret and forbidden", err)
	}
}

// watcherIn binds user a Role that may watch ConfigMaps in namespace only,
// and returns a config that acts as user.
func watcherIn(t *testing.T, c client.Client, namespace, user string) *rest.Config {
	t.Helper()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "watch-configmaps"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}}}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "watch-configmaps"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}
	for _, obj := range []client.Object{role, binding} {
		if err := c.Create(context.Background(), obj); err != nil {
			t.Fatal(err)
		}
	}
	cfg := rest.CopyConfig(cluster.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	return cfg
}

// A cache limited to namespaces needs rights only there (a Role), sees
// owned objects there, and reports objects elsewhere and cluster-scoped
// kinds as out of scope rather than as absent.
func TestACacheLimitedToNamespacesNeedsOnlyARoleThere(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	watched, other := namespace(t, c), namespace(t, c)
	cfg := watcherIn(t, c, watched, "namespaced-watcher")

	cache, ev := newCacheIn(t, cfg, []string{watched})
	if err := cache.Ensure(appA, []schema.GroupVersionKind{configMapKind}); err != nil {
		t.Fatal(err)
	}
	syncCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := cache.WaitForSync(syncCtx, []schema.GroupVersionKind{configMapKind}, nil); err != nil {
		t.Fatalf("a cache limited to the namespace of its Role did not sync: %v", err)
	}
	if err := c.Create(ctx, owned(watched, "inside", appA)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the owned object in the watched namespace", func() bool {
		o, err := cache.Get(configMapKind, watched, "inside")
		return err == nil && o != nil && ev.count(appA) > 0
	})
	if o, err := cache.Get(configMapKind, other, "elsewhere"); !errors.Is(err, ErrOutOfScope) || !strings.Contains(err.Error(), other) {
		t.Errorf("Get outside the watched namespaces: %v, %v; want ErrOutOfScope naming %s", o, err, other)
	}

	namespaceKind := schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}
	err := cache.Ensure(appA, []schema.GroupVersionKind{configMapKind, namespaceKind})
	if !errors.Is(err, ErrOutOfScope) || !strings.Contains(err.Error(), "Namespace") {
		t.Errorf("Ensure of a cluster-scoped kind: %v, want ErrOutOfScope naming Namespace", err)
	}
	if _, err := cache.Get(configMapKind, watched, "inside"); err != nil {
		t.Errorf("the in-scope kind stopped working after an out-of-scope one was asked for: %v", err)
	}
}

// With an informer per namespace, a namespace that cannot be listed (its
// Role is gone) fails only the waits that need it.
func TestANamespaceThatCannotBeListedFailsOnlyTheAppsWithObjectsThere(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	granted, denied := namespace(t, c), namespace(t, c)
	cfg := watcherIn(t, c, granted, "half-watcher")
	cache, _ := newCacheIn(t, cfg, []string{granted, denied})
	if err := cache.Ensure(appA, []schema.GroupVersionKind{configMapKind}); err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := cache.WaitForSync(waitCtx, []schema.GroupVersionKind{configMapKind}, []string{granted}); err != nil {
		t.Errorf("an App with objects only in %s waited on %s too: %v", granted, denied, err)
	}
	err := cache.WaitForSync(waitCtx, []schema.GroupVersionKind{configMapKind}, []string{granted, denied})
	if !errors.Is(err, ErrNotSynced) || !strings.Contains(err.Error(), "forbidden") || !strings.Contains(err.Error(), "in namespace "+denied) {
		t.Errorf("an App with objects in %s: %v, want ErrNotSynced naming the namespace and the refusal", denied, err)
	}
}

// With an informer per namespace, resource versions are ordered only
// within each one's watch: a write that one informer has seen does not
// mean another has caught up with it.
func TestCatchingUpIsPerNamespaceWhenEachHasItsInformer(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	first, second := namespace(t, c), namespace(t, c)
	cache, _ := newCacheIn(t, cluster.Config, []string{first, second})
	if err := cache.Ensure(appA, []schema.GroupVersionKind{configMapKind}); err != nil {
		t.Fatal(err)
	}
	obj := owned(first, "written", appA)
	if err := c.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := cache.WaitForResourceVersion(waitCtx, configMapKind, first, obj.ResourceVersion); err != nil {
		t.Fatalf("the informer of %s never saw the write: %v", first, err)
	}
	shortCtx, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	if err := cache.WaitForResourceVersion(shortCtx, configMapKind, second, obj.ResourceVersion); !errors.Is(err, ErrNotSynced) {
		t.Errorf("waiting in %s, which saw nothing, for a write made in %s: %v, want ErrNotSynced", second, first, err)
	}
	if err := cache.WaitForResourceVersion(ctx, configMapKind, "elsewhere", obj.ResourceVersion); err != nil {
		t.Errorf("waiting in a namespace that is not watched: %v, want nothing to wait for (Get reports it)", err)
	}
}

func ptrTrue() *bool { v := true; return &v }

func unstructuredOf(obj map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: obj}
}

func TestStopEndsEveryInformer(t *testing.T) {
	cache, _ := newCache(t, cluster.Config)
	if err := cache.Ensure(appA, []schema.GroupVersionKind{configMapKind, {Version: "v1", Kind: "Secret"}}); err != nil {
		t.Fatal(err)
	}
	cache.Stop()
	if got := len(cache.running()); got != 0 {
		t.Errorf("%d informers run after Stop", got)
	}
}

func TestUpdatesThatChangeNothingATickLooksAtAreNoEvent(t *testing.T) {
	c := newClient(t)
	ns := namespace(t, c)
	cache, ev := newCache(t, cluster.Config)
	deploymentKind := schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	ctx := context.Background()
	if err := cache.Ensure(appA, []schema.GroupVersionKind{deploymentKind}); err != nil {
		t.Fatal(err)
	}
	if err := cache.WaitForSync(ctx, []schema.GroupVersionKind{deploymentKind}, nil); err != nil {
		t.Fatal(err)
	}
	dyn := dynamic.NewForConfigOrDie(cluster.Config)
	deployments := dyn.Resource(schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}).Namespace(ns)
	obj := unstructuredOf(map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{
		"name": "web", "labels": map[string]any{plumbv1.LabelAppName: appA.Name, plumbv1.LabelAppNamespace: appA.Namespace}},
		"spec": map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"app": "web"}},
			"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{"app": "web"}},
				"spec": map[string]any{"containers": []any{map[string]any{"name": "web", "image": "nginx"}}}}}})
	created, err := deployments.Apply(ctx, "web", obj, metav1.ApplyOptions{FieldManager: "plumb"})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the add event", func() bool { return ev.count(appA) == 1 })

	// A controller rolling the Deployment out writes its status, again and again.
	status := created
	for i := range 5 {
		status = status.DeepCopy()
		_ = unstructured.SetNestedField(status.Object, int64(i), "status", "observedGeneration")
		_ = unstructured.SetNestedField(status.Object, int64(i), "status", "replicas")
		if status, err = deployments.UpdateStatus(ctx, status, metav1.UpdateOptions{FieldManager: "kube-controller-manager"}); err != nil {
			t.Fatal(err)
		}
	}
	// plumb applies again: its own write, which it has recorded.
	obj.SetAnnotations(map[string]string{"plumb.dev/revision": "main@sha1:2"})
	ev.setWriting(true)
	ownApply, err := deployments.Apply(ctx, "web", obj, metav1.ApplyOptions{FieldManager: "plumb"})
	if err != nil {
		t.Fatal(err)
	}
	ev.markOwn(ownApply.GetResourceVersion())
	ev.setWriting(false)
	if err := cache.WaitForResourceVersion(ctx, deploymentKind, ownApply.GetNamespace(), ownApply.GetResourceVersion()); err != nil {
		t.Fatal(err)
	}
	if got := ev.count(appA); got != 1 {
		t.Errorf("%d events after five status updates and plumb's own apply, want just the add", got)
	}

	// Someone else scales it: that is an event.
	scaled := ownApply.DeepCopy()
	_ = unstructured.SetNestedField(scaled.Object, int64(3), "spec", "replicas")
	if _, err := deployments.Update(ctx, scaled, metav1.UpdateOptions{FieldManager: "kubectl-scale"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the scale's event", func() bool { return ev.count(appA) == 2 })
}

func TestRelevant(t *testing.T) {
	base := unstructuredOf(map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "a", "resourceVersion": "1", "generation": int64(1),
			"managedFields": []any{
				map[string]any{"manager": "plumb", "operation": "Apply", "time": "2026-01-01T00:00:00Z", "fieldsV1": map[string]any{"f:data": map[string]any{}}},
				map[string]any{"manager": "kcm", "operation": "Update", "subresource": "status", "time": "2026-01-01T00:00:00Z", "fieldsV1": map[string]any{"f:status": map[string]any{}}},
			}},
		"data": map[string]any{"k": "v"}, "status": map[string]any{"phase": "a"}})
	change := func(mutate func(u *unstructured.Unstructured)) *unstructured.Unstructured {
		u := base.DeepCopy()
		u.SetResourceVersion("2")
		mutate(u)
		return u
	}
	for _, tt := range []struct {
		name   string
		update *unstructured.Unstructured
		want   bool
	}{
		{"a resync", base.DeepCopy(), false},
		{"status only", change(func(u *unstructured.Unstructured) { u.Object["status"] = map[string]any{"phase": "b"} }), false},
		{"generation only", change(func(u *unstructured.Unstructured) { u.SetGeneration(2) }), false},
		{"a managedFields time", change(func(u *unstructured.Unstructured) {
			mf := u.GetManagedFields()
			mf[0].Time = &metav1.Time{Time: time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)}
			u.SetManagedFields(mf)
		}), false},
		{"data", change(func(u *unstructured.Unstructured) { u.Object["data"] = map[string]any{"k": "w"} }), true},
		{"a new field", change(func(u *unstructured.Unstructured) { u.Object["binaryData"] = map[string]any{} }), true},
		{"a label", change(func(u *unstructured.Unstructured) { u.SetLabels(map[string]string{"x": "y"}) }), true},
		{"a new manager", change(func(u *unstructured.Unstructured) {
			u.SetManagedFields(append(u.GetManagedFields(), metav1.ManagedFieldsEntry{Manager: "kubectl-edit", Operation: "Update"}))
		}), true},
		{"deletion started", change(func(u *unstructured.Unstructured) { u.SetDeletionTimestamp(&metav1.Time{Time: time.Now()}) }), true},
	} {
		if got := relevant(compacted(t, base), compacted(t, tt.update)); got != tt.want {
			t.Errorf("%s: Relevant = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func compacted(t *testing.T, u *unstructured.Unstructured) *compact.Object {
	t.Helper()
	o, err := compact.Of(u)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// With MaxTypes, an Ensure that would take the cache beyond that many
// kinds fails with ErrTooManyKinds and starts none of them; kinds already
// watched do not count twice.
func TestACacheWatchesNoMoreKindsThanItsBudget(t *testing.T) {
	cache, _ := newCacheWith(t, cluster.Config, Options{MaxTypes: 1})
	secretKind := schema.GroupVersionKind{Version: "v1", Kind: "Secret"}
	if err := cache.Ensure(appA, []schema.GroupVersionKind{configMapKind}); err != nil {
		t.Fatal(err)
	}
	if err := cache.Ensure(appB, []schema.GroupVersionKind{configMapKind}); err != nil {
		t.Errorf("a kind already watched counted again: %v", err)
	}
	err := cache.Ensure(appB, []schema.GroupVersionKind{configMapKind, secretKind})
	if !errors.Is(err, ErrTooManyKinds) {
		t.Fatalf("a second kind beyond a budget of 1: %v, want ErrTooManyKinds", err)
	}
	if got := cache.running(); len(got) != 1 || got[0].Resource != "configmaps" {
		t.Errorf("running after the refusal: %v, want configmaps only", got)
	}
}
