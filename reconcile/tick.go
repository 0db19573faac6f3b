// Package reconcile runs the tick: Read → Observe → Diff → Apply for one
// App, then writes the App's status once. Each phase is its own failure
// domain with its own condition reason, log key and Event, so an operator
// knows where to look. It defines the small interfaces it consumes.
package reconcile

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	fluxssa "github.com/fluxcd/pkg/ssa"
	ssaerrors "github.com/fluxcd/pkg/ssa/errors"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/diff"
	"github.com/plumb-dev/plumb/queue"
	"github.com/plumb-dev/plumb/source"
	"github.com/plumb-dev/plumb/source/git"
	"github.com/plumb-dev/plumb/source/render"
	"github.com/plumb-dev/plumb/ssa"
)

// Reconciler runs ticks. Its fields are set once, before the first tick.
type Reconciler struct {
	// Client reads Apps (from a cache) and writes their status and finalizer.
	Client client.Client
	// SecretReader reads credentials Secrets (directly: plumb does not cache
	// Secrets it does not manage).
	SecretReader client.Reader
	// Mapper tells namespaced kinds from cluster-scoped ones.
	Mapper   meta.RESTMapper
	Reader   Reader
	Observer Observer
	Applier  Applier
	Events   EventRecorder
	// Metrics records tick and phase metrics; nil records nothing.
	Metrics MetricsRecorder
	Log     *zap.Logger
	Clock   clock.PassiveClock
	// SyncTimeout bounds the wait for informer caches (default 30s).
	SyncTimeout time.Duration

	memory memory // records and drift episodes between ticks
}

// Phase names a phase of the tick, for logs, status and Events.
type Phase string

// The phases, in the order a tick runs them.
const (
	PhaseRead    Phase = "read"
	PhaseObserve Phase = "observe"
	PhaseDiff    Phase = "diff"
	PhaseApply   Phase = "apply"
)

// PhaseError is a failed phase: the condition reason (ReadFailed, …), a
// more specific detail where there is one (e.g. SourceUnavailable), and the
// cause.
type PhaseError struct {
	Phase  Phase
	Reason string
	Detail string
	Err    error
	// Terminal errors cannot be fixed by retrying the same spec.
	Terminal bool
}

func (e *PhaseError) Error() string {
	if e.Detail != "" {
		return fmt.Sprintf("%s (%s): %v", e.Reason, e.Detail, e.Err)
	}
	return fmt.Sprintf("%s: %v", e.Reason, e.Err)
}

func (e *PhaseError) Unwrap() error { return e.Err }

// RequestRefresh makes the App's next tick read Git afresh, skipping the
// render cache (a webhook announced a push). Call it before enqueueing.
func (r *Reconciler) RequestRefresh(key types.NamespacedName) { r.memory.askRefresh(key) }

// Tick runs one tick for the App key and returns its interval for the queue.
func (r *Reconciler) Tick(ctx context.Context, key types.NamespacedName) (time.Duration, error) {
	log := r.Log.With(zap.String("app", key.String()), zap.String("tick", tickID()))
	app := &plumbv1.App{}
	if err := r.Client.Get(ctx, key, app); err != nil {
		if apierrors.IsNotFound(err) {
			r.Observer.Release(key)
			r.memory.forgetApp(key)
			log.Debug("Forgot deleted App")
			return queue.Forget, nil
		}
		return plumbv1.DefaultInterval, fmt.Errorf("reading App %s: %w", key, err)
	}
	interval := app.Spec.IntervalOrDefault()
	if !app.DeletionTimestamp.IsZero() {
		return r.finalize(ctx, app, log)
	}
	if !slices.Contains(app.Finalizers, plumbv1.Finalizer) {
		patch := client.MergeFrom(app.DeepCopy())
		app.Finalizers = append(app.Finalizers, plumbv1.Finalizer)
		if err := r.Client.Patch(ctx, app, patch); err != nil {
			return interval, fmt.Errorf("adding the finalizer to App %s: %w", key, err)
		}
	}

	original := app.DeepCopy()
	defer func() {
		if err := r.Client.Status().Patch(ctx, app, client.MergeFrom(original)); err != nil && !apierrors.IsNotFound(err) {
			log.Error("Failed to write status", zap.Error(err))
		}
	}()

	if app.Spec.Suspend {
		app.Status.LastHandledSyncRequest = app.Annotations[plumbv1.AnnotationSyncRequestedAt]
		setCondition(app, plumbv1.ConditionReconciling, false, plumbv1.ReasonSuspended, "the App is suspended", r.now())
		log.Debug("Skipped suspended App")
		return interval, nil
	}

	tickCtx, cancel := context.WithTimeout(ctx, app.Spec.TimeoutOrDefault())
	defer cancel()
	start := r.now()
	changes, err := r.run(tickCtx, app, log)
	r.recordOutcome(app, changes, err, start, log)
	var phaseErr *PhaseError
	if errors.As(err, &phaseErr) {
		r.metrics().ObserveTick(r.now().Sub(start), string(phaseErr.Phase), phaseErr.Reason)
		if phaseErr.Terminal {
			return interval, queue.Terminal(err)
		}
	} else if err != nil {
		r.metrics().ObserveTick(r.now().Sub(start), string(PhaseApply), plumbv1.ReasonApplyFailed)
	} else {
		r.metrics().ObserveTick(r.now().Sub(start), "", "")
	}
	return interval, err
}

