// Package reconcile runs the tick: Read → Observe → Diff → Apply for one
// App, then writes the App's status once, and only when it changed. Each
// phase is its own failure domain with its own condition reason, log key
// and Event, so an operator knows where to look. It defines the small
// interfaces it consumes.
package reconcile

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	fluxssa "github.com/fluxcd/pkg/ssa"
	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/informers/compact"
	"github.com/plumb-dev/plumb/internal/health"
	"github.com/plumb-dev/plumb/internal/source"
	"github.com/plumb-dev/plumb/queue"
)

// Deps are the parts a Reconciler works with, given to New.
type Deps struct {
	// Client reads Apps (from a cache) and writes their status and finalizer.
	Client client.Client
	// APIReader reads an App from the API server when the cache has not
	// caught up with plumb's own last write to it; nil never does.
	APIReader client.Reader
	// Credentials serves the Secrets that Apps name (package credentials).
	Credentials Credentials
	// Mapper tells namespaced kinds from cluster-scoped ones.
	Mapper meta.RESTMapper
	// Cluster tells Helm renders what the cluster serves; nil renders with
	// Helm's defaults.
	Cluster ClusterInfo
	// Reader is the Read phase.
	Reader Reader
	// NewObserver makes the Observe phase's cache, which tells the
	// Reconciler of its objects' changes (events).
	NewObserver func(events ObjectEvents) Observer
	// NewDestinations makes the connections to the clusters Apps name in
	// spec.destination, whose informers tell the Reconciler of their
	// objects' changes (events); nil refuses such Apps.
	NewDestinations func(events ObjectEvents) Destinations
	// Applier acts on the App's objects with the controller's own rights,
	// for Apps that act as no ServiceAccount.
	Applier Applier
	// Identities gives the Applier that acts as an App's ServiceAccount;
	// nil when the controller cannot impersonate (an App that names a
	// ServiceAccount then fails rather than use the controller's rights).
	Identities Identities
	// Policy holds the tenancy rules the controller enforces.
	Policy Policy
	// Shard is this replica's name when Apps are spread over replicas: a
	// tick records it in the App's status.shard.
	Shard string
	// Events records Kubernetes Events on Apps.
	Events EventRecorder
	// Enqueue brings an App's next tick forward (the queue's AddEvent):
	// ObjectChanged and HealthChanged call it, and a tick when someone else
	// changed one of its objects while it was writing them; nil drops it.
	Enqueue func(types.NamespacedName)
	// EnqueueAfter asks for an event tick of an App after a delay (the
	// queue's AddAfter): when its health timeout passes; nil drops it.
	EnqueueAfter func(types.NamespacedName, time.Duration)
	// Metrics records tick and phase metrics; nil records nothing.
	Metrics MetricsRecorder
	// Notifier is told of drift episodes and of each revision's progress;
	// nil tells no one.
	Notifier Notifier
	// Log is the ticks' logger; nil logs nothing.
	Log *zap.Logger
	// Clock tells the time; nil is the wall clock.
	Clock clock.PassiveClock
	// SyncTimeout bounds the wait for informer caches (default 30s).
	SyncTimeout time.Duration
}

// ObjectEvents is what an Observer tells the Reconciler of the objects it
// caches (the Reconciler's methods of these names).
type ObjectEvents interface {
	// ObjectChanged: an App's object changed.
	ObjectChanged(app types.NamespacedName)
	// HealthChanged: an App's object's health changed.
	HealthChanged(app types.NamespacedName)
	// IsOwnWrite: the object is plumb's own write, which needs no tick.
	IsOwnWrite(obj *compact.Object) bool
}

// Reconciler runs ticks, and previews them. Make it with New.
type Reconciler struct {
	Deps
	Observer Observer
	memory   memory // records, drift episodes and reads between ticks
	// local is the cluster plumb runs in, made of Deps' parts.
	local *Target
	// destinations are the other clusters Apps deploy into (nil: none).
	destinations Destinations
}

