package reconcile

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	fluxssa "github.com/fluxcd/pkg/ssa"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/diff"
	"github.com/plumb-dev/plumb/internal/health"
	"github.com/plumb-dev/plumb/ssa"
)

// apply runs the Apply phase: one server-side apply per object in the
// plan, one guarded JSON patch per object whose list items others added
// to, then the prune of what left Git. It records what each write produced
// (the diff Record and the resourceVersion), so that the next tick diffs
// from the cache and the informers know plumb's own writes. Events that
// arrive meanwhile are held and, when one was not plumb's write after all,
// the App is enqueued again.
func (s *pass) apply(ctx context.Context) (*fluxssa.ChangeSet, error) {
	r, key := s.r, s.key
	log := s.log.With(zap.String("phase", string(PhaseApply)))
	r.memory.beginWrites(key)
	defer func() {
		if r.memory.endWrites(key) {
			r.ObjectChanged(key)
		}
	}()
	changes := fluxssa.NewChangeSet()
	if sa := r.serviceAccountOf(s.app); sa != "" {
		if err := s.authorize(ctx, sa); err != nil {
			return changes, err
		}
	}
	if s.order.ordered() {
		return changes, s.applyOrdered(ctx, changes, log)
	}
	// status.sync is an ordered revision's: the hooks still running of the
	// last one end first.
	if waiting, err := s.letHooksEnd(ctx, s.app.Status.Sync); err != nil || waiting != "" {
		s.syncWaiting = waiting
		return changes, err
	}
	s.app.Status.Sync = nil
	return changes, s.applyAll(ctx, changes, log)
}

// applyAll applies every object of the plan at once, then prunes: an
// unordered revision's Apply phase, and an ordered one's heal.
func (s *pass) applyAll(ctx context.Context, changes *fluxssa.ChangeSet, log *zap.Logger) error {
	if err := s.applyObjects(ctx, changes, s.planned.apply, log); err != nil {
		return err
	}
	if err := s.removeAdditions(ctx, changes); err != nil {
		return err
	}
	kept, err := s.prune(ctx, changes, log)
	if err != nil {
		return err
	}
	s.recordApplied(kept)
	return nil
}

// applyObjects applies objects of the plan with server-side apply, and
// remembers what each became. When the apply fails, the inventory gains
// what exists now (applied before, or by this tick), never an object that
// was refused: a later tick could not prune it, nor the finalizer.
func (s *pass) applyObjects(ctx context.Context, changes *fluxssa.ChangeSet, objects []*unstructured.Unstructured, log *zap.Logger) error {
	r, app, key, desired, live := s.r, s.app, s.key, s.desired, s.live
	if len(objects) == 0 {
		return nil
	}
	applied, cs, err := s.applier.ApplyDirect(ctx, objects, ssa.DirectOptions{
		Force:  app.Spec.Force,
		Exists: func(o *unstructured.Unstructured) bool { return live[idOf(o)] != nil },
		Wait:   fluxssa.WaitOptions{Interval: 500 * time.Millisecond, Timeout: time.Minute},
	})
	for _, a := range applied {
		id := idOf(a.Desired)
		r.memory.wrote(key, id, a.Live.GetResourceVersion())
		r.memory.wroteHealth(key, id, health.Of(a.Live))
		if rec, recErr := diff.RecordOf(a.Desired, a.Live); recErr == nil {
			r.memory.remember(key, id, rec)
		}
		if cluster := s.target.Cluster; isCRD(a.Desired) && cluster != nil {
			cluster.Invalidate()
		}
	}
	if cs != nil {
		changes.Append(s.withoutRelabels(cs.Entries))
	}
	if err != nil {
		exists := map[objectID]bool{}
		for _, a := range applied {
			exists[idOf(a.Desired)] = true
		}
		var refs []plumbv1.ObjectRef
		for _, d := range desired {
			if exists[idOf(d)] || live[idOf(d)] != nil {
				refs = append(refs, refOf(d))
			}
		}
		setInventory(app, mergeRefs(app.Status.Inventory, refs), r.appliedFields(key, desired), s.inventoryWave)
		return &PhaseError{Phase: PhaseApply, Reason: plumbv1.ReasonApplyFailed, Err: redactedFor(err, objects...)}
	}
	log.Info("Applied objects", zap.Int("changed", len(objects)))
	return nil
}

