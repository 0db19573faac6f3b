// Package informers is the Observe phase's cache: dynamic shared informers,
// one per resource type that some App renders or has in its inventory,
// started on demand and stopped when no App needs the type. Each watches only
// objects carrying plumb's ownership label, so memory follows what plumb
// manages, not the cluster's size. Add, update and delete events of owned
// objects are turned into App keys for the workqueue, except updates that
// change nothing a tick looks at (status, resourceVersion, the times in
// managedFields) and plumb's own writes; an update that changed only an
// object's kstatus health is reported apart (Options.OnHealth). A tick reads live state from here,
// not from the API server; objects are kept compacted (package compact),
// and Fetch reads one whole when a drift must be described, or, for a
// sharded replica whose cache holds only its slots' objects (Narrow), when
// the cache lacks an object.
package informers

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/informers/compact"
)

// ErrUnknownKind means the API server does not serve a kind (no CRD).
var ErrUnknownKind = errors.New("kind not served by the API server")

// ErrOutOfScope means an object lies outside the namespaces the cache
// watches (Options.Namespaces), or is cluster-scoped while it watches only
// namespaces: plumb cannot observe it, so it does not manage it.
var ErrOutOfScope = errors.New("outside the namespaces the controller watches")

// ErrNotStarted means no informer of the kind runs: no App needed it when
// Ensure was last called (its CRD may have come with the very tick).
var ErrNotStarted = errors.New("no informer for the kind")

// ErrNotSynced means an informer could not list its type in time; the last
// list or watch error (e.g. forbidden by RBAC) is wrapped in the message.
var ErrNotSynced = errors.New("cache not synced")

// ErrTooManyKinds is returned by Ensure when the App's kinds would take the
// cache beyond Options.MaxTypes.
var ErrTooManyKinds = errors.New("too many kinds")

// Options configure a Cache.
type Options struct {
	// OnEvent is called with the owning App's key of an object that was
	// added, changed or deleted. It must not block.
	OnEvent func(app types.NamespacedName)
	// OnHealth is called with the owning App's key of an object whose
	// kstatus health changed and nothing else a tick looks at (a write
	// through its status subresource, by the object's own controller). It
	// must not block.
	OnHealth func(app types.NamespacedName)
	// IsOwnWrite, when set, reports an object as plumb's own write that the
	// tick has already taken into account: its add or update is no event.
	IsOwnWrite func(obj *compact.Object) bool
	// Namespaces, when set, are the only namespaces watched (one informer
	// per namespace and type), for a controller whose rights are Roles in
	// these namespaces; cluster-scoped kinds are then out of scope. Empty:
	// every namespace, and cluster-scoped kinds.
	Namespaces []string
	// Sharded narrows the cache to the objects of the slots given to
	// Narrow (their plumb.dev/slot label; none until Narrow is called), for
	// a replica that ticks only the Apps of those slots. A Get that finds
	// nothing then does not mean that the object does not exist (it may
	// lack the slot label, or belong to an App of another slot): see
	// Partial.
	Sharded bool
	// MaxTypes bounds how many kinds the cache watches at once (0: no
	// bound): an Ensure that would need more fails with ErrTooManyKinds and
	// starts none, for a cluster whose Apps a tenant may fill with kinds.
	MaxTypes int
}

// Cache holds the informers. It is safe for concurrent use.
type Cache struct {
	client dynamic.Interface
	mapper meta.RESTMapper
	opts   Options

	mu    sync.Mutex
	types map[schema.GroupVersionResource]*typeInformer // guarded by mu
	// resources remembers, for each kind Ensure mapped, its resource, so
	// that Get (once per object and tick) need not ask the RESTMapper.
	resources map[schema.GroupVersionKind]schema.GroupVersionResource // guarded by mu
	users     map[types.NamespacedName]map[schema.GroupVersionResource]bool
	// selection is the set of slot label values the informers select
	// (nil: every object with the ownership label), guarded by mu.
	selection map[string]bool
	// successors are informers started with the current selection that
	// take over from those in types once they have listed their objects,
	// guarded by mu.
	successors map[schema.GroupVersionResource]*typeInformer
	// waiting are the channels of the Narrow calls whose informers have
	// not all taken over yet, guarded by mu.
	waiting []chan struct{}
}