func (r *Reconciler) metrics() MetricsRecorder {
	if r.Metrics == nil {
		return noMetrics{}
	}
	return r.Metrics
}

// timed records how long a phase took, from start until now.
func (r *Reconciler) timed(phase Phase, start time.Time) time.Time {
	now := r.now()
	r.metrics().ObservePhase(string(phase), now.Sub(start))
	return now
}

// tickID is a short random id that ties a tick's log lines together.
func tickID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (r *Reconciler) now() time.Time {
	if r.Clock == nil {
		return time.Now()
	}
	return r.Clock.Now()
}

// run is the four phases. It returns the change set of the Apply phase.
func (r *Reconciler) run(ctx context.Context, app *plumbv1.App, log *zap.Logger) (*fluxssa.ChangeSet, error) {
	key := client.ObjectKeyFromObject(app)
	owner := ssa.Owner{Name: app.Name, Namespace: app.Namespace}

	// Read.
	phaseStart := r.now()
	result, err := r.read(ctx, app)
	if err != nil {
		return nil, err
	}
	phaseStart = r.timed(PhaseRead, phaseStart)
	revision := result.Revision.String()
	app.Status.LastAttemptedRevision = revision
	log = log.With(zap.String("revision", revision))
	markSuccess(app, PhaseRead, r.now())
	if result.HistoryRewritten {
		r.Events.Eventf(app, corev1.EventTypeWarning, "HistoryRewritten",
			"the history of %s was rewritten (force-push): %s no longer descends from %s", app.Spec.Source.Ref.Branch, revision, app.Status.LastAppliedRevision)
	}
	if result.Empty() && !app.Spec.AllowEmpty {
		return nil, &PhaseError{Phase: PhaseApply, Reason: plumbv1.ReasonPruneFailed, Detail: "EmptySource",
			Err: fmt.Errorf("%s renders no objects at %s; refusing to apply nothing and prune the %d objects applied before (set spec.allowEmpty to allow it)",
				displayPath(app.Spec.Source.Path), revision, inventoryLen(app))}
	}

	// Observe.
	desired, unserved, err := r.prepare(app, result)
	if err != nil {
		return nil, err
	}
	live, err := r.observe(ctx, key, app, desired, unserved)
	if err != nil {
		return nil, err
	}
	markSuccess(app, PhaseObserve, r.now())
	phaseStart = r.timed(PhaseObserve, phaseStart)

	// Diff.
	plan, err := r.diff(ctx, app, desired, live, unserved, revision)
	if err != nil {
		return nil, err
	}
	markSuccess(app, PhaseDiff, r.now())
	phaseStart = r.timed(PhaseDiff, phaseStart)
	r.recordDrift(app, plan)

	// Apply.
	changes := fluxssa.NewChangeSet()
	if len(plan.apply) > 0 {
		applied, cs, err := r.Applier.ApplyDirect(ctx, plan.apply, ssa.DirectOptions{
			Force:  app.Spec.Force,
			Exists: func(o *unstructured.Unstructured) bool { return live[idOf(o)] != nil },
			Wait:   fluxssa.WaitOptions{Interval: 500 * time.Millisecond, Timeout: time.Minute},
		})
		for _, a := range applied {
			if rec, recErr := diff.RecordOf(a.Desired, a.Live); recErr == nil {
				r.memory.remember(key, idOf(a.Desired), rec)
			}
		}
		if cs != nil {
			changes.Append(cs.Entries)
		}
		if err != nil {
			setInventory(app, mergeRefs(app.Status.Inventory, refsOf(desired)))
			return changes, &PhaseError{Phase: PhaseApply, Reason: plumbv1.ReasonApplyFailed, Err: err}
		}
		log.Info("Applied objects", zap.Int("changed", len(plan.apply)))
	}
	// Server-side apply keeps fields other managers added; heal those with
	// one guarded JSON patch per object.
	for id, d := range plan.drifted {
		if plan.left[id] || len(d.additions) == 0 || d.live == nil {
			continue
		}
		patch, err := json.Marshal(d.additions)
		if err == nil {
			err = r.Applier.RemoveAdditions(ctx, d.live, patch)
		}
		if err != nil {
			return changes, &PhaseError{Phase: PhaseApply, Reason: plumbv1.ReasonApplyFailed, Err: err}
		}
		changes.Add(fluxssa.ChangeSetEntry{Subject: id.String(), Action: fluxssa.ConfiguredAction})
	}
	if app.Spec.PruneEnabled() {
		stale := staleObjects(app.Status.Inventory, desired)
		if len(stale) > 0 {
			cs, err := r.Applier.Prune(ctx, stale, owner)
			if cs != nil {
				changes.Append(cs.Entries)
			}
			if err != nil {
				return changes, &PhaseError{Phase: PhaseApply, Reason: plumbv1.ReasonPruneFailed, Err: err}
			}
			log.Info("Pruned objects", zap.Int("stale", len(stale)))
		}
	}
	setInventory(app, refsOf(desired))
	ids := map[objectID]bool{}
	for _, d := range desired {
		ids[idOf(d)] = true
	}
	r.memory.keepOnly(key, ids)
	markSuccess(app, PhaseApply, r.now())
	r.timed(PhaseApply, phaseStart)
	r.countChanges(changes)
	if len(plan.left) == 0 {
		app.Status.LastAppliedRevision = revision
	}
	return changes, nil
}

