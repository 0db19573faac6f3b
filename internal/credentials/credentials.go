// Package credentials serves the Secrets that Apps name (their source's
// credentials, their verification keys) from a watch of each such Secret alone: one watch per
// referenced Secret (a field selector on its name, in the App's own
// namespace), started when an App first needs it and stopped when no App
// names it any more. A tick then reads its credentials without a request,
// and plumb never caches a Secret that no App references.
package credentials

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Cache watches the Secrets that Apps use. It is safe for concurrent use.
type Cache struct {
	client kubernetes.Interface
	// changed is told of each App that uses a Secret whose data changed.
	changed func(app types.NamespacedName)

	mu      sync.Mutex
	watches map[types.NamespacedName]*watch                        // by Secret
	uses    map[types.NamespacedName]map[types.NamespacedName]bool // App → the Secrets it uses
}

// watch is the informer of one Secret.
type watch struct {
	informer cache.SharedIndexInformer
	stop     context.CancelFunc
	done     chan struct{}

	mu      sync.Mutex
	lastErr error // the last list/watch error
}

// New creates a cache that reads Secrets with client. changed, when not
// nil, is told of each App that uses a Secret whose data changed (a
// rotated token or password), so that it ticks with the new one at once;
// it must not block.
func New(client kubernetes.Interface, changed func(app types.NamespacedName)) *Cache {
	return &Cache{client: client, changed: changed, watches: map[types.NamespacedName]*watch{}, uses: map[types.NamespacedName]map[types.NamespacedName]bool{}}
}

// Get returns the Secret name in app's namespace, as the watch of that
// Secret last saw it, starting the watch on first use. Until the watch has
// listed the Secret, Get reads it with one request instead of waiting for
// the watch (whose first list takes tens of milliseconds: an App's first
// tick, and a cold start of many Apps, would wait that long per App).
// It records that app uses this Secret (Release forgets
// the Secrets it no longer uses). The Secret is shared with the cache: do not change it. A missing
// Secret is a NotFound error. Where RBAC lets plumb get Secrets but not
// list and watch them, it reads the Secret with one request each time;
// where it lets plumb watch but not get them, Get waits (within ctx) for
// the watch.
func (c *Cache) Get(ctx context.Context, app types.NamespacedName, name string) (*corev1.Secret, error) {
	key := types.NamespacedName{Namespace: app.Namespace, Name: name}
	w := c.use(app, key)
	var getErr error
	if !w.informer.HasSynced() {
		secret, err := c.client.CoreV1().Secrets(key.Namespace).Get(ctx, key.Name, metav1.GetOptions{})
		if err == nil || apierrors.IsNotFound(err) {
			return secret, err
		}
		getErr = err
	}
	for !w.informer.HasSynced() {
		select {
		case <-ctx.Done():
			if getErr != nil {
				return nil, fmt.Errorf("reading the credentials secret: %w (and %v)", getErr, w.syncError(ctx.Err()))
			}
			return nil, w.syncError(ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
		if last := w.lastError(); last != nil && (apierrors.IsForbidden(last) || apierrors.IsUnauthorized(last)) {
			secret, err := c.client.CoreV1().Secrets(key.Namespace).Get(ctx, key.Name, metav1.GetOptions{})
			if err != nil {
				return nil, fmt.Errorf("%w (and watching it: %v)", err, last)
			}
			return secret, nil
		}
	}
	obj, exists, err := w.informer.GetStore().GetByKey(key.String())
	if err != nil {
		return nil, err
	}
	if !exists {
		return nil, apierrors.NewNotFound(corev1.Resource("secrets"), name)
	}
	return obj.(*corev1.Secret), nil
}

// Release forgets that app uses any Secret but those named in keep (with
// none, it was deleted or names no Secret any more); a watch no App uses
// stops.
func (c *Cache) Release(app types.NamespacedName, keep ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	kept := map[types.NamespacedName]bool{}
	for _, name := range keep {
		kept[types.NamespacedName{Namespace: app.Namespace, Name: name}] = true
	}
	for key := range c.uses[app] {
		if !kept[key] {
			delete(c.uses[app], key)
			c.releaseLocked(key)
		}
	}
	if len(c.uses[app]) == 0 {
		delete(c.uses, app)
	}
}

// Stop stops every watch.
func (c *Cache) Stop() {
	c.mu.Lock()
	var stopping []*watch
	for key, w := range c.watches {
		w.stop()
		stopping = append(stopping, w)
		delete(c.watches, key)
	}
	c.uses = map[types.NamespacedName]map[types.NamespacedName]bool{}
	c.mu.Unlock()
	for _, w := range stopping {
		<-w.done // outside c.mu: a change being told of takes it
	}
}

// Watched is how many Secrets are watched.
func (c *Cache) Watched() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.watches)
}

// use records that app uses the Secret key and returns its watch.
func (c *Cache) use(app, key types.NamespacedName) *watch {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.uses[app] == nil {
		c.uses[app] = map[types.NamespacedName]bool{}
	}
	c.uses[app][key] = true
	w, ok := c.watches[key]
	if !ok {
		w = c.start(key)
		c.watches[key] = w
	}
	return w
}

// releaseLocked stops the watch of key when no App uses it. c.mu is held.
func (c *Cache) releaseLocked(key types.NamespacedName) {
	for _, used := range c.uses {
		if used[key] {
			return
		}
	}
	if w, ok := c.watches[key]; ok {
		w.stop()
		delete(c.watches, key)
	}
}

// start runs the informer of one Secret. c.mu is held.
func (c *Cache) start(key types.NamespacedName) *watch {
	selector := fields.OneTermEqualSelector("metadata.name", key.Name).String()
	lw := cache.NewFilteredListWatchFromClient(c.client.CoreV1().RESTClient(), "secrets", key.Namespace,
		func(opts *metav1.ListOptions) { opts.FieldSelector = selector })
	informer := cache.NewSharedIndexInformer(lw, &corev1.Secret{}, 0, cache.Indexers{})
	ctx, cancel := context.WithCancel(context.Background())
	w := &watch{informer: informer, stop: cancel, done: make(chan struct{})}
	_, _ = informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(oldObj, newObj any) {
			before, ok1 := oldObj.(*corev1.Secret)
			after, ok2 := newObj.(*corev1.Secret)
			if ok1 && ok2 && !maps.EqualFunc(before.Data, after.Data, bytes.Equal) {
				c.tellUsers(key)
			}
		},
		DeleteFunc: func(any) { c.tellUsers(key) },
	})
	_ = informer.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		w.mu.Lock()
		w.lastErr = err
		w.mu.Unlock()
	})
	go func() {
		defer close(w.done)
		informer.RunWithContext(ctx)
	}()
	return w
}

// tellUsers tells of the Apps that use the Secret key that it changed.
func (c *Cache) tellUsers(key types.NamespacedName) {
	if c.changed == nil {
		return
	}
	c.mu.Lock()
	var apps []types.NamespacedName
	for app, used := range c.uses {
		if used[key] {
			apps = append(apps, app)
		}
	}
	c.mu.Unlock()
	for _, app := range apps {
		c.changed(app)
	}
}

func (w *watch) lastError() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastErr
}

func (w *watch) syncError(cause error) error {
	if last := w.lastError(); last != nil {
		return fmt.Errorf("watching the credentials secret: %w", last)
	}
	if cause == nil {
		cause = errors.New("not listed yet")
	}
	return fmt.Errorf("watching the credentials secret: %w", cause)
}