// typeInformer is the informer of one resource type: one for every
// namespace (key ""), or one per watched namespace.
type typeInformer struct {
	gvk       schema.GroupVersionKind
	informers map[string]cache.SharedIndexInformer // by namespace; "" is all
	// handlers are the registrations of the event handler, by namespace:
	// synced once the handler has been given the initial list.
	handlers map[string]cache.ResourceEventHandlerRegistration
	stop     context.CancelFunc
	done     chan struct{} // closed when every informer stopped

	mu      sync.Mutex
	lastErr map[string]error // per informer (by namespace): its last list/watch error
	// seenRV is, per informer (by namespace, "" for all), the highest
	// resourceVersion of an event it handled (its store has it). Versions
	// are ordered within one watch, not across the informers of several
	// namespaces, so each informer has its own.
	seenRV map[string]string

	// selection is the slot label values this informer selects (nil: all).
	selection map[string]bool
	// predecessor, while this informer lists its objects to take over from
	// another of an older selection, is that other one: an object of the
	// initial list that it holds at the same resourceVersion is no event.
	predecessor atomic.Pointer[typeInformer]
}

// New creates a cache.
func New(client dynamic.Interface, mapper meta.RESTMapper, opts Options) *Cache {
	if opts.OnEvent == nil {
		opts.OnEvent = func(types.NamespacedName) {}
	}
	if opts.OnHealth == nil {
		opts.OnHealth = func(types.NamespacedName) {}
	}
	c := &Cache{
		client:     client,
		mapper:     mapper,
		opts:       opts,
		types:      map[schema.GroupVersionResource]*typeInformer{},
		resources:  map[schema.GroupVersionKind]schema.GroupVersionResource{},
		users:      map[types.NamespacedName]map[schema.GroupVersionResource]bool{},
		successors: map[schema.GroupVersionResource]*typeInformer{},
	}
	if opts.Sharded {
		c.selection = map[string]bool{}
	}
	return c
}

// Partial reports whether the cache holds only some of plumb's objects
// (Options.Sharded): an object it lacks must be read from the API server
// before it is taken for absent.
func (c *Cache) Partial() bool {
	return c.opts.Sharded
}

// takeOverTimeout bounds how long a successor may take to list its objects
// before it takes over anyway (its sync errors then reach WaitForSync).
const takeOverTimeout = time.Minute