// withoutRelabels leaves out the entries of objects applied only to gain
// the slot label (applied by a plumb from before it): not a change of
// the App's, so no Event, change set entry or change metric.
func (s *pass) withoutRelabels(entries []fluxssa.ChangeSetEntry) []fluxssa.ChangeSetEntry {
	if s.planned == nil || len(s.planned.relabelled) == 0 {
		return entries
	}
	out := make([]fluxssa.ChangeSetEntry, 0, len(entries))
	for _, e := range entries {
		m := e.ObjMetadata
		relabelled := s.planned.relabelled[objectID{Group: m.GroupKind.Group, Kind: m.GroupKind.Kind, Namespace: m.Namespace, Name: m.Name}]
		if !relabelled || e.Action != fluxssa.ConfiguredAction { // created: it was deleted meanwhile, a change
			out = append(out, e)
		}
	}
	return out
}

// removeAdditions heals the fields other managers added inside plumb's
// list items, which server-side apply keeps: one guarded JSON patch per
// object.
func (s *pass) removeAdditions(ctx context.Context, changes *fluxssa.ChangeSet) error {
	r, key, p := s.r, s.key, s.planned
	for id, d := range p.drifted {
		if p.left[id] || len(d.additions) == 0 || d.live == nil {
			continue
		}
		patch, err := json.Marshal(d.additions)
		var patched *unstructured.Unstructured
		if err == nil {
			patched, err = s.applier.RemoveAdditions(ctx, d.live.Identity(), patch)
		}
		if err != nil {
			var desired *unstructured.Unstructured
			if i := slices.IndexFunc(s.desired, func(o *unstructured.Unstructured) bool { return idOf(o) == id }); i >= 0 {
				desired = s.desired[i]
			}
			return &PhaseError{Phase: PhaseApply, Reason: plumbv1.ReasonApplyFailed, Err: redactedFor(err, desired)}
		}
		r.memory.wrote(key, id, patched.GetResourceVersion())
		r.memory.wroteHealth(key, id, health.Of(patched))
		changes.Add(fluxssa.ChangeSetEntry{Subject: id.String(), Action: fluxssa.ConfiguredAction})
	}
	return nil
}

// inventoryWave is the wave an object of the inventory was applied in:
// the revision's for a desired object, else what the inventory said.
func (s *pass) inventoryWave(id objectID) int32 {
	if s.order != nil {
		if w, ok := s.order.waves[id]; ok {
			return int32(w)
		}
	}
	if s.lastWaves == nil {
		s.lastWaves = map[objectID]int32{}
		if inv := s.app.Status.Inventory; inv != nil {
			for _, e := range inv.Entries {
				if e.Wave != 0 {
					s.lastWaves[idOfRef(e.ObjectRef)] = e.Wave
				}
			}
		}
	}
	return s.lastWaves[id]
}

// recordApplied sets the inventory to the desired objects and those pruning
// kept, and forgets what the memory held of objects that left Git.
func (s *pass) recordApplied(kept []plumbv1.KeptObject) {
	r, app, key, desired := s.r, s.app, s.key, s.desired
	refs := refsOf(desired)
	for _, k := range kept {
		refs = append(refs, k.ObjectRef)
	}
	setInventory(app, refs, r.appliedFields(key, desired), s.inventoryWave)
	app.Status.Kept = kept
	ids := map[objectID]bool{}
	for _, d := range desired {
		ids[idOf(d)] = true
	}
	r.memory.keepOnly(key, ids)
}

