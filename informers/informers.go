// Package informers is the Observe phase's cache: dynamic shared informers,
// one per resource type that some App renders or has in its inventory,
// started on demand and stopped when no App needs the type. Each watches only
// objects carrying plumb's ownership label, so memory follows what plumb
// manages, not the cluster's size. Add, update and delete events of owned
// objects are turned into App keys for the workqueue. A tick reads live state
// from here, never from the API server.
package informers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
)

// Ownership labels that the informers select on and index by. They are the
// labels package ssa stamps (kept here too so this package needs no writer).
const (
	LabelAppName      = "plumb.dev/app-name"
	LabelAppNamespace = "plumb.dev/app-namespace"
)

// appIndex indexes cached objects by the App that owns them.
const appIndex = "app"

// ErrUnknownKind means the API server does not serve a kind (no CRD).
var ErrUnknownKind = errors.New("kind not served by the API server")

// ErrNotSynced means an informer could not list its type in time; the last
// list or watch error (e.g. forbidden by RBAC) is wrapped in the message.
var ErrNotSynced = errors.New("cache not synced")

// Cache holds the informers. It is safe for concurrent use.
type Cache struct {
	client  dynamic.Interface
	mapper  meta.RESTMapper
	onEvent func(app types.NamespacedName)

	mu    sync.Mutex
	types map[schema.GroupVersionResource]*typeInformer // guarded by mu
	users map[types.NamespacedName]map[schema.GroupVersionResource]bool
}

// typeInformer is the informer of one resource type.
type typeInformer struct {
	gvk      schema.GroupVersionKind
	informer cache.SharedIndexInformer
	stop     context.CancelFunc
	done     chan struct{} // closed when the informer stopped

	mu      sync.Mutex
	lastErr error // the last list/watch error, cleared on sync
}

// New creates a cache whose events call onEvent with the owning App's key.
func New(client dynamic.Interface, mapper meta.RESTMapper, onEvent func(types.NamespacedName)) *Cache {
	return &Cache{
		client:  client,
		mapper:  mapper,
		onEvent: onEvent,
		types:   map[schema.GroupVersionResource]*typeInformer{},
		users:   map[types.NamespacedName]map[schema.GroupVersionResource]bool{},
	}
}

// Ensure records that app needs exactly these kinds: informers start for
// kinds no App needed before, and stop for kinds no App needs any more. It
// fails with ErrUnknownKind naming a kind the API server does not serve.
func (c *Cache) Ensure(app types.NamespacedName, gvks []schema.GroupVersionKind) error {
	wanted := map[schema.GroupVersionResource]schema.GroupVersionKind{}
	var unknown []string
	for _, gvk := range gvks {
		mapping, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			if meta.IsNoMatchError(err) {
				unknown = append(unknown, gvk.String())
				continue
			}
			return fmt.Errorf("mapping %s to a resource: %w", gvk, err)
		}
		wanted[mapping.Resource] = gvk
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	previous := c.users[app]
	next := map[schema.GroupVersionResource]bool{}
	for gvr, gvk := range wanted {
		next[gvr] = true
		if t, ok := c.types[gvr]; ok && !t.stopped() {
			continue
		}
		c.types[gvr] = c.start(gvr, gvk)
	}
	c.users[app] = next
	for gvr := range previous {
		if !next[gvr] {
			c.releaseLocked(gvr)
		}
	}
	if len(unknown) > 0 {
		return fmt.Errorf("%w: %v", ErrUnknownKind, unknown)
	}
	return nil
}

// Release forgets app (it was deleted) and stops informers nobody needs.
func (c *Cache) Release(app types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	previous := c.users[app]
	delete(c.users, app)
	for gvr := range previous {
		c.releaseLocked(gvr)
	}
}

// releaseLocked stops the informer of gvr when no App uses it. c.mu is held.
func (c *Cache) releaseLocked(gvr schema.GroupVersionResource) {
	for _, used := range c.users {
		if used[gvr] {
			return
		}
	}
	if t, ok := c.types[gvr]; ok {
		t.stop()
		delete(c.types, gvr)
	}
}

// Stop stops every informer (the controller is shutting down).
func (c *Cache) Stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for gvr, t := range c.types {
		t.stop()
		<-t.done
		delete(c.types, gvr)
	}
	c.users = map[types.NamespacedName]map[schema.GroupVersionResource]bool{}
}

// Running lists the resource types that have an informer.
func (c *Cache) Running() []schema.GroupVersionResource {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]schema.GroupVersionResource, 0, len(c.types))
	for gvr := range c.types {
		out = append(out, gvr)
	}
	return out
}

