package reconcile

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	ssaerrors "github.com/fluxcd/pkg/ssa/errors"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/informers/compact"
	"github.com/plumb-dev/plumb/internal/diff"
	"github.com/plumb-dev/plumb/ssa"
)

// plan is what the Diff phase decided.
type plan struct {
	// apply are the objects to apply (created, changed in Git, or healed).
	apply []*unstructured.Unstructured
	// drifted are the objects someone else changed, with what changed.
	drifted map[objectID]drift
	// left are drifted objects not put back (alert policy).
	left map[objectID]bool
	// conflicts are, per object, the fields left to a manager that keeps
	// changing them (reported every tick while they last).
	conflicts map[objectID][]fieldConflict
	// relabelled are the objects of apply that Git did not change and
	// that only gain the slot label (applied by a plumb before it had the
	// label): applied quietly, no change of the App's content.
	relabelled map[objectID]bool
}

// drift is one drifted object.
type drift struct {
	obj *unstructured.Unstructured
	// live is the live object as the Diff phase last saw it: fetched whole
	// when the drift had to be described, else as cached.
	live       *compact.Object
	changes    []diff.Change
	additions  []diff.PatchOp // fields others added inside plumb's list items
	deleted    bool
	newEpisode bool // first detection since the object was last converged
	// newConflict is set at the tick a field is first left to a manager.
	newConflict bool
}

// maxHeals is how many times within conflictWindow plumb puts back a field
// that the same other manager changed, before it leaves that field to that
// manager and reports a conflict (until Git changes the object, or the
// manager lets go of the field). Other fields, and other managers, are
// still healed.
const maxHeals = 3

// differ runs one pass's Diff phase for an App: what each object's
// comparison needs, given once.
type differ struct {
	r       *Reconciler
	app     *plumbv1.App
	key     types.NamespacedName
	applier Applier
	target  *Target
	// log is the pass's logger for the Diff phase.
	log *zap.Logger

	// What plan sets for the objects it judges: the revision read, the
	// tick's kinds, the fields plumb owned after its last write (from the
	// inventory) and the Namespaces this tick creates.
	revision      string
	kinds         *tickKinds
	applied       map[objectID]string
	newNamespaces map[string]bool
	// owner is the App as the owner of its objects, and slot the value of
	// its slot label.
	owner ssa.Owner
	slot  string
}

func (r *Reconciler) differ(app *plumbv1.App, applier Applier, target *Target, log *zap.Logger) *differ {
	return &differ{r: r, app: app, key: client.ObjectKeyFromObject(app), applier: applier, target: target, log: log}
}

// plan classifies every desired object from the cache (package diff):
// unchanged objects cost nothing; only objects plumb has no record of
// (after a restart) are asked about with one server-side dry-run each.
// Objects keep their live revision annotation unless their content changes.
// (An object another App owns was refused before: pass.diff's guard.)
func (df *differ) plan(ctx context.Context, desired []*unstructured.Unstructured,
	live map[objectID]*compact.Object, kinds *tickKinds, revision string) (*plan, error) {
	df.revision, df.kinds = revision, kinds
	df.owner = ssa.Owner{Name: df.app.Name, Namespace: df.app.Namespace}
	df.slot = df.owner.Slot()
	df.applied = appliedFieldsOf(df.app.Status.Inventory)
	df.newNamespaces = map[string]bool{}
	for _, obj := range desired {
		if obj.GroupVersionKind().Group == "" && obj.GetKind() == "Namespace" && live[idOf(obj)] == nil {
			df.newNamespaces[obj.GetName()] = true
		}
	}
	p := &plan{drifted: map[objectID]drift{}, left: map[objectID]bool{}, conflicts: map[objectID][]fieldConflict{}, relabelled: map[objectID]bool{}}
	for _, obj := range desired {
		j, err := df.judge(ctx, obj, live[idOf(obj)])
		if err != nil {
			return nil, err
		}
		df.add(p, obj, j)
	}
	return p, nil
}

