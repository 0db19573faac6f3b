package reconcile

import (
	"context"
	"errors"
	"slices"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/informers/compact"
	"github.com/plumb-dev/plumb/internal/source"
	"github.com/plumb-dev/plumb/ssa"
)

// pass is one pass of the pipeline over an App, by a tick or by a preview,
// with what it has found so far, phase by phase. The tick and the preview
// share its plan step — Read, the admission checks, Observe and Diff,
// everything before the first write — so that a preview shows what the
// tick does; the tick then applies (apply, with authorize and prune), the
// preview dry-runs.
type pass struct {
	r   *Reconciler
	app *plumbv1.App
	key types.NamespacedName
	log *zap.Logger
	// timer times the tick's phases; nil for a preview, which is not timed.
	timer *phaseTimer
	// preview says the pass writes nothing and waits for nothing: a
	// dependsOn wait is noted in waiting, and the preview goes on.
	preview bool

	// target is the cluster the pass acts on (plumb's own, or the App's
	// destination).
	target   *Target
	result   *source.Result
	revision string
	desired  []*unstructured.Unstructured
	kinds    *tickKinds
	applier  Applier
	live     map[objectID]*compact.Object
	planned  *plan
	// order places the revision's objects in an ordered sync (hooks and
	// waves); syncRequested says the tick answers a new sync request, which
	// syncs a revision whose sync failed again; syncWaiting says what the
	// sync under way waits for when the tick ends.
	order         *ordering
	syncRequested bool
	syncWaiting   string
	lastWaves     map[objectID]int32 // the inventory's waves, read once (inventoryWave)
	waiting       string             // why the tick would wait for its dependsOn (a preview's)
	// held ends a tick's plan early, and well: it waits for its dependsOn.
	held *dependencyWait
}

func (r *Reconciler) newPass(app *plumbv1.App, log *zap.Logger, timer *phaseTimer) *pass {
	return &pass{r: r, app: app, key: client.ObjectKeyFromObject(app), log: log, timer: timer, preview: timer == nil}
}

// reader reads the App's source for a pass: the tick's Read phase (which
// may reuse an event tick's last read), or a fresh read for a preview. A
// Helm chart is rendered for cluster (nil: Helm's defaults).
type reader func(ctx context.Context, cluster ClusterInfo) (*source.Result, error)

// plan runs Read, the admission checks, Observe and Diff. A tick held by
// its dependsOn ends after the checks, with s.held set and no error.
func (s *pass) plan(ctx context.Context, read reader) error {
	if err := s.guard(func() (err error) { s.target, err = s.r.targetOf(ctx, s.app); return err }); err != nil {
		return err
	}
	if err := s.guard(func() error { return reach(s.target) }); err != nil {
		return err
	}
	if !s.preview {
		s.r.recordDestination(s.app, s.target, s.log)
	}
	if err := s.read(ctx, read); err != nil {
		return err
	}
	if err := s.admit(ctx); err != nil || s.held != nil {
		return err
	}
	if err := s.observe(ctx); err != nil {
		return err
	}
	return s.diff(ctx)
}

// next ends the phase under way, and times it, for a tick.
func (s *pass) next(phase Phase) {
	if s.timer != nil {
		s.timer.done(phase)
	}
}

// read runs the Read phase, records the revision read, and refuses an
// empty render (which would prune everything: Apply's guard).
func (s *pass) read(ctx context.Context, read reader) error {
	result, err := read(ctx, s.target.Cluster)
	if err != nil {
		return err
	}
	s.result, s.revision = result, result.Revision.String()
	s.app.Status.LastAttemptedRevision = s.revision
	if s.timer != nil {
		s.timer.revision = s.revision
	}
	s.log = s.log.With(zap.String("revision", s.revision))
	if result.HistoryRewritten && !s.preview {
		s.r.Events.Eventf(s.app, corev1.EventTypeWarning, plumbv1.ReasonHistoryRewritten,
			"the history of %s was rewritten (force-push): %s no longer descends from %s", s.app.Spec.Source.GitRepository().Ref.Branch, s.revision, s.app.Status.LastAppliedRevision)
	}
	return s.guard(func() error { return s.r.refuseEmpty(s.app, result.Empty(), s.revision) })
}

