package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/informers"
	"github.com/plumb-dev/plumb/informers/compact"
	"github.com/plumb-dev/plumb/internal/diff"
	"github.com/plumb-dev/plumb/internal/source"
	"github.com/plumb-dev/plumb/internal/syncorder"
	"github.com/plumb-dev/plumb/ssa"
)

// tickKinds is what one tick knows about the kinds it handles: the
// RESTMapper's answer for each kind, asked once per kind and tick rather
// than once per object, and the kinds the API server does not serve yet
// because their CRDs come with this very render, with the scope each CRD
// declares (pending). Objects of pending kinds are neither observed nor
// dry-run. A tickKinds lives for one tick: a later tick asks afresh, so
// that CRDs added or removed meanwhile count.
type tickKinds struct {
	mapper  meta.RESTMapper
	pending map[schema.GroupVersionKind]meta.RESTScopeName
	answers map[schema.GroupVersionKind]scopeAnswer
}

// scopeAnswer is the RESTMapper's answer for one kind.
type scopeAnswer struct {
	scope meta.RESTScopeName
	err   error
}

func newTickKinds(mapper meta.RESTMapper) *tickKinds {
	return &tickKinds{mapper: mapper, pending: map[schema.GroupVersionKind]meta.RESTScopeName{},
		answers: map[schema.GroupVersionKind]scopeAnswer{}}
}

// served returns the scope of a kind the API server serves, asking the
// RESTMapper the first time the tick needs it.
func (k *tickKinds) served(gvk schema.GroupVersionKind) (meta.RESTScopeName, error) {
	if a, ok := k.answers[gvk]; ok {
		return a.scope, a.err
	}
	var a scopeAnswer
	mapping, err := k.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		a.err = err
	} else {
		a.scope = mapping.Scope.Name()
	}
	k.answers[gvk] = a
	return a.scope, a.err
}

// isPending reports a kind whose CRD comes with this render.
func (k *tickKinds) isPending(gvk schema.GroupVersionKind) bool {
	_, ok := k.pending[gvk]
	return ok
}