// Narrow sets the slots whose objects a sharded cache holds (their
// plumb.dev/slot label values; Options.Sharded). Each running informer is
// replaced by one of the new selection, which takes over once it has
// listed its objects: until then the old one serves Get, so that a tick
// never sees a half-filled cache. An object of the new list that the old
// informer held at the same resourceVersion is no event; one it held
// otherwise (changed meanwhile), or has not reported yet, is; one of a slot
// it did not select is not: the caller enqueues the Apps of slots it takes
// once the returned channel is closed, when no replacement is left to take
// over (a later Narrow's too: an informer replaced before it took over
// never served the slots of the first). Without Options.Sharded it does
// nothing.
func (c *Cache) Narrow(slots []int) <-chan struct{} {
	done := make(chan struct{})
	if !c.opts.Sharded {
		close(done)
		return done
	}
	selection := make(map[string]bool, len(slots))
	for _, slot := range slots {
		selection[strconv.Itoa(slot)] = true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.waiting = append(c.waiting, done)
	if maps.Equal(selection, c.selection) {
		c.closeWaitingLocked()
		return done
	}
	c.selection = selection
	for gvr, current := range c.types {
		if previous, ok := c.successors[gvr]; ok {
			previous.stop()
		}
		next := c.start(gvr, current.gvk, current)
		c.successors[gvr] = next
		go c.takeOver(gvr, next)
	}
	c.closeWaitingLocked()
	return done
}

// takeOver puts next in place of the informer of gvr once it has listed
// its objects (or after takeOverTimeout), and stops the one it replaces;
// it does nothing when next was replaced or released meanwhile.
func (c *Cache) takeOver(gvr schema.GroupVersionResource, next *typeInformer) {
	deadline := time.After(takeOverTimeout)
wait:
	for !next.handled() {
		select {
		case <-next.done:
			return
		case <-deadline:
			break wait
		case <-time.After(20 * time.Millisecond):
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.successors[gvr] != next {
		return
	}
	delete(c.successors, gvr)
	if old, ok := c.types[gvr]; ok {
		if next.listed() { // else (a timeout, a list refused) its store says nothing of deletions
			for _, obj := range vanished(old, next) {
				c.notify(obj)
			}
		}
		old.stop()
	}
	c.types[gvr] = next
	next.predecessor.Store(nil)
	c.closeWaitingLocked()
}

// vanished are the objects old holds that next selects but lacks: deleted
// before next listed, while old had not yet handled the deletion (its
// event would be lost when old stops), so each is an event.
func vanished(old, next *typeInformer) []any {
	var out []any
	for namespace, informer := range old.informers {
		successor, ok := next.informers[namespace]
		if !ok {
			continue
		}
		for _, obj := range informer.GetStore().List() {
			o, ok := obj.(*compact.Object)
			if !ok || (next.selection != nil && !next.selection[o.Label(plumbv1.LabelSlot)]) {
				continue
			}
			if _, exists, err := successor.GetStore().Get(obj); err == nil && !exists {
				out = append(out, obj)
			}
		}
	}
	return out
}

// closeWaitingLocked ends the waits of the Narrow calls made so far once
// no informer is left to take over. c.mu is held.
func (c *Cache) closeWaitingLocked() {
	if len(c.successors) > 0 {
		return
	}
	for _, done := range c.waiting {
		close(done)
	}
	c.waiting = nil
}

// listed reports whether every informer of t has given its handler the
// initial list.
func (t *typeInformer) listed() bool {
	for _, registration := range t.handlers {
		if !registration.HasSynced() {
			return false
		}
	}
	return true
}

// handled reports whether every informer of t has given its handler the
// initial list, or cannot list for a reason that retrying will not fix
// soon (its errors then reach WaitForSync, as the informer it replaces
// would have).
func (t *typeInformer) handled() bool {
	for key, registration := range t.handlers {
		if registration.HasSynced() {
			continue
		}
		t.mu.Lock()
		last := t.lastErr[key]
		t.mu.Unlock()
		if last == nil || !(apierrors.IsNotFound(last) || apierrors.IsForbidden(last) || apierrors.IsUnauthorized(last)) {
			return false
		}
	}
	return true
}

// Ensure records that app needs exactly these kinds: informers start for
// kinds no App needed before, and stop for kinds no App needs any more. It
// fails with ErrUnknownKind naming a kind the API server does not serve.
func (c *Cache) Ensure(app types.NamespacedName, gvks []schema.GroupVersionKind) error {
	wanted := map[schema.GroupVersionResource]schema.GroupVersionKind{}
	var unknown, clusterScoped []string
	for _, gvk := range gvks {
		mapping, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			if meta.IsNoMatchError(err) {
				unknown = append(unknown, gvk.String())
				continue
			}
			return fmt.Errorf("mapping %s to a resource: %w", gvk, err)
		}
		if len(c.opts.Namespaces) > 0 && mapping.Scope.Name() == meta.RESTScopeNameRoot {
			clusterScoped = append(clusterScoped, gvk.Kind)
			continue
		}
		wanted[mapping.Resource] = gvk
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.withinBudgetLocked(app, wanted); err != nil {
		return err
	}
	previous := c.users[app]
	next := map[schema.GroupVersionResource]bool{}
	for gvr, gvk := range wanted {
		next[gvr] = true
		c.resources[gvk] = gvr
		if t, ok := c.types[gvr]; ok && !t.stopped() {
			continue
		}
		c.types[gvr] = c.start(gvr, gvk, nil)
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
	if len(clusterScoped) > 0 {
		return fmt.Errorf("%w (%v): cluster-scoped kinds %v cannot be watched", ErrOutOfScope, c.opts.Namespaces, clusterScoped)
	}
	return nil
}

// withinBudgetLocked fails when watching wanted too would take the cache
// beyond Options.MaxTypes kinds. c.mu is held.
func (c *Cache) withinBudgetLocked(app types.NamespacedName, wanted map[schema.GroupVersionResource]schema.GroupVersionKind) error {
	if c.opts.MaxTypes <= 0 {
		return nil
	}
	after := map[schema.GroupVersionResource]bool{}
	for user, used := range c.users {
		if user == app {
			continue // its kinds are replaced by wanted
		}
		for gvr := range used {
			after[gvr] = true
		}
	}
	for gvr := range wanted {
		after[gvr] = true
	}
	if len(after) > c.opts.MaxTypes {
		return fmt.Errorf("%w: the App's kinds would make this cluster's cache watch %d kinds, more than its limit of %d", ErrTooManyKinds, len(after), c.opts.MaxTypes)
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
	if t, ok := c.successors[gvr]; ok {
		t.stop()
		delete(c.successors, gvr)
		c.closeWaitingLocked()
	}
	for gvk, r := range c.resources {
		if r == gvr {
			delete(c.resources, gvk)
		}
	}
}

// Len is the number of objects the informers hold; those of informers
// still listing to take over from others (Narrow) are not counted, so
// during a change of slots the process holds more than Len says.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, t := range c.types {
		for _, informer := range t.informers {
			n += len(informer.GetStore().ListKeys())
		}
	}
	return n
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
	for gvr, t := range c.successors {
		t.stop()
		<-t.done
		delete(c.successors, gvr)
	}
	c.closeWaitingLocked()
	c.users = map[types.NamespacedName]map[schema.GroupVersionResource]bool{}
	c.resources = map[schema.GroupVersionKind]schema.GroupVersionResource{}
}

// start creates and runs the informer of one type, of the current
// selection; predecessor, when not nil, is the informer it is to replace.
// c.mu is held.
func (c *Cache) start(gvr schema.GroupVersionResource, gvk schema.GroupVersionKind, predecessor *typeInformer) *typeInformer {
	ctx, cancel := context.WithCancel(context.Background())
	t := &typeInformer{gvk: gvk, informers: map[string]cache.SharedIndexInformer{}, handlers: map[string]cache.ResourceEventHandlerRegistration{},
		seenRV: map[string]string{}, lastErr: map[string]error{}, stop: cancel, done: make(chan struct{}), selection: c.selection}
	t.predecessor.Store(predecessor)
	namespaces := c.opts.Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	var running sync.WaitGroup
	for _, namespace := range namespaces {
		informer := c.informerOf(t, gvr, namespace)
		t.informers[namespace] = informer
		running.Go(func() { informer.RunWithContext(ctx) })
	}
	go func() {
		defer close(t.done)
		running.Wait()
	}()
	return t
}

// informerOf creates the informer of gvr in one namespace (or all) for t.
func (c *Cache) informerOf(t *typeInformer, gvr schema.GroupVersionResource, namespace string) cache.SharedIndexInformer {
	selector := selectorOf(t.selection)
	informer := dynamicinformer.NewFilteredDynamicInformer(c.client, gvr, namespace, 0,
		cache.Indexers{},
		func(opts *metav1.ListOptions) { opts.LabelSelector = selector }, // only objects plumb owns (of the slots held)
	).Informer()
	// The cache keeps objects compacted (package compact).
	_ = informer.SetTransform(compact.Transform)
	_ = informer.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		t.mu.Lock()
		if namespace != metav1.NamespaceAll {
			err = fmt.Errorf("in namespace %s: %w", namespace, err)
		}
		t.lastErr[namespace] = err
		t.mu.Unlock()
	})
	// Handlers run after the store has the event's object, and raise seenRV
	// only once they have reported the event: so seenRV never runs ahead of
	// what Get returns, nor of the events reported.
	t.handlers[namespace], _ = informer.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initialList bool) {
			defer t.saw(namespace, obj)
			if initialList && t.knownToPredecessor(namespace, obj) {
				return
			}
			if !c.ownWrite(obj) {
				c.notify(obj)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			defer t.saw(namespace, newObj)
			if oldKey, ok := keyOf(oldObj); ok {
				if newKey, _ := keyOf(newObj); newKey != oldKey {
					c.opts.OnEvent(oldKey) // the object left that App
					c.notify(newObj)
					return
				}
			}
			if !relevant(oldObj, newObj) {
				// A resync or a status update (by the object's own
				// controller): only a change of health matters, and needs
				// no tick, only a new assessment.
				if healthChanged(oldObj, newObj) {
					if key, ok := keyOf(newObj); ok {
						c.opts.OnHealth(key)
					}
				}
				return
			}
			if c.ownWrite(newObj) {
				return // plumb's own apply
			}
			c.notify(newObj)
		},
		DeleteFunc: func(obj any) {
			defer t.saw(namespace, obj)
			c.notify(obj)
		},
	})
	return informer
}