// prune deletes what left Git (when the App prunes), adding to changes. It
// returns the objects that left Git but that the prune guard keeps: they
// stay in the inventory, so that the first tick after their annotation
// allows it prunes them. Whether an object the last tick kept is still
// kept is read from the informer cache (it still carries the App's labels):
// an unchanged tick asks the API server nothing about it.
func (s *pass) prune(ctx context.Context, changes *fluxssa.ChangeSet, log *zap.Logger) ([]plumbv1.KeptObject, error) {
	r, app, applier := s.r, s.app, s.applier
	if !app.Spec.PruneEnabled() {
		return nil, nil
	}
	owner := ssa.Owner{Name: app.Name, Namespace: app.Namespace}
	var kept []plumbv1.KeptObject
	var stale []*unstructured.Unstructured
	for _, obj := range s.stale() {
		if guard, ok := r.keptInCache(s.target, obj, owner); ok {
			kept = append(kept, keptObject(obj, guard))
			changes.Add(fluxssa.ChangeSetEntry{Subject: idOf(obj).String(), Action: ssa.KeptAction})
			continue
		}
		stale = append(stale, obj)
	}
	// Higher waves first (all in one call when the App has no waves); a
	// wave that fails leaves the lower ones.
	for _, wave := range s.byWaveDescending(stale) {
		cs, guarded, err := applier.Prune(ctx, wave, owner)
		if cs != nil {
			changes.Append(cs.Entries)
			r.reportUnserved(app, cs)
		}
		for _, k := range guarded {
			kept = append(kept, keptObject(k.Object, k.Guard))
		}
		if err != nil {
			return nil, &PhaseError{Phase: PhaseApply, Reason: plumbv1.ReasonPruneFailed, Err: err}
		}
		log.Info("Pruned objects", zap.Int("stale", len(wave)), zap.Int("kept", len(guarded)))
	}
	r.reportKept(app, kept)
	return kept, nil
}

// byWaveDescending groups stale objects by the wave they were applied in,
// the highest first.
func (s *pass) byWaveDescending(stale []*unstructured.Unstructured) [][]*unstructured.Unstructured {
	if len(stale) == 0 {
		return nil
	}
	groups := map[int32][]*unstructured.Unstructured{}
	var waves []int32
	for _, obj := range stale {
		w := s.inventoryWave(idOf(obj))
		if _, ok := groups[w]; !ok {
			waves = append(waves, w)
		}
		groups[w] = append(groups[w], obj)
	}
	slices.Sort(waves)
	slices.Reverse(waves)
	out := make([][]*unstructured.Unstructured, 0, len(waves))
	for _, w := range waves {
		out = append(out, groups[w])
	}
	return out
}

// keptInCache reports whether the informer cache shows obj, still the
// owner's, as kept by the prune guard. Anything else (not cached, not the
// owner's any more, its kind not watched, the guard lifted) is for Prune
// to decide from the API server.
func (r *Reconciler) keptInCache(target *Target, obj *unstructured.Unstructured, owner ssa.Owner) (ssa.Guard, bool) {
	live, err := target.Observer.Get(obj.GroupVersionKind(), obj.GetNamespace(), obj.GetName())
	if err != nil || live == nil || !owner.OwnsLive(live) {
		return ssa.Guard{}, false
	}
	return ssa.PruneGuardLive(live)
}

func keptObject(obj *unstructured.Unstructured, guard ssa.Guard) plumbv1.KeptObject {
	return plumbv1.KeptObject{ObjectRef: refOf(obj), Reason: guard.Reason, Message: guard.Message}
}

// reportKept records a NotPruned Event naming each object the prune guard
// keeps that the App's status did not list as kept yet, and why.
func (r *Reconciler) reportKept(app *plumbv1.App, kept []plumbv1.KeptObject) {
	before := map[objectID]bool{}
	for _, k := range app.Status.Kept {
		before[idOfRef(k.ObjectRef)] = true
	}
	var parts []string
	for _, k := range kept {
		if !before[idOfRef(k.ObjectRef)] {
			parts = append(parts, fmt.Sprintf("%s (%s)", idOfRef(k.ObjectRef), k.Message))
		}
	}
	if len(parts) == 0 {
		return
	}
	parts = cutList(parts)
	r.Events.Eventf(app, corev1.EventTypeNormal, plumbv1.ReasonNotPruned, "kept what left Git, still labelled as this App's: %s",
		strings.Join(parts, "; "))
}