// judgement is what the Diff phase found about one desired object.
type judgement struct {
	result diff.Result
	// live is the live object judged: fetched whole when it had to be.
	live *compact.Object
	// conflicts are the object's fields left to other managers.
	conflicts []fieldConflict
	// newConflict says a field was left to a manager at this tick.
	newConflict bool
}

// judge stamps obj with its live revision and classifies it: against its
// record, then with a dry-run when that is ambiguous; a field that the
// same manager keeps changing is left to it, and the object compared again
// without it.
func (df *differ) judge(ctx context.Context, obj *unstructured.Unstructured, l *compact.Object) (judgement, error) {
	r, app, key, id := df.r, df.app, df.key, idOf(obj)
	current := df.revision
	if l != nil {
		if rev := l.Annotation(plumbv1.AnnotationRevision); rev != "" {
			current = rev
		}
	}
	ssa.SetRevision(obj, current) // labels and content hash are stamped already (prepare)
	// Fields left to a manager that keeps changing them are neither
	// applied nor drift, until Git changes the object.
	gitHash := annotationOf(obj, plumbv1.AnnotationContentHash)
	left, conflicts := r.memory.leftFields(key, id, gitHash, l)
	ignore := ignoreFor(app, obj)
	result, l, err := df.compare(ctx, obj, gitHash, l, df.applied[id], ignore, left)
	if err != nil {
		return judgement{}, err
	}
	if result.Kind == diff.Create && inInventory(app, obj) {
		result.Kind = diff.Deleted // applied before, gone now: someone deleted it
	}
	if df.kinds.isPending(obj.GroupVersionKind()) && result.Kind == diff.Ambiguous {
		result.Kind = diff.Create // its CRD comes with this apply
	}
	if result.Kind == diff.Ambiguous && !df.newNamespaces[obj.GetNamespace()] {
		if d, ok := r.memory.describedDrift(key, id, verification{live: l, hash: gitHash, generation: app.Generation}, r.now()); ok &&
			l != nil && left == nil && inInventory(app, obj) {
			result, l = d.result, d.live // a drift askServer described, the object as it was then
		} else if result, l, err = df.askServer(ctx, obj, l); err != nil {
			return judgement{}, err
		}
	}
	j := judgement{result: result, live: l, conflicts: conflicts}
	if result.Kind == diff.Drifted && app.Spec.DriftPolicy != plumbv1.DriftPolicyAlert && df.leaveRepeated(id, gitHash, result.Changes) {
		j.newConflict = true
		left, j.conflicts = r.memory.leftFields(key, id, gitHash, l)
		if j.result, j.live, err = df.compare(ctx, obj, gitHash, l, df.applied[id], ignore, left); err != nil {
			return judgement{}, err
		}
	}
	return j, nil
}

// leaveRepeated leaves to its manager each changed field that the same
// manager changed again and again (more than maxHeals times), and says
// whether it left one now.
func (df *differ) leaveRepeated(id objectID, gitHash string, changes []diff.Change) bool {
	r, key := df.r, df.key
	left := false
	for _, c := range changes {
		if c.Manager == "unknown" || len(c.FieldPath) == 0 {
			continue // a removal has no owner to leave the field to
		}
		if r.memory.fieldDrifted(key, id, c.Path, c.Manager, r.memory.writtenRV(key, id), r.now()) > maxHeals &&
			r.memory.leave(key, id, gitHash, c.FieldPath, c.Manager) {
			left = true
		}
	}
	return left
}