// selectorOf is the label selector of the objects of a selection of slots
// (nil: every object with the ownership label). An empty selection selects
// nothing: no object has the slot label value "none".
func selectorOf(selection map[string]bool) string {
	if selection == nil {
		return plumbv1.LabelAppName
	}
	values := slices.Sorted(maps.Keys(selection))
	if len(values) == 0 {
		values = []string{"none"}
	}
	return fmt.Sprintf("%s,%s in (%s)", plumbv1.LabelAppName, plumbv1.LabelSlot, strings.Join(values, ","))
}

// knownToPredecessor reports, for an object of the initial list of an
// informer that replaces another, that the other needs no event for it: it
// held the object at the same resourceVersion, or did not select the
// object's slot (its App is enqueued once the replacement took over).
func (t *typeInformer) knownToPredecessor(namespace string, obj any) bool {
	predecessor := t.predecessor.Load()
	o, ok := obj.(*compact.Object)
	if predecessor == nil || !ok {
		return false
	}
	if predecessor.selection != nil && !predecessor.selection[o.Label(plumbv1.LabelSlot)] {
		return true
	}
	informer, err := predecessor.informerFor(namespace)
	if err != nil {
		return false
	}
	key := o.GetName()
	if o.GetNamespace() != "" {
		key = o.GetNamespace() + "/" + key
	}
	held, exists, err := informer.GetIndexer().GetByKey(key)
	if err != nil || !exists {
		return false
	}
	if h, ok := held.(*compact.Object); !ok || h.GetResourceVersion() != o.GetResourceVersion() {
		return false
	}
	// The store has it before the handler reported it: an event still
	// queued for the handler would be lost when the predecessor stops.
	predecessor.mu.Lock()
	seen := predecessor.seenRV[namespace]
	predecessor.mu.Unlock()
	cmp, err := resourceversion.CompareResourceVersion(seen, o.GetResourceVersion())
	return err == nil && cmp >= 0
}

