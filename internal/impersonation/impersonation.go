// Package impersonation gives each App the identity it acts as on the API
// server: its ServiceAccount, through client-go impersonation, so that the
// API server's RBAC decides what the App may do. It keeps one client per
// ServiceAccount, shared by the Apps that name it, in a bounded cache that
// drops a client as soon as no App uses it.
package impersonation

import (
	"context"
	"errors"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Username is the user name the API server gives ServiceAccount
// namespace/name.
func Username(namespace, name string) string {
	return "system:serviceaccount:" + namespace + ":" + name
}

// ErrServiceAccountNotFound is returned for a ServiceAccount that does not
// exist: the App is not acted for, rather than acted for with the
// controller's own rights.
var ErrServiceAccountNotFound = errors.New("ServiceAccount not found")

// Options configures a Cache.
type Options[T any] struct {
	// Build makes the value (a client, an applier) that acts through cfg,
	// a copy of the base config that impersonates a ServiceAccount.
	Build func(cfg *rest.Config) (T, error)
	// Exists reports whether a ServiceAccount exists (normally from an
	// informer cache, so that asking costs no request).
	Exists func(ctx context.Context, namespace, name string) (bool, error)
	// Max bounds how many ServiceAccounts have a value at once (default
	// 1024); beyond it the least recently used is dropped and built again
	// when next needed.
	Max int
}

// Cache keeps one value per ServiceAccount. It is safe for concurrent use.
type Cache[T any] struct {
	base *rest.Config
	opts Options[T]

	mu      sync.Mutex
	entries map[types.NamespacedName]*entry[T]            // by ServiceAccount
	uses    map[types.NamespacedName]types.NamespacedName // App → its ServiceAccount
	clock   uint64                                        // counts uses, for least-recently-used
	builds  int
}

type entry[T any] struct {
	value    T
	apps     map[types.NamespacedName]bool
	lastUsed uint64
}

// New returns a Cache whose values impersonate ServiceAccounts on top of
// base (the controller's own config).
func New[T any](base *rest.Config, opts Options[T]) *Cache[T] {
	if opts.Max <= 0 {
		opts.Max = 1024
	}
	return &Cache[T]{base: base, opts: opts,
		entries: map[types.NamespacedName]*entry[T]{}, uses: map[types.NamespacedName]types.NamespacedName{}}
}

// For returns the value that acts as ServiceAccount serviceAccount in the
// App's namespace, and records that app uses it (and no other). A
// ServiceAccount that does not exist is ErrServiceAccountNotFound.
func (c *Cache[T]) For(ctx context.Context, app types.NamespacedName, serviceAccount string) (T, error) {
	var zero T
	sa := types.NamespacedName{Namespace: app.Namespace, Name: serviceAccount}
	exists, err := c.opts.Exists(ctx, sa.Namespace, sa.Name)
	if err != nil {
		return zero, fmt.Errorf("looking up ServiceAccount %s: %w", sa, err)
	}
	if !exists {
		c.Release(app)
		return zero, fmt.Errorf("%w: %s (the App acts as %s, and never with the controller's own rights)",
			ErrServiceAccountNotFound, sa, Username(sa.Namespace, sa.Name))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.uses[app]; ok && old != sa {
		c.releaseLocked(app)
	}
	e := c.entries[sa]
	if e == nil {
		cfg := rest.CopyConfig(c.base)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: Username(sa.Namespace, sa.Name)}
		value, err := c.opts.Build(cfg)
		if err != nil {
			return zero, fmt.Errorf("building a client that acts as %s: %w", Username(sa.Namespace, sa.Name), err)
		}
		c.builds++
		e = &entry[T]{value: value, apps: map[types.NamespacedName]bool{}}
		c.entries[sa] = e
		c.evictLocked(sa)
	}
	c.clock++
	e.lastUsed = c.clock
	e.apps[app] = true
	c.uses[app] = sa
	return e.value, nil
}

// Release records that app uses no ServiceAccount any more (it was deleted,
// or acts with the controller's rights now).
func (c *Cache[T]) Release(app types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.releaseLocked(app)
}

func (c *Cache[T]) releaseLocked(app types.NamespacedName) {
	sa, ok := c.uses[app]
	if !ok {
		return
	}
	delete(c.uses, app)
	if e := c.entries[sa]; e != nil {
		delete(e.apps, app)
		if len(e.apps) == 0 {
			delete(c.entries, sa)
		}
	}
}

// evictLocked drops least recently used entries, never keep, until the
// cache is within its bound.
func (c *Cache[T]) evictLocked(keep types.NamespacedName) {
	for len(c.entries) > c.opts.Max {
		var oldest types.NamespacedName
		var oldestUse uint64
		found := false
		for sa, e := range c.entries {
			if sa != keep && (!found || e.lastUsed < oldestUse) {
				oldest, oldestUse, found = sa, e.lastUsed, true
			}
		}
		if !found {
			return
		}
		for app := range c.entries[oldest].apps {
			delete(c.uses, app)
		}
		delete(c.entries, oldest)
	}
}

// Stats reports how many ServiceAccounts have a value now, and how many
// values were built in all.
func (c *Cache[T]) Stats() (entries, builds int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries), c.builds
}

// ServiceAccountsIn is an Options.Exists that looks ServiceAccounts up in
// r, normally a controller-runtime cache: it then keeps their metadata
// (one watch for the cluster) and a lookup costs no request.
func ServiceAccountsIn(r client.Reader) func(ctx context.Context, namespace, name string) (bool, error) {
	return func(ctx context.Context, namespace, name string) (bool, error) {
		sa := &metav1.PartialObjectMetadata{}
		sa.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ServiceAccount"))
		err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, sa)
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	}
}