// add puts what was judged of obj into the plan: applied, reported as
// drift, or left (drift under the alert policy).
func (df *differ) add(p *plan, obj *unstructured.Unstructured, j judgement) {
	r, app, key, id := df.r, df.app, df.key, idOf(obj)
	if len(j.conflicts) > 0 {
		p.conflicts[id] = j.conflicts
	}
	if j.newConflict && j.result.Kind != diff.Drifted {
		// Only the fields now left to others differed: the apply (an
		// Update, since the object lost them) releases them.
		p.drifted[id] = drift{obj: obj, live: j.live, newConflict: true}
	}
	switch j.result.Kind {
	case diff.Unchanged:
		if !j.newConflict {
			r.memory.converged(key, id)
		}
		if j.result.Reclaim && app.Spec.DriftPolicy != plumbv1.DriftPolicyAlert {
			// Git's values, under another manager: take the fields back,
			// quietly (no drift), so that plumb can remove them later.
			p.apply = append(p.apply, obj)
		} else if j.live != nil && df.owner.OwnsLive(j.live) && j.live.Label(plumbv1.LabelSlot) != df.slot {
			// Applied by a plumb before the slot label: it gains it (a
			// quiet apply, unless it releases fields too).
			p.apply = append(p.apply, obj)
			p.relabelled[id] = !j.newConflict
		}
	case diff.Create, diff.Update, diff.Ambiguous:
		if !j.newConflict {
			ssa.SetRevision(obj, df.revision) // Git changed it (not a field left to others)
		}
		p.apply = append(p.apply, obj)
	case diff.Drifted, diff.Deleted:
		d := drift{obj: obj, live: j.live, changes: j.result.Changes, additions: j.result.Additions,
			deleted: j.result.Kind == diff.Deleted, newEpisode: r.memory.drifted(key, id), newConflict: j.newConflict}
		if app.Spec.DriftPolicy == plumbv1.DriftPolicyAlert {
			p.left[id] = true
		} else {
			p.apply = append(p.apply, obj)
		}
		p.drifted[id] = d
	}
}

// compare classifies one stamped desired object (whose content hash is
// gitHash) against its live state: at once when the live object has not
// changed since the tick that last found it Unchanged, else with
// diff.Compare. Fields left to others are stripped from obj first. A drift
// that the cached (compacted) object shows is confirmed and described with
// the object fetched whole, and that description is kept while the cached
// object stays as it is (so that a drift left in place under the alert
// policy costs one read, not one per tick). It returns the live object it
// judged: the fetched one when it fetched.
//
// Without a record (after a restart) it rebuilds one from the live object
// when the live object carries this very content hash and plumb owns the
// fields it owned after its last write (appliedFields, from the
// inventory): the object is then as plumb left it, and needs no dry-run.
func (df *differ) compare(ctx context.Context, obj *unstructured.Unstructured, gitHash string,
	live *compact.Object, appliedFields string, ignore diff.Ignore, left *fieldpath.Set) (diff.Result, *compact.Object, error) {
	r, app, key := df.r, df.app, df.key
	id := idOf(obj)
	hash := gitHash
	failed := func(err error) (diff.Result, *compact.Object, error) { // a policy's message may quote a Secret
		return diff.Result{}, live, &PhaseError{Phase: PhaseDiff, Reason: plumbv1.ReasonDiffFailed, Err: redactedFor(err, obj)}
	}
	if left != nil {
		diff.StripPaths(obj, left)
		var err error
		if hash, err = diff.Hash(obj); err != nil {
			return failed(err)
		}
	}
	rec := r.memory.record(key, id)
	if rec == nil && live != nil && left == nil && appliedFields != "" && live.Annotation(plumbv1.AnnotationContentHash) == hash {
		if restored, err := diff.RecordFromLive(hash, live); err == nil && restored.FieldsDigest() == appliedFields {
			r.memory.remember(key, id, restored)
			rec = &restored
		}
	}
	var v verification
	if live != nil && rec != nil {
		v = verification{live: live, hash: hash, generation: app.Generation}
		if r.memory.isVerified(key, id, v) {
			return diff.Result{Kind: diff.Unchanged}, live, nil
		}
		if d, ok := r.memory.describedDrift(key, id, v, r.now()); ok {
			return d.result, d.live, nil
		}
	}
	result, err := diff.CompareHashed(obj, hash, live, rec, ignore, left)
	if err != nil {
		return failed(err)
	}
	if result.Incomplete {
		var whole *compact.Object
		if result, whole, err = df.describe(ctx, obj, result, func(whole *compact.Object) (diff.Result, error) {
			return diff.CompareHashed(obj, hash, whole, rec, ignore, left)
		}); err != nil {
			return diff.Result{}, live, err
		}
		if whole != nil {
			if result.Kind == diff.Drifted {
				r.memory.describeDrift(key, id, v, result, whole.WithoutContent(), time.Time{})
			}
			live = whole
		}
	}
	if result.Kind == diff.Unchanged && v.live != nil {
		r.memory.verify(key, id, v)
	}
	return result, live, nil
}

