package reconcile

import (
	"context"
	"errors"
	"fmt"
	"strings"

	ssaerrors "github.com/fluxcd/pkg/ssa/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/diff"
	"github.com/plumb-dev/plumb/ssa"
)

// plan is what the Diff phase decided.
type plan struct {
	// apply are the objects to apply (created, changed in Git, or healed).
	apply []*unstructured.Unstructured
	// drifted are the objects someone else changed, with what changed.
	drifted map[objectID]drift
	// left are drifted objects not put back (alert policy, or a conflict).
	left map[objectID]bool
}

// drift is one drifted object.
type drift struct {
	obj        *unstructured.Unstructured
	live       *unstructured.Unstructured
	changes    []diff.Change
	additions  []diff.PatchOp // fields others added inside plumb's list items
	deleted    bool
	newEpisode bool // first detection since the object was last converged
	conflict   bool // another controller keeps changing it back
	// newConflict is the tick at which the conflict was first seen.
	newConflict bool
}

// maxHeals is how many times within conflictWindow plumb puts the same
// object back before it reports a conflict with whoever keeps changing it,
// and stops healing it (until Git changes it or the fight ends).
const maxHeals = 3

// diff classifies every desired object from the cache (package diff):
// unchanged objects cost nothing; only objects plumb has no record of
// (after a restart) are asked about with one server-side dry-run each.
// Objects keep their live revision annotation unless their content changes.
// An object another App owns is not taken over: the tick fails with a
// Conflict before anything is applied.
func (r *Reconciler) diff(ctx context.Context, app *plumbv1.App, desired []*unstructured.Unstructured,
	live map[objectID]*unstructured.Unstructured, pending pendingKinds, revision string) (*plan, error) {
	key := client.ObjectKeyFromObject(app)
	owner := ssa.Owner{Name: app.Name, Namespace: app.Namespace}
	if err := ownershipConflicts(owner, desired, live); err != nil {
		return nil, err
	}
	p := &plan{drifted: map[objectID]drift{}, left: map[objectID]bool{}}
	newNamespaces := map[string]bool{} // Namespaces this tick creates
	for _, obj := range desired {
		if obj.GroupVersionKind().Group == "" && obj.GetKind() == "Namespace" && live[idOf(obj)] == nil {
			newNamespaces[obj.GetName()] = true
		}
	}
	for _, obj := range desired {
		id := idOf(obj)
		l := live[id]
		current := revision
		if l != nil {
			if rev := l.GetAnnotations()[plumbv1.AnnotationRevision]; rev != "" {
				current = rev
			}
		}
		if err := ssa.Stamp(obj, owner, current); err != nil {
			return nil, &PhaseError{Phase: PhaseDiff, Reason: plumbv1.ReasonDiffFailed, Err: err}
		}
		result, err := diff.Compare(obj, l, r.memory.record(key, id), ignoreFor(app, obj))
		if err != nil {
			return nil, &PhaseError{Phase: PhaseDiff, Reason: plumbv1.ReasonDiffFailed, Err: err}
		}
		if result.Kind == diff.Create && inInventory(app, obj) {
			result.Kind = diff.Deleted // applied before, gone now: someone deleted it
		}
		if _, ok := pending[obj.GroupVersionKind()]; ok && result.Kind == diff.Ambiguous {
			result.Kind = diff.Create // its CRD comes with this apply
		}
		if result.Kind == diff.Ambiguous && !newNamespaces[obj.GetNamespace()] {
			if result, err = r.askServer(ctx, key, obj, l, app); err != nil {
				return nil, err
			}
		}
		switch result.Kind {
		case diff.Unchanged:
			r.memory.converged(key, id)
		case diff.Create, diff.Update, diff.Ambiguous:
			if err := ssa.Stamp(obj, owner, revision); err != nil {
				return nil, &PhaseError{Phase: PhaseDiff, Reason: plumbv1.ReasonDiffFailed, Err: err}
			}
			p.apply = append(p.apply, obj)
		case diff.Drifted, diff.Deleted:
			newEpisode, recent := r.memory.drifted(key, id, r.now())
			d := drift{obj: obj, live: l, changes: result.Changes, additions: result.Additions,
				deleted: result.Kind == diff.Deleted, newEpisode: newEpisode}
			switch {
			case app.Spec.DriftPolicy == plumbv1.DriftPolicyAlert:
				p.left[id] = true
			case recent > maxHeals:
				d.conflict, d.newConflict = true, recent == maxHeals+1
				p.left[id] = true
			default:
				p.apply = append(p.apply, obj)
			}
			p.drifted[id] = d
		}
	}
	return p, nil
}