// relevant are the keys of the informers that hold objects of namespaces
// (nil: every informer); namespaces t does not watch are left out.
func (t *typeInformer) relevant(namespaces []string) []string {
	if _, all := t.informers[metav1.NamespaceAll]; all {
		return []string{metav1.NamespaceAll}
	}
	var keys []string
	for ns := range t.informers {
		if namespaces == nil || slices.Contains(namespaces, ns) {
			keys = append(keys, ns)
		}
	}
	slices.Sort(keys)
	return keys
}

// hasSynced reports whether the informers of keys have listed their objects.
func (t *typeInformer) hasSynced(keys []string) bool {
	for _, key := range keys {
		if !t.informers[key].HasSynced() {
			return false
		}
	}
	return true
}

// keyFor is the key of the informer that holds objects of namespace ("" for
// a cluster-scoped object): "" when one informer watches every namespace;
// false when no informer watches namespace.
func (t *typeInformer) keyFor(namespace string) (string, bool) {
	if _, all := t.informers[metav1.NamespaceAll]; all {
		return metav1.NamespaceAll, true
	}
	_, watched := t.informers[namespace]
	return namespace, watched
}

// informerFor is the informer that holds objects of namespace ("" for a
// cluster-scoped object).
func (t *typeInformer) informerFor(namespace string) (cache.SharedIndexInformer, error) {
	if key, ok := t.keyFor(namespace); ok {
		return t.informers[key], nil
	}
	watched := make([]string, 0, len(t.informers))
	for ns := range t.informers {
		watched = append(watched, ns)
	}
	slices.Sort(watched)
	return nil, fmt.Errorf("%w (%v): %s in namespace %q", ErrOutOfScope, watched, t.gvk.Kind, namespace)
}