// reportUnserved records an Event naming the objects prune found nothing
// to delete for, because the server no longer serves their kinds.
func (r *Reconciler) reportUnserved(app *plumbv1.App, cs *fluxssa.ChangeSet) {
	var gone []string
	for _, e := range cs.Entries {
		if e.Action == ssa.UnservedAction {
			gone = append(gone, e.Subject)
		}
	}
	if len(gone) == 0 {
		return
	}
	gone = cutList(gone)
	r.Events.Eventf(app, corev1.EventTypeNormal, plumbv1.ReasonKindNotServed,
		"nothing to prune for %s: the API server no longer serves their kinds (their CRDs were removed)", strings.Join(gone, ", "))
}

// staleObjects are the inventory entries that are not desired any more, as
// objects that carry just their identity. An entry is compared by the
// scope its kind has (the server's, or the scope a CRD in the render
// declares): an object that is desired under any spelling of its ID (a
// cluster-scoped one recorded with a namespace, say) is never stale.
func (s *pass) stale() []*unstructured.Unstructured {
	stale := s.r.staleObjects(s.app.Status.Inventory, s.desired, s.kinds)
	if s.order == nil || len(s.order.hookIDs) == 0 {
		return stale
	}
	out := stale[:0:0]
	for _, obj := range stale {
		if !s.order.hookIDs[idOf(obj)] {
			out = append(out, obj)
		}
	}
	return out
}

// staleObjects are the objects of the inventory that are not desired.
func (r *Reconciler) staleObjects(inv *plumbv1.Inventory, desired []*unstructured.Unstructured, kinds *tickKinds) []*unstructured.Unstructured {
	if inv == nil {
		return nil
	}
	want := map[objectID]bool{}
	for _, d := range desired {
		want[idOf(d)] = true
	}
	var stale []*unstructured.Unstructured
	for _, e := range inv.Entries {
		ref := e.ObjectRef
		id := idOfRef(ref)
		nameOnly := id
		nameOnly.Namespace = ""
		if want[id] || want[nameOnly] {
			continue // desired; a cluster-scoped one may have been recorded with a namespace
		}
		gvk := schema.GroupVersionKind{Group: ref.Group, Version: ref.Version, Kind: ref.Kind}
		if kinds.clusterScoped(gvk) {
			id.Namespace = ""
		}
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(gvk)
		u.SetNamespace(id.Namespace)
		u.SetName(ref.Name)
		stale = append(stale, u)
	}
	return stale
}

// clusterScoped reports a kind the server (or a CRD in the render) says is
// cluster-scoped.
func (k *tickKinds) clusterScoped(gvk schema.GroupVersionKind) bool {
	if scope, ok := k.pending[gvk]; ok {
		return scope == meta.RESTScopeNameRoot
	}
	scope, err := k.served(gvk)
	return err == nil && scope == meta.RESTScopeNameRoot
}

func isCRD(u *unstructured.Unstructured) bool {
	return u.GetKind() == "CustomResourceDefinition" && u.GroupVersionKind().Group == "apiextensions.k8s.io"
}

// appliedFields looks up, for the inventory, the digest of the fields plumb
// owned after its last write or confirmation of an object of the App —
// only where that write was of the object's whole content in Git. An
// object applied without fields left to a manager that keeps changing them
// gets none: after a restart (which forgets what was left to whom) it is
// asked about with a dry-run, which shows the conflict again, rather than
// taken as it is.
func (r *Reconciler) appliedFields(key types.NamespacedName, desired []*unstructured.Unstructured) func(objectID) string {
	gitHash := make(map[objectID]string, len(desired))
	for _, d := range desired {
		gitHash[idOf(d)] = annotationOf(d, plumbv1.AnnotationContentHash)
	}
	return func(id objectID) string {
		if rec := r.memory.record(key, id); rec != nil && rec.DesiredHash == gitHash[id] {
			return rec.FieldsDigest()
		}
		return ""
	}
}