// prepare decodes the rendered objects (each a copy of the tick's own; the
// render cache keeps them encoded), gives them the namespace the server will — none for a
// cluster-scoped kind, the target namespace for a namespaced object that
// names none — and stamps them with the App's labels and their content
// hash. The hash of an object prepared from the very rendered object of
// the last tick, at the same generation (and so the same namespace, which
// its ID holds), is not computed again: an unchanged tick hashes nothing.
func (r *Reconciler) prepare(app *plumbv1.App, result *source.Result, target *Target) ([]*unstructured.Unstructured, *tickKinds, *ordering, error) {
	key := types.NamespacedName{Namespace: app.Namespace, Name: app.Name}
	revision := result.Revision.String()
	// Helm's install: until a revision of the App was applied (a failed
	// install is installed again, as Helm does).
	order := &ordering{waves: map[objectID]int{}, hookIDs: map[objectID]bool{}, install: app.Status.LastAppliedRevision == ""}
	runs := 0 // the hooks' runs of a sync (one per phase): status.sync.hooks holds them all
	owner := ssa.Owner{Name: app.Name, Namespace: app.Namespace}
	defaultNamespace := app.Namespace
	if app.Spec.TargetNamespace != "" {
		defaultNamespace = app.Spec.TargetNamespace
	}
	defined, crds, err := definedKinds(result)
	if err != nil {
		return nil, nil, nil, &PhaseError{Phase: PhaseDiff, Reason: plumbv1.ReasonDiffFailed, Err: err}
	}
	kinds := newTickKinds(target.Mapper)
	desired := make([]*unstructured.Unstructured, 0, len(result.Objects))
	for _, o := range result.Objects {
		obj, decoded := crds[o]
		if !decoded {
			if obj, err = o.Decode(); err != nil {
				return nil, nil, nil, &PhaseError{Phase: PhaseDiff, Reason: plumbv1.ReasonDiffFailed, Err: err}
			}
		}
		diff.Normalize(obj)
		gvk := obj.GroupVersionKind()
		scope, err := kinds.served(gvk)
		if meta.IsNoMatchError(err) {
			if s, ok := defined[gvk.GroupKind()]; ok {
				// Its CRD is in this very render and is applied first.
				scope, err = s, nil
				kinds.pending[gvk] = s
				if target.Cluster != nil {
					target.Cluster.Invalidate() // the next read's .Capabilities will include it
				}
			}
		}
		if err != nil {
			return nil, nil, nil, &PhaseError{Phase: PhaseObserve, Reason: plumbv1.ReasonObserveFailed, Detail: "UnknownKind",
				Err: fmt.Errorf("%s (from %s): %w", gvk, o.Source, err)}
		}
		switch {
		case scope != meta.RESTScopeNameNamespace:
			obj.SetNamespace("")
		case obj.GetNamespace() == "":
			obj.SetNamespace(defaultNamespace)
		}
		place, applied, err := syncorder.Place(obj, order.install)
		if err != nil {
			return nil, nil, nil, &PhaseError{Phase: PhaseRead, Reason: plumbv1.ReasonReadFailed, Detail: string(source.ReasonInvalidManifest),
				Err: fmt.Errorf("%s (from %s): %w", revision, o.Source, err)}
		}
		if (place.Hook || !applied) && obj.GetName() != "" {
			order.hookIDs[idOf(obj)] = true // never pruned, though an older plumb applied it as an object
		}
		if !applied {
			continue // a Skip hook, or a Helm hook of events plumb never runs
		}
		if place.Hook {
			order.deleteHooks = order.deleteHooks || place.In(syncorder.PreDelete) || place.In(syncorder.PostDelete)
			labels := obj.GetLabels()
			if labels == nil {
				labels = map[string]string{}
			}
			for k, v := range owner.Labels() { // its events reach the App's informers, and so the sync waiting for it
				labels[k] = v
			}
			labels[plumbv1.LabelSlot] = owner.Slot() // and a sharded replica's
			obj.SetLabels(labels)
			hook := hookObject{obj: obj, place: place, index: len(order.hooks) + len(order.idle)}
			if !runsNow(place, !app.DeletionTimestamp.IsZero()) {
				// Not run now (Helm's pre-install on an upgrade; delete hooks
				// while the App lives), but part of the content, and held to
				// the same rules as the others.
				order.idle = append(order.idle, hook)
				continue
			}
			if runs += len(place.Phases); runs > maxHookRuns {
				return nil, nil, nil, &PhaseError{Phase: PhaseRead, Reason: plumbv1.ReasonReadFailed, Detail: string(source.ReasonLimitExceeded),
					Err: fmt.Errorf("%s: more than %d hook runs in one sync (a hook counts once per phase)", revision, maxHookRuns)}
			}
			order.hooks = append(order.hooks, hook)
			continue
		}
		ignoreFor(app, obj).Strip(obj)
		id := idOf(obj)
		order.waves[id] = place.Wave
		last := r.memory.stampOf(key, id)
		if last.from != o || last.generation != app.Generation {
			last = stamp{from: o, generation: app.Generation}
		}
		hash, err := ssa.StampContent(obj, owner, last.hash)
		if err != nil {
			return nil, nil, nil, &PhaseError{Phase: PhaseDiff, Reason: plumbv1.ReasonDiffFailed, Err: err}
		}
		if last.hash != hash {
			last.hash = hash
			r.memory.setStamp(key, id, last)
		}
		desired = append(desired, obj)
	}
	if order.content, err = contentOf(desired, order); err != nil {
		return nil, nil, nil, &PhaseError{Phase: PhaseDiff, Reason: plumbv1.ReasonDiffFailed, Err: err}
	}
	return desired, kinds, order, nil
}

// runsNow says a hook runs now: a delete hook while the App is deleted, the
// others while it lives.
func runsNow(place syncorder.Placement, deleting bool) bool {
	if deleting {
		return place.In(syncorder.PreDelete) || place.In(syncorder.PostDelete)
	}
	return place.In(syncorder.PreSync) || place.In(syncorder.Sync) || place.In(syncorder.PostSync) || place.In(syncorder.SyncFail)
}