// countChanges counts created, configured and deleted objects.
func (r *Reconciler) countChanges(changes *fluxssa.ChangeSet) {
	counts := map[fluxssa.Action]int{}
	for _, e := range changes.Entries {
		counts[e.Action]++
	}
	for _, action := range []fluxssa.Action{fluxssa.CreatedAction, fluxssa.ConfiguredAction, fluxssa.DeletedAction} {
		if counts[action] > 0 {
			r.metrics().ObserveChange(string(action), counts[action])
		}
	}
}

// read runs the Read phase.
func (r *Reconciler) read(ctx context.Context, app *plumbv1.App) (*source.Result, error) {
	fail := func(detail string, err error, terminal bool) error {
		return &PhaseError{Phase: PhaseRead, Reason: plumbv1.ReasonReadFailed, Detail: detail, Err: err, Terminal: terminal}
	}
	var auth git.Auth
	if ref := app.Spec.Source.SecretRef; ref != nil {
		secret := &corev1.Secret{}
		if err := r.SecretReader.Get(ctx, types.NamespacedName{Namespace: app.Namespace, Name: ref.Name}, secret); err != nil {
			return nil, fail(string(source.ReasonSourceUnavailable), fmt.Errorf("reading secret %s/%s: %w", app.Namespace, ref.Name, err), false)
		}
		auth = source.AuthFromSecret(secret.Data)
	}
	values, err := app.Spec.Helm.ValuesMap()
	if err != nil {
		return nil, fail(string(source.ReasonInvalidSpec), err, true)
	}
	helm := render.HelmOptions{ReleaseName: app.Name, Namespace: app.Namespace, Values: values}
	if app.Spec.TargetNamespace != "" {
		helm.Namespace = app.Spec.TargetNamespace
	}
	if h := app.Spec.Helm; h != nil {
		if h.ReleaseName != "" {
			helm.ReleaseName = h.ReleaseName
		}
		helm.ValuesFiles = h.ValuesFiles
	}
	ref := app.Spec.Source.Ref
	syncRequest := app.Annotations[plumbv1.AnnotationSyncRequestedAt]
	req := source.Request{
		URL:          app.Spec.Source.URL,
		Ref:          git.Ref{Branch: ref.Branch, Tag: ref.Tag, SemVer: ref.SemVer, Commit: ref.Commit},
		Path:         app.Spec.Source.Path,
		Auth:         auth,
		Render:       render.Options{Helm: helm},
		LastRevision: app.Status.LastAppliedRevision,
		// A webhook, a sync request or a changed spec asks the remote afresh;
		// other ticks may share an ls-remote made moments ago.
		Refresh: r.memory.takeRefresh(client.ObjectKeyFromObject(app)) ||
			(syncRequest != "" && syncRequest != app.Status.LastHandledSyncRequest) ||
			app.Generation != app.Status.ObservedGeneration,
	}
	app.Status.LastHandledSyncRequest = syncRequest
	result, err := r.Reader.Read(ctx, req)
	if err != nil {
		var readErr *source.Error
		terminal := errors.As(err, &readErr) && readErr.Terminal()
		return nil, fail(string(source.ReasonOf(err)), err, terminal)
	}
	return result, nil
}