// New makes a Reconciler of deps, or says which part it lacks.
func New(deps Deps) (*Reconciler, error) {
	var missing []string
	for name, absent := range map[string]bool{
		"Client": deps.Client == nil, "Credentials": deps.Credentials == nil, "Mapper": deps.Mapper == nil,
		"Reader": deps.Reader == nil, "NewObserver": deps.NewObserver == nil, "Applier": deps.Applier == nil,
		"Events": deps.Events == nil,
	} {
		if absent {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return nil, fmt.Errorf("reconcile.New: no %s given", strings.Join(missing, ", "))
	}
	if deps.Log == nil {
		deps.Log = zap.NewNop()
	}
	r := &Reconciler{Deps: deps}
	r.Observer = deps.NewObserver(r)
	if r.Observer == nil {
		return nil, errors.New("reconcile.New: NewObserver made no Observer")
	}
	r.local = &Target{Observer: r.Observer, Applier: deps.Applier, Identities: deps.Identities, Mapper: deps.Mapper, Cluster: deps.Cluster}
	if deps.NewDestinations != nil {
		r.destinations = deps.NewDestinations(r)
	}
	return r, nil
}

// StartTerm is called when this replica starts leading (again): what it
// remembers of drift episodes and conflicts may be stale, since another
// replica may have ticked meanwhile, and is forgotten.
func (r *Reconciler) StartTerm() { r.memory.newTerm() }

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

// IsOwnWrite reports whether an informer event's object is plumb's own
// write that a tick has taken into account (or is taking into account right
// now): such an event needs no tick.
func (r *Reconciler) IsOwnWrite(obj *compact.Object) bool {
	key := types.NamespacedName{Namespace: obj.Label(plumbv1.LabelAppNamespace), Name: obj.Label(plumbv1.LabelAppName)}
	return r.memory.ownWrite(key, idOfLive(obj), obj.GetResourceVersion())
}

// tick is one tick of an App, as Tick begins, runs and finishes it.
type tick struct {
	key      types.NamespacedName
	wake     queue.Wake
	marks    enqueueMarks
	log      *zap.Logger
	app      *plumbv1.App // the tick changes its status, written when it ends
	original *plumbv1.App // the App as the tick began
	// target is the cluster the tick's phases acted on (nil when they did
	// not get that far).
	target   *Target
	cause    Trigger
	interval time.Duration
	// onlyIfChanged: a re-assessment writes nothing when nothing changed,
	// not even a heartbeat.
	onlyIfChanged bool
}

// Tick runs one tick for the App key and returns how the queue schedules
// it next: it begins (reads the App; a deleted one is finalized or
// forgotten), skips a suspended App or re-assesses health alone, else runs
// the phases and finishes (status, health, notifications, metrics). The
// status is written once, when the tick ends. A tick that only an event
// brought forward reuses the App's last read instead of asking Git.
func (r *Reconciler) Tick(ctx context.Context, key types.NamespacedName, wake queue.Wake) (queue.Outcome, error) {
	// The first and last line of each tick's log, so that a tick's span
	// can be read from the log (which replica ticked an App when).
	log := r.Log.With(zap.String("app", key.String()), zap.String("tick", tickID()))
	log.Debug("Tick started", zap.String("phase", "start"), zap.String("revision", ""))
	defer log.Debug("Tick ended", zap.String("phase", "end"), zap.String("revision", ""))
	t, early, err := r.begin(ctx, key, wake, log)
	if t == nil {
		return early, err
	}
	defer func() { r.writeStatus(ctx, t.original, t.app, t.onlyIfChanged, t.log) }()
	if r.Shard != "" {
		t.app.Status.Shard = r.Shard
	}
	if outcome, skipped := r.skip(ctx, t); skipped {
		return outcome, nil
	}
	return r.runPhases(ctx, t)
}

// begin reads the App and gets its tick ready; nil when there is no tick
// to run (the App is gone or being deleted, or could not be read), with
// what the queue is to do and the error.
func (r *Reconciler) begin(ctx context.Context, key types.NamespacedName, wake queue.Wake, log *zap.Logger) (*tick, queue.Outcome, error) {
	marks := r.memory.takeMarks(key, r.now())
	// A re-assessment of health waits for the App cache to catch up with
	// plumb's last write of the App rather than read it from the API
	// server; when it does not, the re-assessment comes a second later.
	patient := wake == queue.WakeEvent && marks.health && !marks.full && !marks.dependency
	app, err := r.getApp(ctx, key, patient)
	switch {
	case patient && err != nil && !apierrors.IsNotFound(err):
		r.memory.mark(key, enqueueMarks{health: true})
		if r.EnqueueAfter != nil {
			r.EnqueueAfter(key, time.Second)
		}
		return nil, queue.Kept(plumbv1.DefaultInterval), nil
	case apierrors.IsNotFound(err):
		r.forgetDeleted(key)
		log.Debug("Forgot deleted App", zap.String("phase", "start"), zap.String("revision", ""))
		return nil, queue.Dropped(), nil
	case err != nil:
		return nil, queue.Every(plumbv1.DefaultInterval), fmt.Errorf("reading App %s: %w", key, err)
	case !app.DeletionTimestamp.IsZero():
		outcome, err := r.finalize(ctx, app, log)
		return nil, outcome, err
	}
	t := &tick{key: key, wake: wake, marks: marks, app: app, cause: r.triggerOf(app, wake, marks), interval: app.Spec.IntervalOrDefault()}
	t.log = log.With(zap.String("trigger", string(t.cause)))
	if !slices.Contains(app.Finalizers, plumbv1.Finalizer) {
		patch := client.MergeFrom(app.DeepCopy())
		app.Finalizers = append(app.Finalizers, plumbv1.Finalizer)
		if err := r.Client.Patch(ctx, app, patch); err != nil {
			return nil, queue.Every(t.interval), fmt.Errorf("adding the finalizer to App %s: %w", key, err)
		}
		r.memory.setAppRV(key, app.ResourceVersion)
	}
	t.original = app.DeepCopy()
	return t, queue.Outcome{}, nil
}

// skip ends a tick that runs no phase: a suspended App's, or one that
// only re-assesses health (no tick's outcome: the retry or timer stays as
// it was).
func (r *Reconciler) skip(ctx context.Context, t *tick) (queue.Outcome, bool) {
	app := t.app
	if app.Spec.Suspend {
		app.Status.LastHandledSyncRequest = app.Annotations[plumbv1.AnnotationSyncRequestedAt]
		setCondition(app, plumbv1.ConditionReconciling, false, plumbv1.ReasonSuspended, "the App is suspended", r.now())
		t.log.Debug("Skipped suspended App", zap.String("phase", "start"), zap.String("revision", app.Status.LastAppliedRevision))
		return queue.Every(t.interval), true
	}
	if healthOnly(t.wake, t.cause, t.marks) && !syncUnderWay(app) {
		t.onlyIfChanged = true
		r.reassess(ctx, app, t.log)
		return queue.Kept(t.interval), true
	}
	return queue.Outcome{}, false
}

// runPhases runs the four phases within the App's timeout, records the
// tick, and finishes it; a tick that waits for its dependsOn ends there.
func (r *Reconciler) runPhases(ctx context.Context, t *tick) (queue.Outcome, error) {
	tickCtx, cancel := context.WithTimeout(ctx, t.app.Spec.TimeoutOrDefault())
	defer cancel()
	r.metrics().ObserveSync(string(t.cause))
	start := r.now()
	timer := r.newPhaseTimer(start)
	changes, held, err := r.run(tickCtx, t, timer)
	r.recordTick(t.key, t.app, timer.record(t.app, t.cause, changes, held != nil, err))
	if held != nil {
		r.memory.setApplied(t.key, nil) // Ready says it waits: a re-assessment must not say otherwise
		now := metav1.NewTime(r.now())
		t.app.Status.LastTickTime = &now
		return queue.Every(t.interval), held.queueErr
	}
	return r.finish(ctx, t, changes, err, start)
}

// finish records a tick's outcome: conditions and change set, then the
// health of what it applied, the notifications and the tick's metrics.
func (r *Reconciler) finish(ctx context.Context, t *tick, changes *fluxssa.ChangeSet, err error, start time.Time) (queue.Outcome, error) {
	app := t.app
	outcome := r.recordOutcome(app, changes, err, start, t.log)
	answered := ""
	if request := app.Status.LastHandledSyncRequest; request != t.original.Status.LastHandledSyncRequest {
		answered = request
	}
	r.recordChangeSet(app, changes, answered)
	r.memory.setApplied(t.key, outcome)
	verdict := health.Healthy
	if outcome != nil {
		healthStart := r.now()
		// A new revision or spec that changed objects starts a new wait; a
		// heal or a prune does not postpone the one under way.
		newWait := changedObjects(changes) &&
			(t.original.Status.LastAppliedRevision != app.Status.LastAppliedRevision || t.original.Status.ObservedGeneration != app.Generation)
		verdict, _ = r.settleHealth(ctx, app, t.target, outcome, newWait)
		r.metrics().ObservePhase(string(PhaseHealth), r.now().Sub(healthStart))
	}
	if syncUnderWay(app) && err == nil {
		r.reportSyncUnderWay(app)
	}
	r.notifyOutcome(app, err)
	var phaseErr *PhaseError
	took := r.now().Sub(start)
	switch {
	case verdict == health.CheckFailed:
		r.metrics().ObserveTick(took, string(PhaseHealth), plumbv1.ReasonHealthCheckFailed)
	case errors.As(err, &phaseErr):
		r.metrics().ObserveTick(took, string(phaseErr.Phase), phaseErr.Reason)
		if phaseErr.Terminal {
			return queue.Every(t.interval), queue.Terminal(err)
		}
	case err != nil:
		r.metrics().ObserveTick(took, string(PhaseApply), plumbv1.ReasonApplyFailed)
	default:
		r.metrics().ObserveTick(took, "", "")
	}
	if last := app.Status.LastSuccessfulTickTime; err == nil && last != nil {
		r.memory.succeeded(t.key, last.Time)
	}
	if syncUnderWay(app) && err == nil {
		// Its objects' and hooks' events bring the next tick forward; this
		// is the net under them.
		return queue.Every(min(t.interval, syncPollInterval)), nil
	}
	return queue.Every(t.interval), err
}

// LastSuccess is when a tick of the App last succeeded in this process
// (false when none has): the App's status says so too, but a tick that
// changed nothing but times writes it only every heartbeatEvery ticks.
func (r *Reconciler) LastSuccess(key types.NamespacedName) (time.Time, bool) {
	return r.memory.lastSuccessOf(key)
}

// getApp reads the App from the cache, or from the API server when the
// cache has not caught up with plumb's own last write to it: a tick never
// starts from a status older than the one the last tick wrote. A patient
// read first waits (up to catchUpTimeout) for the cache to catch up.
func (r *Reconciler) getApp(ctx context.Context, key types.NamespacedName, patient bool) (*plumbv1.App, error) {
	app := &plumbv1.App{}
	if err := r.Client.Get(ctx, key, app); err != nil {
		return nil, err
	}
	written := r.memory.appRV(key)
	current := func(app *plumbv1.App) bool {
		if written == "" || written == app.ResourceVersion {
			return true
		}
		cmp, err := resourceversion.CompareResourceVersion(app.ResourceVersion, written)
		return err == nil && cmp > 0 // newer than plumb's write: someone changed the App since
	}
	if current(app) || r.APIReader == nil {
		return app, nil
	}
	if patient {
		caughtUp := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, catchUpTimeout, true, func(ctx context.Context) (bool, error) {
			if err := r.Client.Get(ctx, key, app); err != nil {
				return false, err
			}
			return current(app), nil
		})
		if caughtUp != nil {
			return nil, fmt.Errorf("the App cache has not caught up with plumb's last write of App %s: %w", key, caughtUp)
		}
		return app, nil
	}
	fresh := &plumbv1.App{}
	if err := r.APIReader.Get(ctx, key, fresh); err != nil {
		return nil, err
	}
	return fresh, nil
}