// ignoreFor collects the App's ignore rules that select obj.
func ignoreFor(app *plumbv1.App, obj *unstructured.Unstructured) diff.Ignore {
	var out diff.Ignore
	gvk := obj.GroupVersionKind()
	for _, rule := range app.Spec.Ignore {
		if rule.Kind == gvk.Kind && rule.Group == gvk.Group &&
			(rule.Namespace == "" || rule.Namespace == obj.GetNamespace()) &&
			(rule.Name == "" || rule.Name == obj.GetName()) {
			out = append(out, rule.Paths...)
		}
	}
	return out
}

// definedKinds are the kinds whose CRDs the render itself contains, with
// the scope each declares, and those CRDs decoded (each once a tick: they
// can be large).
func definedKinds(result *source.Result) (map[schema.GroupKind]meta.RESTScopeName, map[*source.Object]*unstructured.Unstructured, error) {
	out := map[schema.GroupKind]meta.RESTScopeName{}
	crds := map[*source.Object]*unstructured.Unstructured{}
	for _, rendered := range result.Objects {
		if rendered.GetKind() != "CustomResourceDefinition" || rendered.GroupVersionKind().Group != "apiextensions.k8s.io" {
			continue
		}
		o, err := rendered.Decode()
		if err != nil {
			return nil, nil, err
		}
		crds[rendered] = o
		group, _, _ := unstructured.NestedString(o.Object, "spec", "group")
		kind, _, _ := unstructured.NestedString(o.Object, "spec", "names", "kind")
		scope, _, _ := unstructured.NestedString(o.Object, "spec", "scope")
		out[schema.GroupKind{Group: group, Kind: kind}] = meta.RESTScopeNameNamespace
		if scope == "Cluster" {
			out[schema.GroupKind{Group: group, Kind: kind}] = meta.RESTScopeNameRoot
		}
	}
	return out, crds, nil
}

// catchUpTimeout bounds the wait for an informer to show plumb's own last
// write of an object (see observe).
const catchUpTimeout = 5 * time.Second

// observe starts (or reuses) the informers of every kind the App renders or
// has in its inventory, waits for them, and returns the live objects by ID.
// Where the cache has not yet seen an object as plumb last wrote it, it
// waits for the informer to catch up, so that a lagging cache is not taken
// for a deletion or a change by someone else.
func (r *Reconciler) observe(ctx context.Context, target *Target, key types.NamespacedName, app *plumbv1.App, desired []*unstructured.Unstructured,
	hooks []hookObject, tk *tickKinds, log *zap.Logger) (map[objectID]*compact.Object, error) {
	fail := func(detail string, err error) error {
		return &PhaseError{Phase: PhaseObserve, Reason: plumbv1.ReasonObserveFailed, Detail: detail, Err: err}
	}
	kinds := map[schema.GroupVersionKind]bool{}
	namespaces := map[string]bool{} // where the App's objects are: what the caches must have listed
	for _, obj := range desired {
		if !tk.isPending(obj.GroupVersionKind()) {
			kinds[obj.GroupVersionKind()] = true
			namespaces[obj.GetNamespace()] = true
		}
	}
	for _, h := range hooks { // watched, so that a hook's end brings the sync forward
		if gvk := h.obj.GroupVersionKind(); !tk.isPending(gvk) {
			kinds[gvk] = true
			namespaces[h.obj.GetNamespace()] = true
		}
	}
	if app.Status.Inventory != nil {
		for _, ref := range app.Status.Inventory.Entries {
			gvk := schema.GroupVersionKind{Group: ref.Group, Version: ref.Version, Kind: ref.Kind}
			if _, err := tk.served(gvk); err == nil {
				kinds[gvk] = true
				namespaces[ref.Namespace] = true
			}
		}
	}
	gvks := make([]schema.GroupVersionKind, 0, len(kinds))
	for gvk := range kinds {
		gvks = append(gvks, gvk)
	}
	if err := target.Observer.Ensure(key, gvks); err != nil {
		if errors.Is(err, informers.ErrOutOfScope) {
			return nil, fail("OutOfScope", err)
		}
		if errors.Is(err, informers.ErrTooManyKinds) {
			return nil, fail("TooManyKinds", err)
		}
		return nil, fail("UnknownKind", err)
	}
	timeout := r.SyncTimeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	syncCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	where := make([]string, 0, len(namespaces))
	for ns := range namespaces {
		where = append(where, ns)
	}
	if err := target.Observer.WaitForSync(syncCtx, gvks, where); err != nil {
		return nil, fail("CacheNotSynced", err)
	}
	r.catchUp(ctx, target, key, desired, kinds, log)
	live := map[objectID]*compact.Object{}
	for _, obj := range desired {
		if !kinds[obj.GroupVersionKind()] {
			continue // its kind is created by this tick
		}
		got, err := r.live(ctx, target, obj)
		if errors.Is(err, informers.ErrOutOfScope) {
			return nil, fail("OutOfScope", err)
		}
		if err != nil {
			return nil, fail("CacheRead", err)
		}
		if got != nil {
			live[idOf(obj)] = got
		}
	}
	return live, nil
}