// ownWrite asks Options.IsOwnWrite about an event's object.
func (c *Cache) ownWrite(obj any) bool {
	o, ok := obj.(*compact.Object)
	return ok && c.opts.IsOwnWrite != nil && c.opts.IsOwnWrite(o)
}

// saw raises the seenRV of the informer of namespace to the event object's
// resourceVersion.
func (t *typeInformer) saw(namespace string, obj any) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	o, ok := obj.(*compact.Object)
	if !ok {
		return
	}
	rv := o.GetResourceVersion()
	t.mu.Lock()
	defer t.mu.Unlock()
	if seen := t.seenRV[namespace]; seen == "" {
		t.seenRV[namespace] = rv
	} else if cmp, err := resourceversion.CompareResourceVersion(rv, seen); err == nil && cmp > 0 {
		t.seenRV[namespace] = rv
	}
}

// relevant is compact.Relevant for an update's objects; an update of an
// object that is no compact.Object is relevant.
func relevant(oldObj, newObj any) bool {
	o, ok1 := oldObj.(*compact.Object)
	n, ok2 := newObj.(*compact.Object)
	return !ok1 || !ok2 || compact.Relevant(o, n)
}

// healthChanged reports an update that changed the object's kstatus health.
func healthChanged(oldObj, newObj any) bool {
	o, ok1 := oldObj.(*compact.Object)
	n, ok2 := newObj.(*compact.Object)
	return ok1 && ok2 && compact.HealthChanged(o, n)
}

func (t *typeInformer) stopped() bool {
	select {
	case <-t.done:
		return true
	default:
		return false
	}
}

// notify turns an event's object (or a tombstone) into its App's key.
func (c *Cache) notify(obj any) {
	if key, ok := keyOf(obj); ok {
		c.opts.OnEvent(key)
	}
}

// keyOf is the owning App's key of an object or a tombstone.
func keyOf(obj any) (types.NamespacedName, bool) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	o, ok := obj.(*compact.Object)
	if !ok {
		return types.NamespacedName{}, false
	}
	name, namespace := o.Label(plumbv1.LabelAppName), o.Label(plumbv1.LabelAppNamespace)
	if name == "" || namespace == "" {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: namespace, Name: name}, true
}

// WaitForSync waits until the informers of these kinds that hold objects of
// namespaces (nil: of every namespace they watch) have listed their
// objects, or ctx ends. It names each kind that did not sync and why. With
// an informer per namespace, one namespace that cannot be listed (its Role
// is gone) fails only the Apps with objects there.
func (c *Cache) WaitForSync(ctx context.Context, gvks []schema.GroupVersionKind, namespaces []string) error {
	for _, gvk := range gvks {
		t, err := c.typeOf(gvk)
		if err != nil {
			return err
		}
		keys := t.relevant(namespaces)
		for !t.hasSynced(keys) {
			select {
			case <-ctx.Done():
				return t.syncError(keys, ctx.Err())
			case <-t.done:
				if next, err := c.typeOf(gvk); err == nil && next != t {
					t, keys = next, next.relevant(namespaces) // replaced by one of a new selection
					continue
				}
				return t.syncError(keys, errors.New("informer stopped"))
			case <-time.After(20 * time.Millisecond):
			}
			// Errors that retrying will not fix soon end the wait at once.
			if last := t.lastError(keys); last != nil && (apierrors.IsNotFound(last) || apierrors.IsForbidden(last) || apierrors.IsUnauthorized(last)) {
				return t.syncError(keys, nil)
			}
		}
	}
	return nil
}

// lastError is the last list/watch error of the first informer of keys
// that has one.
func (t *typeInformer) lastError(keys []string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, key := range keys {
		if err := t.lastErr[key]; err != nil {
			return err
		}
	}
	return nil
}