// prepare copies the rendered objects (they are shared with the render
// cache) and gives namespaced objects without a namespace the target one.
//
// It also returns the kinds the API server does not serve yet because their
// CRDs come with this very render: those are neither observed nor dry-run.
func (r *Reconciler) prepare(app *plumbv1.App, result *source.Result) ([]*unstructured.Unstructured, map[schema.GroupVersionKind]bool, error) {
	defaultNamespace := app.Namespace
	if app.Spec.TargetNamespace != "" {
		defaultNamespace = app.Spec.TargetNamespace
	}
	pendingKinds := definedKinds(result)
	unserved := map[schema.GroupVersionKind]bool{}
	desired := make([]*unstructured.Unstructured, 0, len(result.Objects))
	for _, o := range result.Objects {
		obj := o.DeepCopy()
		diff.Normalize(obj)
		gvk := obj.GroupVersionKind()
		mapping, err := r.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		switch {
		case err == nil:
			if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
				if obj.GetNamespace() == "" {
					obj.SetNamespace(defaultNamespace)
				}
			} else {
				obj.SetNamespace("")
			}
		case meta.IsNoMatchError(err) && pendingKinds[gvk.GroupKind()]:
			// Its CRD is in this very render and is applied first.
			unserved[gvk] = true
			if obj.GetNamespace() == "" {
				obj.SetNamespace(defaultNamespace)
			}
		default:
			return nil, nil, &PhaseError{Phase: PhaseObserve, Reason: plumbv1.ReasonObserveFailed, Detail: "UnknownKind",
				Err: fmt.Errorf("%s (from %s): %w", gvk, o.Source, err)}
		}
		ignoreFor(app, obj).Strip(obj)
		desired = append(desired, obj)
	}
	return desired, unserved, nil
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

// definedKinds are the kinds whose CRDs the render itself contains.
func definedKinds(result *source.Result) map[schema.GroupKind]bool {
	out := map[schema.GroupKind]bool{}
	for _, o := range result.Objects {
		if o.GetKind() != "CustomResourceDefinition" || o.GroupVersionKind().Group != "apiextensions.k8s.io" {
			continue
		}
		group, _, _ := unstructured.NestedString(o.Object, "spec", "group")
		kind, _, _ := unstructured.NestedString(o.Object, "spec", "names", "kind")
		out[schema.GroupKind{Group: group, Kind: kind}] = true
	}
	return out
}