// admit runs the checks that end the Read phase: the dependsOn gate (before
// the render is prepared: a kind it needs may come with a dependency, its
// CRD), the render prepared, the namespaces it may place objects in, and
// the identity the App acts as.
func (s *pass) admit(ctx context.Context) error {
	if wait := s.r.gateOnDependencies(ctx, s.app, s.revision, s.log); wait != nil {
		if !s.preview {
			s.held = wait
			return nil
		}
		// A preview says it beside what the tick will apply once they are Ready.
		if c := apimeta.FindStatusCondition(s.app.Status.Conditions, plumbv1.ConditionReady); c != nil {
			s.waiting = c.Reason + ": " + c.Message
		}
	}
	if err := s.guard(func() (err error) {
		s.desired, s.kinds, s.order, err = s.r.prepare(s.app, s.result, s.target)
		return err
	}); err != nil {
		return err
	}
	placed := s.desired
	if s.order != nil && len(s.order.hooks)+len(s.order.idle) > 0 {
		placed = append(slices.Clip(s.desired), s.order.hookObjects()...) // a hook may go no farther than an object
	}
	if err := s.r.checkNamespaces(s.app, placed, s.revision); err != nil {
		return err
	}
	markSuccess(s.app, PhaseRead, s.r.now())
	s.app.Status.DeleteHooks = s.order.deleteHooks
	if !s.preview {
		s.r.notifyPending(s.app, s.revision)
	}
	return s.guard(func() (err error) { s.applier, err = s.r.applierFor(ctx, s.app, s.target); return err })
}

// guard runs a check made ahead of the phase it guards (the empty render
// and the identity are Apply's, the render's kinds Observe's, its objects
// Diff's): while it passes, its time is the phase under way's, since the
// guarded phase has not begun; when it fails as a later phase, the tick ends
// in that phase, timed from the check's start, as its error says.
func (s *pass) guard(check func() error) error {
	start := s.r.now()
	err := check()
	s.failedAhead(err, start)
	return err
}

// failedAhead ends a tick whose err names a later phase than the one under
// way in that phase, from at.
func (s *pass) failedAhead(err error, at time.Time) {
	var phaseErr *PhaseError
	if s.timer != nil && errors.As(err, &phaseErr) {
		s.timer.failedAhead(phaseErr.Phase, at)
	}
}

// observe runs the Observe phase: the live objects, from the cache (a
// preview's Reconciler reads them directly).
func (s *pass) observe(ctx context.Context) error {
	s.next(PhaseObserve)
	var err error
	var hooks []hookObject
	if s.order != nil {
		hooks = s.order.hooks
	}
	if s.live, err = s.r.observe(ctx, s.target, s.key, s.app, s.desired, hooks, s.kinds, s.log.With(zap.String("phase", string(PhaseObserve)))); err != nil {
		return err
	}
	markSuccess(s.app, PhaseObserve, s.r.now())
	return nil
}

// diff runs the Diff phase. A preview's Reconciler remembers nothing, so it
// first takes the fields left to other managers from the App's status, as
// a controller just restarted would.
func (s *pass) diff(ctx context.Context) error {
	s.next(PhaseDiff)
	if s.preview {
		s.r.seedConflicts(s.key, s.app, s.desired, s.live)
	}
	if err := s.guard(func() error {
		return ownershipConflicts(ssa.Owner{Name: s.app.Name, Namespace: s.app.Namespace}, s.desired, s.live)
	}); err != nil {
		return err
	}
	var err error
	df := s.r.differ(s.app, s.applier, s.target, s.log.With(zap.String("phase", string(PhaseDiff))))
	if s.planned, err = df.plan(ctx, s.desired, s.live, s.kinds, s.revision); err != nil {
		// An object another App took meanwhile, found as a drift is read
		// whole, fails as Apply's Conflict: the tick ends there.
		s.failedAhead(err, s.r.now())
		return err
	}
	markSuccess(s.app, PhaseDiff, s.r.now())
	return nil
}