func (t *typeInformer) syncError(keys []string, cause error) error {
	if last := t.lastError(keys); last != nil {
		return fmt.Errorf("%w: %s: %v", ErrNotSynced, t.gvk.Kind, last)
	}
	return fmt.Errorf("%w: %s: %v", ErrNotSynced, t.gvk.Kind, cause)
}

func (c *Cache) typeOf(gvk schema.GroupVersionKind) (*typeInformer, error) {
	c.mu.Lock()
	t, ok := c.types[c.resources[gvk]]
	c.mu.Unlock()
	if ok {
		return t, nil
	}
	mapping, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		if meta.IsNoMatchError(err) {
			return nil, fmt.Errorf("%w: %s", ErrUnknownKind, gvk)
		}
		return nil, err
	}
	c.mu.Lock()
	t, ok = c.types[mapping.Resource]
	c.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%w %s: call Ensure first", ErrNotStarted, gvk)
	}
	return t, nil
}

// Get returns the cached object, or nil when the cache has none (it does not
// exist, plumb does not own it, or, when Partial, it is not labelled with
// a slot the cache holds). The object is compacted and shared with
// the cache (it is immutable).
func (c *Cache) Get(gvk schema.GroupVersionKind, namespace, name string) (*compact.Object, error) {
	t, err := c.typeOf(gvk)
	if err != nil {
		return nil, err
	}
	key := name
	if namespace != "" {
		key = namespace + "/" + name
	}
	informer, err := t.informerFor(namespace)
	if err != nil {
		return nil, err
	}
	obj, exists, err := informer.GetIndexer().GetByKey(key)
	if err != nil || !exists {
		return nil, err
	}
	o, ok := obj.(*compact.Object)
	if !ok {
		return nil, fmt.Errorf("the cache of %s holds a %T", gvk.Kind, obj)
	}
	return o, nil
}

// Fetch reads one object whole from the API server, with plumb's own
// identity (the one the cache watches with), and returns it with its
// content (compact.Whole); nil when it does not exist. The Diff phase calls
// it only to describe a drift that the cache showed: it is one request per
// drifted object, never one per object and tick.
func (c *Cache) Fetch(ctx context.Context, gvk schema.GroupVersionKind, namespace, name string) (*compact.Object, error) {
	c.mu.Lock()
	gvr, ok := c.resources[gvk]
	c.mu.Unlock()
	if !ok {
		mapping, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return nil, fmt.Errorf("mapping %s to a resource: %w", gvk, err)
		}
		gvr = mapping.Resource
	}
	var resource dynamic.ResourceInterface = c.client.Resource(gvr)
	if namespace != "" {
		resource = c.client.Resource(gvr).Namespace(namespace)
	}
	u, err := resource.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s %s: %w", gvk.Kind, name, err)
	}
	return compact.Whole(u)
}

// WaitForResourceVersion waits until the informer that holds gvk's objects
// of namespace ("" for cluster-scoped ones) has handled an event at
// resourceVersion rv or later (e.g. the one for plumb's own write), so that
// Get reflects that write, or what happened to the object after it.
func (c *Cache) WaitForResourceVersion(ctx context.Context, gvk schema.GroupVersionKind, namespace, rv string) error {
	t, err := c.typeOf(gvk)
	if err != nil {
		return err
	}
	key, watched := t.keyFor(namespace)
	if !watched {
		return nil // out of scope: Get says so
	}
	for {
		t.mu.Lock()
		seen := t.seenRV[key]
		t.mu.Unlock()
		if seen != "" {
			if cmp, err := resourceversion.CompareResourceVersion(seen, rv); err != nil || cmp >= 0 {
				return nil // an RV that does not compare cannot be waited for
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %s has not caught up with resourceVersion %s (at %q): %v", ErrNotSynced, gvk.Kind, rv, seen, ctx.Err())
		case <-t.done:
			next, err := c.typeOf(gvk)
			if err != nil || next == t {
				return fmt.Errorf("%w: %s: informer stopped", ErrNotSynced, gvk.Kind)
			}
			// Replaced by one of a new selection (Narrow): it lists, then
			// watches, so it sees rv unless the object left its selection.
			if key, watched = next.keyFor(namespace); !watched {
				return nil
			}
			t = next
		case <-time.After(10 * time.Millisecond):
		}
	}
}