func (r *Reconciler) metrics() MetricsRecorder {
	if r.Metrics == nil {
		return noMetrics{}
	}
	return r.Metrics
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

// run is the four phases: the plan (Read, Observe, Diff), then Apply. It
// returns the change set of the Apply phase, or the wait that held the
// tick before Observe.
func (r *Reconciler) run(ctx context.Context, t *tick, timer *phaseTimer) (*fluxssa.ChangeSet, *dependencyWait, error) {
	app, wake := t.app, t.wake
	s := r.newPass(app, t.log, timer)
	defer func() { t.target = s.target }()
	request := app.Annotations[plumbv1.AnnotationSyncRequestedAt]
	s.syncRequested = request != "" && request != app.Status.LastHandledSyncRequest
	if err := s.plan(ctx, func(ctx context.Context, cluster ClusterInfo) (*source.Result, error) {
		return r.readPhase(ctx, app, wake, cluster)
	}); err != nil || s.held != nil {
		return nil, s.held, unreached(s.target, err)
	}
	s.next(PhaseApply)
	changes, err := s.apply(ctx)
	r.recordDrift(app, s.planned, err != nil)
	r.notifyDrift(app, s.planned, err != nil, s.revision)
	if err != nil {
		return changes, nil, unreached(s.target, err)
	}
	markSuccess(app, PhaseApply, r.now())
	s.next("")
	r.countChanges(changes)
	if len(s.planned.left) == 0 && s.syncWaiting == "" {
		// A revision that follows an earlier one went live: how long after
		// its commit (an App's first revision measures its creation, not a
		// delivery, and is not counted).
		if previous := app.Status.LastAppliedRevision; previous != "" && previous != s.revision && !s.result.CommitTime.IsZero() {
			r.metrics().ObserveCommitToApplied(r.now().Sub(s.result.CommitTime))
		}
		app.Status.LastAppliedRevision = s.revision
	}
	return changes, nil, nil
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

func displayPath(p string) string {
	if strings.Trim(p, "/.") == "" {
		return "the repository root"
	}
	return p
}