// describe confirms and describes a drift that the cached (compacted)
// object showed, with compare run on the object fetched whole (by plumb's
// own identity, as the cache watches). A read that fails does not fail the
// tick when all the cache shows are fields plumb lost: the drift stays as
// the cache showed it (which fields, and who owns them now, but not their
// values) and the apply puts them back. Fields others added inside plumb's
// list items can only be removed by a patch built from the content, so
// then, as when the tick is cancelled, the failed read fails the Diff
// phase (retried with backoff). A fetched object that another App has taken meanwhile fails the tick
// as ownershipConflicts would have. It returns the fetched object (nil when
// the read failed).
func (df *differ) describe(ctx context.Context, obj *unstructured.Unstructured,
	cached diff.Result, compare func(*compact.Object) (diff.Result, error)) (diff.Result, *compact.Object, error) {
	app := df.app
	whole, err := df.target.Observer.Fetch(ctx, obj.GroupVersionKind(), obj.GetNamespace(), obj.GetName())
	if err != nil {
		if !cached.LostOnly || ctx.Err() != nil {
			return diff.Result{}, nil, &PhaseError{Phase: PhaseDiff, Reason: plumbv1.ReasonDiffFailed,
				Err: fmt.Errorf("%s drifted, and reading it to describe and heal the drift failed: %w", idOf(obj), err)}
		}
		df.log.Warn("Could not read a drifted object whole to describe the drift; going on with what the cache shows",
			zap.Stringer("object", idOf(obj)), zap.Error(err))
		return cached, nil, nil
	}
	if whole != nil {
		if err := ownershipConflicts(ssa.Owner{Name: app.Name, Namespace: app.Namespace}, []*unstructured.Unstructured{obj},
			map[objectID]*compact.Object{idOf(obj): whole}); err != nil {
			return diff.Result{}, nil, err
		}
	}
	result, err := compare(whole)
	if err != nil {
		return diff.Result{}, nil, &PhaseError{Phase: PhaseDiff, Reason: plumbv1.ReasonDiffFailed, Err: redactedFor(err, obj)}
	}
	return result, whole, nil
}

// annotationOf reads one annotation of obj (nil: none) without copying
// the object's annotations.
func annotationOf(obj *unstructured.Unstructured, name string) string {
	if obj == nil {
		return ""
	}
	value, _, _ := unstructured.NestedString(obj.Object, "metadata", "annotations", name)
	return value
}