// live is the live object of a desired or inventoried one, from the cache.
// A sharded replica's cache holds only the objects labelled with the slots
// it holds: one it lacks may exist without the slot label (applied by an
// older plumb, or labelled by hand) or belong to an App of another slot, so
// it is read from the API server (once: the apply then labels it, or the
// ownership check refuses it). An unchanged tick reads nothing.
func (r *Reconciler) live(ctx context.Context, target *Target, obj *unstructured.Unstructured) (*compact.Object, error) {
	got, err := target.Observer.Get(obj.GroupVersionKind(), obj.GetNamespace(), obj.GetName())
	if err != nil || got != nil || !target.Observer.Partial() {
		return got, err
	}
	fetched, err := target.Observer.Fetch(ctx, obj.GroupVersionKind(), obj.GetNamespace(), obj.GetName())
	if err != nil || fetched == nil || fetched.Label(plumbv1.LabelAppName) == "" {
		return nil, err // an object no App owns is not in any replica's cache either
	}
	return fetched, nil
}

// catchUp waits until each informer has seen plumb's last write of the
// App's objects of its kind (normally at once). After catchUpTimeout it
// goes on with what the cache has.
func (r *Reconciler) catchUp(ctx context.Context, target *Target, key types.NamespacedName, desired []*unstructured.Unstructured,
	kinds map[schema.GroupVersionKind]bool, log *zap.Logger) {
	// Per kind and namespace: an informer per namespace orders versions
	// only within its own watch.
	type place struct {
		gvk       schema.GroupVersionKind
		namespace string
	}
	newest := map[place]string{}
	for _, obj := range desired {
		gvk := obj.GroupVersionKind()
		rv := r.memory.writtenRV(key, idOf(obj))
		if !kinds[gvk] || rv == "" {
			continue
		}
		at := place{gvk, obj.GetNamespace()}
		if cmp, err := resourceversion.CompareResourceVersion(rv, newest[at]); newest[at] == "" || (err == nil && cmp > 0) {
			newest[at] = rv
		}
	}
	if len(newest) == 0 {
		return
	}
	waitCtx, cancel := context.WithTimeout(ctx, catchUpTimeout)
	defer cancel()
	for at, rv := range newest {
		if err := target.Observer.WaitForResourceVersion(waitCtx, at.gvk, at.namespace, rv); err != nil {
			// Not again next tick: the informer may have restarted and never
			// see that write (the object was deleted meanwhile).
			for _, obj := range desired {
				if obj.GroupVersionKind() == at.gvk && obj.GetNamespace() == at.namespace {
					r.memory.wrote(key, idOf(obj), "")
				}
			}
			log.Warn("Went on with a cache that has not caught up with plumb's last write", zap.Stringer("kind", at.gvk), zap.String("namespace", at.namespace), zap.Error(err))
		}
	}
}