// ownershipConflicts fails when a desired object exists with another App's
// labels and is not annotated to allow a takeover.
func ownershipConflicts(owner ssa.Owner, desired []*unstructured.Unstructured, live map[objectID]*unstructured.Unstructured) error {
	var conflicts []string
	for _, obj := range desired {
		l := live[idOf(obj)]
		if l == nil || owner.Owns(l) || l.GetAnnotations()[plumbv1.AnnotationTakeover] == owner.Namespace+"/"+owner.Name {
			continue
		}
		labels := l.GetLabels()
		if labels[plumbv1.LabelAppName] == "" {
			continue // not plumb's: the apply adopts it
		}
		conflicts = append(conflicts, fmt.Sprintf("%s belongs to App %s/%s", idOf(obj), labels[plumbv1.LabelAppNamespace], labels[plumbv1.LabelAppName]))
	}
	if len(conflicts) == 0 {
		return nil
	}
	if len(conflicts) > maxListed {
		conflicts = append(conflicts[:maxListed], fmt.Sprintf("and %d more", len(conflicts)-maxListed))
	}
	return &PhaseError{Phase: PhaseApply, Reason: plumbv1.ReasonApplyFailed, Detail: "Conflict",
		Err: fmt.Errorf("%s; nothing was applied (an App takes over another App's object only when the object is annotated %s=%s/%s)",
			strings.Join(conflicts, ", "), plumbv1.AnnotationTakeover, owner.Namespace, owner.Name)}
}

// askServer settles an object plumb has no record of with one server-side
// dry-run, and records it when the API server agrees it is unchanged. When
// the dry-run differs but the live object carries the hash of this very
// content, Git did not change it since plumb applied it: someone else did
// (drift), and the fields plumb would take back say who.
func (r *Reconciler) askServer(ctx context.Context, key types.NamespacedName, obj, live *unstructured.Unstructured,
	app *plumbv1.App) (diff.Result, error) {
	differs, dryRun, err := r.Applier.DryRun(ctx, obj, live)
	var rejected *ssaerrors.DryRunErr
	switch {
	case errors.As(err, &rejected):
		// The API server refuses the object (validation, admission, an
		// immutable field): the Apply phase reports it, or recreates the
		// object where the App or the object opts in.
		return diff.Result{Kind: diff.Ambiguous}, nil
	case err != nil:
		return diff.Result{}, &PhaseError{Phase: PhaseDiff, Reason: plumbv1.ReasonDiffFailed, Err: err}
	case !differs:
		if live != nil {
			if rec, err := diff.RecordOf(obj, live); err == nil {
				r.memory.remember(key, idOf(obj), rec)
			}
		}
		return diff.Result{Kind: diff.Unchanged}, nil
	case live == nil || !inInventory(app, obj) ||
		live.GetAnnotations()[plumbv1.AnnotationContentHash] != obj.GetAnnotations()[plumbv1.AnnotationContentHash]:
		return diff.Result{Kind: diff.Ambiguous}, nil // Git changed it, or plumb never applied it
	}
	// What plumb would own after the apply, against what it owns now.
	rec, err := diff.RecordOf(obj, dryRun)
	if err != nil {
		return diff.Result{}, &PhaseError{Phase: PhaseDiff, Reason: plumbv1.ReasonDiffFailed, Err: err}
	}
	result, err := diff.Compare(obj, live, &rec, ignoreFor(app, obj))
	if err != nil {
		return diff.Result{}, &PhaseError{Phase: PhaseDiff, Reason: plumbv1.ReasonDiffFailed, Err: err}
	}
	result.Kind = diff.Drifted
	return result, nil
}