// ownershipConflicts fails when a desired object exists with another App's
// labels and is not annotated to allow a takeover.
func ownershipConflicts(owner ssa.Owner, desired []*unstructured.Unstructured, live map[objectID]*compact.Object) error {
	var conflicts []string
	for _, obj := range desired {
		l := live[idOf(obj)]
		if l == nil || owner.OwnsLive(l) || l.Annotation(plumbv1.AnnotationTakeover) == owner.Namespace+"/"+owner.Name {
			continue
		}
		if l.Label(plumbv1.LabelAppName) == "" {
			continue // not plumb's: the apply adopts it
		}
		conflicts = append(conflicts, fmt.Sprintf("%s belongs to App %s/%s", idOf(obj), l.Label(plumbv1.LabelAppNamespace), l.Label(plumbv1.LabelAppName)))
	}
	if len(conflicts) == 0 {
		return nil
	}
	conflicts = cutList(conflicts)
	return &PhaseError{Phase: PhaseApply, Reason: plumbv1.ReasonApplyFailed, Detail: "Conflict",
		Err: fmt.Errorf("%s; nothing was applied (an App takes over another App's object only when the object is annotated %s=%s/%s)",
			strings.Join(conflicts, ", "), plumbv1.AnnotationTakeover, owner.Namespace, owner.Name)}
}

// askServer settles an object plumb has no record of with one server-side
// dry-run, and records it when the API server agrees it is unchanged. When
// the dry-run differs but the live object carries the hash of this very
// content, Git did not change it since plumb applied it: someone else did
// (drift), and the fields plumb would take back, on the object fetched
// whole, say who. It returns the live object it judged.
func (df *differ) askServer(ctx context.Context, obj *unstructured.Unstructured, live *compact.Object) (diff.Result, *compact.Object, error) {
	r, app, key, applier := df.r, df.app, df.key, df.applier
	failed := func(err error) (diff.Result, *compact.Object, error) { // a policy's message may quote a Secret
		return diff.Result{}, live, &PhaseError{Phase: PhaseDiff, Reason: plumbv1.ReasonDiffFailed, Err: redactedFor(err, obj)}
	}
	differs, dryRun, err := applier.DryRun(ctx, obj, live)
	var rejected *ssaerrors.DryRunErr
	switch {
	case errors.As(err, &rejected):
		// The API server refuses the object (validation, admission, an
		// immutable field): the Apply phase reports it, or recreates the
		// object where the App or the object opts in.
		return diff.Result{Kind: diff.Ambiguous}, live, nil
	case err != nil:
		return failed(err)
	case !differs:
		if live != nil {
			if hash, err := diff.Hash(obj); err == nil {
				if rec, err := diff.RecordFromLive(hash, live); err == nil {
					r.memory.remember(key, idOf(obj), rec)
				}
			}
		}
		return diff.Result{Kind: diff.Unchanged}, live, nil
	case live == nil || !inInventory(app, obj) ||
		live.Annotation(plumbv1.AnnotationContentHash) != annotationOf(obj, plumbv1.AnnotationContentHash):
		return diff.Result{Kind: diff.Ambiguous}, live, nil // Git changed it, or plumb never applied it
	}
	// What plumb would own after the apply, against what it owns now.
	rec, err := diff.RecordOf(obj, dryRun)
	if err != nil {
		return failed(err)
	}
	result, whole, err := df.describe(ctx, obj, diff.Result{Kind: diff.Drifted, Incomplete: true},
		func(whole *compact.Object) (diff.Result, error) {
			if whole == nil {
				return diff.Result{Kind: diff.Ambiguous}, nil // deleted meanwhile: the apply creates it
			}
			result, err := diff.Compare(obj, whole, &rec, ignoreFor(app, obj), nil)
			result.Kind, result.Incomplete = diff.Drifted, false
			return result, err
		})
	if err != nil || whole == nil {
		return result, live, err
	}
	if result.Kind == diff.Drifted {
		// Kept while the cached object stays as it is, for one interval: a
		// drift left in place (the alert policy) is not dry-run and read
		// again every tick; the dry-run also depends on what the object
		// alone does not show (the kind's schema and defaults, admission),
		// so it is asked again each interval.
		r.memory.describeDrift(key, idOf(obj), verification{live: live, hash: annotationOf(obj, plumbv1.AnnotationContentHash), generation: app.Generation},
			result, whole.WithoutContent(), r.now().Add(app.Spec.IntervalOrDefault()))
	}
	return result, whole, nil
}