// observe starts (or reuses) the informers of every kind the App renders or
// has in its inventory, waits for them, and returns the live objects by ID.
func (r *Reconciler) observe(ctx context.Context, key types.NamespacedName, app *plumbv1.App, desired []*unstructured.Unstructured,
	unserved map[schema.GroupVersionKind]bool) (map[objectID]*unstructured.Unstructured, error) {
	fail := func(detail string, err error) error {
		return &PhaseError{Phase: PhaseObserve, Reason: plumbv1.ReasonObserveFailed, Detail: detail, Err: err}
	}
	kinds := map[schema.GroupVersionKind]bool{}
	for _, obj := range desired {
		if !unserved[obj.GroupVersionKind()] {
			kinds[obj.GroupVersionKind()] = true
		}
	}
	if app.Status.Inventory != nil {
		for _, ref := range app.Status.Inventory.Entries {
			gvk := schema.GroupVersionKind{Group: ref.Group, Version: ref.Version, Kind: ref.Kind}
			if _, err := r.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err == nil {
				kinds[gvk] = true
			}
		}
	}
	gvks := make([]schema.GroupVersionKind, 0, len(kinds))
	for gvk := range kinds {
		gvks = append(gvks, gvk)
	}
	if err := r.Observer.Ensure(key, gvks); err != nil {
		return nil, fail("UnknownKind", err)
	}
	timeout := r.SyncTimeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	syncCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := r.Observer.WaitForSync(syncCtx, gvks); err != nil {
		return nil, fail("CacheNotSynced", err)
	}
	live := map[objectID]*unstructured.Unstructured{}
	for _, obj := range desired {
		if !kinds[obj.GroupVersionKind()] {
			continue // its kind is created by this tick
		}
		got, err := r.Observer.Get(obj.GroupVersionKind(), obj.GetNamespace(), obj.GetName())
		if err != nil {
			return nil, fail("CacheRead", err)
		}
		if got != nil {
			live[idOf(obj)] = got
		}
	}
	return live, nil
}

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
func (r *Reconciler) diff(ctx context.Context, app *plumbv1.App, desired []*unstructured.Unstructured,
	live map[objectID]*unstructured.Unstructured, unserved map[schema.GroupVersionKind]bool, revision string) (*plan, error) {
	key := client.ObjectKeyFromObject(app)
	owner := ssa.Owner{Name: app.Name, Namespace: app.Namespace}
	p := &plan{drifted: map[objectID]drift{}, left: map[objectID]bool{}}
	gitUnchanged := app.Status.LastAppliedRevision == revision
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
			if rev := l.GetAnnotations()[ssa.AnnotationRevision]; rev != "" {
				current = rev
			}
		}
		ssa.Stamp(obj, owner, current)
		result, err := diff.Compare(obj, l, r.memory.record(key, id), ignoreFor(app, obj))
		if err != nil {
			return nil, &PhaseError{Phase: PhaseDiff, Reason: plumbv1.ReasonDiffFailed, Err: err}
		}
		if result.Kind == diff.Create && inInventory(app, obj) {
			result.Kind = diff.Deleted // applied before, gone now: someone deleted it
		}
		if result.Kind == diff.Ambiguous && unserved[obj.GroupVersionKind()] {
			result.Kind = diff.Create // its CRD comes with this apply
		}
		if result.Kind == diff.Ambiguous && !newNamespaces[obj.GetNamespace()] {
			if result, err = r.askServer(ctx, key, obj, l, app, gitUnchanged); err != nil {
				return nil, err
			}
		}
		switch result.Kind {
		case diff.Unchanged:
			r.memory.converged(key, id)
		case diff.Create, diff.Update, diff.Ambiguous:
			ssa.Stamp(obj, owner, revision)
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

// askServer settles an object plumb has no record of with one server-side
// dry-run, and records it when the API server agrees it is unchanged.
func (r *Reconciler) askServer(ctx context.Context, key types.NamespacedName, obj, live *unstructured.Unstructured,
	app *plumbv1.App, gitUnchanged bool) (diff.Result, error) {
	differs, err := r.Applier.DryRunDiffers(ctx, obj, live)
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
	case gitUnchanged && inInventory(app, obj):
		return diff.Result{Kind: diff.Drifted}, nil
	}
	return diff.Result{Kind: diff.Ambiguous}, nil
}

func displayPath(p string) string {
	if strings.Trim(p, "/.") == "" {
		return "the repository root"
	}
	return p
}