// start creates and runs the informer of one type. c.mu is held.
func (c *Cache) start(gvr schema.GroupVersionResource, gvk schema.GroupVersionKind) *typeInformer {
	informer := dynamicinformer.NewFilteredDynamicInformer(c.client, gvr, metav1.NamespaceAll, 0,
		cache.Indexers{appIndex: indexByApp},
		func(opts *metav1.ListOptions) { opts.LabelSelector = LabelAppName }, // only objects plumb owns
	).Informer()
	ctx, cancel := context.WithCancel(context.Background())
	t := &typeInformer{gvk: gvk, informer: informer, stop: cancel, done: make(chan struct{})}
	_ = informer.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		t.mu.Lock()
		t.lastErr = err
		t.mu.Unlock()
	})
	_, _ = informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { c.notify(obj) },
		UpdateFunc: func(oldObj, newObj any) {
			if sameResourceVersion(oldObj, newObj) {
				return // a resync, not a change
			}
			c.notify(newObj)
			if oldKey, ok := keyOf(oldObj); ok {
				if newKey, _ := keyOf(newObj); newKey != oldKey {
					c.onEvent(oldKey) // the object left that App
				}
			}
		},
		DeleteFunc: func(obj any) { c.notify(obj) },
	})
	go func() {
		defer close(t.done)
		informer.RunWithContext(ctx)
	}()
	return t
}

func (t *typeInformer) stopped() bool {
	select {
	case <-t.done:
		return true
	default:
		return false
	}
}

func sameResourceVersion(oldObj, newObj any) bool {
	o, ok1 := oldObj.(*unstructured.Unstructured)
	n, ok2 := newObj.(*unstructured.Unstructured)
	return ok1 && ok2 && o.GetResourceVersion() == n.GetResourceVersion()
}

// notify turns an event's object (or a tombstone) into its App's key.
func (c *Cache) notify(obj any) {
	if key, ok := keyOf(obj); ok {
		c.onEvent(key)
	}
}

// keyOf is the owning App's key of an object or a tombstone.
func keyOf(obj any) (types.NamespacedName, bool) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return types.NamespacedName{}, false
	}
	return appKey(u)
}

func appKey(u *unstructured.Unstructured) (types.NamespacedName, bool) {
	labels := u.GetLabels()
	name, namespace := labels[LabelAppName], labels[LabelAppNamespace]
	if name == "" || namespace == "" {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: namespace, Name: name}, true
}

func indexByApp(obj any) ([]string, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, nil
	}
	if key, ok := appKey(u); ok {
		return []string{key.String()}, nil
	}
	return nil, nil
}

// WaitForSync waits until the informers of these kinds have listed their
// objects, or ctx ends. It names each kind that did not sync and why.
func (c *Cache) WaitForSync(ctx context.Context, gvks []schema.GroupVersionKind) error {
	for _, gvk := range gvks {
		t, err := c.typeOf(gvk)
		if err != nil {
			return err
		}
		for !t.informer.HasSynced() {
			select {
			case <-ctx.Done():
				return t.syncError(ctx.Err())
			case <-t.done:
				return t.syncError(errors.New("informer stopped"))
			case <-time.After(20 * time.Millisecond):
			}
			// Errors that retrying will not fix soon end the wait at once.
			if last := t.lastError(); last != nil && (apierrors.IsNotFound(last) || apierrors.IsForbidden(last) || apierrors.IsUnauthorized(last)) {
				return t.syncError(nil)
			}
		}
	}
	return nil
}

func (t *typeInformer) lastError() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lastErr
}

func (t *typeInformer) syncError(cause error) error {
	if last := t.lastError(); last != nil {
		return fmt.Errorf("%w: %s: %v", ErrNotSynced, t.gvk.Kind, last)
	}
	return fmt.Errorf("%w: %s: %v", ErrNotSynced, t.gvk.Kind, cause)
}

func (c *Cache) typeOf(gvk schema.GroupVersionKind) (*typeInformer, error) {
	mapping, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		if meta.IsNoMatchError(err) {
			return nil, fmt.Errorf("%w: %s", ErrUnknownKind, gvk)
		}
		return nil, err
	}
	c.mu.Lock()
	t, ok := c.types[mapping.Resource]
	c.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("no informer for %s: call Ensure first", gvk)
	}
	return t, nil
}

// Get returns the cached object, or nil when the cache has none (it does not
// exist or plumb does not own it). The object is shared with the cache:
// DeepCopy before changing it.
func (c *Cache) Get(gvk schema.GroupVersionKind, namespace, name string) (*unstructured.Unstructured, error) {
	t, err := c.typeOf(gvk)
	if err != nil {
		return nil, err
	}
	key := name
	if namespace != "" {
		key = namespace + "/" + name
	}
	obj, exists, err := t.informer.GetIndexer().GetByKey(key)
	if err != nil || !exists {
		return nil, err
	}
	return obj.(*unstructured.Unstructured), nil
}

// Owned lists the cached objects of a kind that app owns.
func (c *Cache) Owned(gvk schema.GroupVersionKind, app types.NamespacedName) ([]*unstructured.Unstructured, error) {
	t, err := c.typeOf(gvk)
	if err != nil {
		return nil, err
	}
	items, err := t.informer.GetIndexer().ByIndex(appIndex, app.String())
	if err != nil {
		return nil, err
	}
	out := make([]*unstructured.Unstructured, 0, len(items))
	for _, item := range items {
		out = append(out, item.(*unstructured.Unstructured))
	}
	return out, nil
}
