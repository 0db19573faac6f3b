package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	fluxssa "github.com/fluxcd/pkg/ssa"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/informers"
	"github.com/plumb-dev/plumb/internal/health"
	"github.com/plumb-dev/plumb/queue"
)

// PhaseHealth is the health assessment that follows a successful Apply:
// its own failure domain (reason HealthCheckFailed), for metrics and logs.
const PhaseHealth Phase = "health"

// ObjectChanged asks for a tick of the App because one of its objects
// changed in a way a tick must diff (an informer event).
func (r *Reconciler) ObjectChanged(key types.NamespacedName) {
	r.memory.mark(key, enqueueMarks{full: true})
	if r.Enqueue != nil {
		r.Enqueue(key)
	}
}

// SyncRequestSeen records when this replica's App informer first saw the
// App's sync request (its plumb.dev/sync-requested-at), by this process's
// clock: the fresh read it asks for is then served by what was asked of
// the source since (source.Request.FreshSince), such as the one listing of a
// registry's tags that the first App a push woke made.
func (r *Reconciler) SyncRequestSeen(key types.NamespacedName, request string, at time.Time) {
	r.memory.sawSyncRequest(key, request, at)
}

// AppDeleted forgets what was remembered of an App that is gone from the
// API server (the informer saw its deletion; a leader's finalizing tick
// has already forgotten it, a follower's memory of its sync requests and
// marks goes here).
func (r *Reconciler) AppDeleted(key types.NamespacedName) {
	r.memory.forgetApp(key)
}

// AppReleased forgets what this replica holds for an App that another
// replica ticks from now on (--shards=auto): its informers' use, its
// credentials and identity, and its memory. A drift episode open is left
// to the new owner, which finds the drift again.
func (r *Reconciler) AppReleased(key types.NamespacedName) {
	if r.Observer != nil {
		r.Observer.Release(key)
	}
	if r.Credentials != nil {
		r.Credentials.Release(key)
	}
	if r.Identities != nil {
		r.Identities.Release(key)
	}
	if r.destinations != nil {
		r.destinations.Release(key)
	}
	r.memory.forgetApp(key)
}

// CredentialsChanged asks for a tick of the App because a Secret it uses
// changed (a rotated token or password): the tick reads it again and, for
// a destination's kubeconfig, connects with the new one. It goes through
// the event budget, as drift does.
func (r *Reconciler) CredentialsChanged(key types.NamespacedName) {
	r.memory.mark(key, enqueueMarks{full: true})
	if r.Enqueue != nil {
		r.Enqueue(key)
	}
}

// DependencyChanged asks for a tick of the App because an App it depends
// on changed: was created or deleted, or changed its readiness.
func (r *Reconciler) DependencyChanged(key types.NamespacedName) {
	r.memory.mark(key, enqueueMarks{dependency: true})
	if r.Enqueue != nil {
		r.Enqueue(key)
	}
}

// healthEventDelay is how long a re-assessment of health waits for more
// changes of health to join it: a rollout writes a Deployment's status
// again and again, and an object whose status never rests costs at most
// four re-assessments (and App status writes) a second. It goes through
// EnqueueAfter, not Enqueue, so that health changes never use up the event
// budget of drift.
const healthEventDelay = 250 * time.Millisecond

// HealthChanged asks for a new assessment of the App's health: one of its
// objects changed its kstatus health and nothing else. Unless something
// else asks for a tick meanwhile, the App's next tick only re-assesses
// health from the cache, reading neither Git nor the API server.
func (r *Reconciler) HealthChanged(key types.NamespacedName) {
	r.memory.mark(key, enqueueMarks{health: true})
	switch {
	case r.EnqueueAfter != nil:
		r.EnqueueAfter(key, healthEventDelay)
	case r.Enqueue != nil:
		r.Enqueue(key)
	}
}

// healthOnly reports whether this tick only re-assesses health: an event
// brought it forward, only health changes (or a health deadline) asked for
// it, and nothing about the App itself (its spec, a sync request) asks for
// more.
func healthOnly(wake queue.Wake, cause Trigger, marks enqueueMarks) bool {
	return wake == queue.WakeEvent && cause == TriggerDrift && marks.health && !marks.full && !marks.dependency
}

// reassess is a tick that only re-assesses health from the cache: it
// updates status.health and the Healthy condition, and Ready when the
// App's last full tick in this term applied its current spec (else Ready
// keeps saying what failed).
func (r *Reconciler) reassess(ctx context.Context, app *plumbv1.App, log *zap.Logger) {
	start := r.now()
	key := client.ObjectKeyFromObject(app)
	target, err := r.targetOf(ctx, app)
	if err != nil {
		// The next full tick says why; health is left as it was.
		log.Debug("Could not assess health: the App's cluster is not at hand", zap.String("phase", string(PhaseHealth)),
			zap.String("revision", app.Status.LastAppliedRevision), zap.Error(err))
		return
	}
	outcome := r.memory.appliedOf(key)
	if outcome != nil && outcome.generation != app.Generation {
		outcome = nil
	}
	verdict, newlyFailed := r.settleHealth(ctx, app, target, outcome, false)
	if newlyFailed {
		r.metrics().ObservePhaseFailure(string(PhaseHealth), plumbv1.ReasonHealthCheckFailed)
	}
	if outcome != nil {
		r.notifyOutcome(app, nil) // the revision's outcome, now that health decided it
	}
	r.metrics().ObservePhase(string(PhaseHealth), r.now().Sub(start))
	log.Debug("Assessed health", zap.String("phase", string(PhaseHealth)), zap.String("revision", app.Status.LastAppliedRevision),
		zap.Int("verdict", int(verdict)))
}

// settleHealth assesses the App's objects (its inventory but what the
// prune guard keeps) from the cache, records status.health and the Healthy
// condition, and, when outcome says what the last tick applied, Ready. An
// apply that changed objects (changed) starts a new wait. While objects
// are in progress it asks for a tick when the health timeout passes. It
// returns the verdict for Ready (Healthy when Ready does not wait), and
// whether Ready has just turned HealthCheckFailed.
func (r *Reconciler) settleHealth(ctx context.Context, app *plumbv1.App, target *Target, outcome *appliedOutcome, changed bool) (verdict health.Verdict, newlyFailed bool) {
	key := client.ObjectKeyFromObject(app)
	now := r.now()
	previousReady := apimeta.FindStatusCondition(app.Status.Conditions, plumbv1.ConditionReady)
	wasFailed := previousReady != nil && previousReady.Reason == plumbv1.ReasonHealthCheckFailed
	previousHealthy := apimeta.FindStatusCondition(app.Status.Conditions, plumbv1.ConditionHealthy)

	summary := r.assess(ctx, app, target)
	summary.WaitingSince = health.Since(app.Status.Health, summary, changed, now)
	app.Status.Health = summary
	timeout := app.Spec.HealthTimeoutOrDefault()
	verdict, deadline, message := health.Judge(summary, now, timeout)
	where := "" // the destination, when it is another cluster
	if target != nil && target.Name != "" {
		where = " in " + destinationName(target.Name)
		message = "in " + destinationName(target.Name) + ", " + message // before the objects' list
	}
	switch verdict {
	case health.Healthy:
		setConditionStatus(app, plumbv1.ConditionHealthy, metav1.ConditionTrue, plumbv1.ReasonHealthy,
			fmt.Sprintf("all %d objects are Current%s", summary.Current, where), now)
		if previousHealthy != nil && previousHealthy.Status != metav1.ConditionTrue {
			r.Events.Eventf(app, corev1.EventTypeNormal, plumbv1.ReasonHealthy, "all %d objects are Current%s", summary.Current, where)
		}
	case health.Progressing:
		setConditionStatus(app, plumbv1.ConditionHealthy, metav1.ConditionUnknown, plumbv1.ReasonProgressing, message, now)
		r.memory.addHealthDue(key, deadline)
		if r.EnqueueAfter != nil {
			r.EnqueueAfter(key, deadline.Sub(now))
		}
	default:
		setConditionStatus(app, plumbv1.ConditionHealthy, metav1.ConditionFalse, plumbv1.ReasonHealthCheckFailed, message, now)
	}
	if outcome == nil {
		return verdict, false
	}
	switch {
	case verdict == health.Healthy || !app.Spec.WaitEnabled():
		setCondition(app, plumbv1.ConditionReady, true, plumbv1.ReasonSucceeded, outcome.message, now)
		setCondition(app, plumbv1.ConditionReconciling, false, plumbv1.ReasonSucceeded, outcome.message, now)
	case verdict == health.Progressing:
		setConditionStatus(app, plumbv1.ConditionReady, metav1.ConditionUnknown, plumbv1.ReasonProgressing, outcome.message+"; "+message, now)
		setCondition(app, plumbv1.ConditionReconciling, true, plumbv1.ReasonProgressing, message, now)
	default:
		setCondition(app, plumbv1.ConditionReady, false, plumbv1.ReasonHealthCheckFailed, message, now)
		setCondition(app, plumbv1.ConditionReconciling, false, plumbv1.ReasonHealthCheckFailed, message, now)
		if !wasFailed || previousReady.Message != truncate(message, 1024) {
			r.Events.Eventf(app, corev1.EventTypeWarning, plumbv1.ReasonHealthCheckFailed, "revision %s: %s", outcome.revision, truncate(message, 1000))
		}
		newlyFailed = !wasFailed
	}
	setCondition(app, plumbv1.ConditionStalled, false, plumbv1.ReasonSucceeded, outcome.message, now)
	keepDriftConflict(app, now)
	if !app.Spec.WaitEnabled() {
		return health.Healthy, false // Ready does not wait: not a failed tick
	}
	return verdict, newlyFailed
}

// keepDriftConflict makes Ready False while the Drifted condition says a
// field is left to another manager: what is live is not what Git says,
// never a silent green, nor a Progressing; only a failed health check
// (already False) keeps its own reason.
func keepDriftConflict(app *plumbv1.App, now time.Time) {
	ready := apimeta.FindStatusCondition(app.Status.Conditions, plumbv1.ConditionReady)
	drift := apimeta.FindStatusCondition(app.Status.Conditions, plumbv1.ConditionDrifted)
	if ready != nil && ready.Reason != plumbv1.ReasonHealthCheckFailed && drift != nil && drift.Status == metav1.ConditionTrue && drift.Reason == plumbv1.ReasonDriftConflict {
		setCondition(app, plumbv1.ConditionReady, false, plumbv1.ReasonDriftConflict, drift.Message, now)
	}
}

// assess sums up the health of each object of the App's inventory (but
// those the prune guard keeps), from the cache: for an object plumb wrote,
// as the write left it until the cache shows that version or a newer one.
func (r *Reconciler) assess(ctx context.Context, app *plumbv1.App, target *Target) *plumbv1.HealthStatus {
	var summary health.Summary
	if app.Status.Inventory == nil {
		return summary.Status()
	}
	key := client.ObjectKeyFromObject(app)
	kept := map[objectID]bool{}
	for _, k := range app.Status.Kept {
		kept[idOfRef(k.ObjectRef)] = true
	}
	for _, e := range app.Status.Inventory.Entries {
		if kept[idOfRef(e.ObjectRef)] {
			continue
		}
		summary.Add(e.ObjectRef, r.objectHealth(ctx, target, key, e.ObjectRef))
	}
	return summary.Status()
}

// partialReadTimeout bounds the read of an object that a sharded
// replica's cache lacks when its health is assessed.
const partialReadTimeout = 10 * time.Second

// objectHealth is one of the App's objects' health: from the informer
// cache, or as plumb's own last write left it while the cache has not
// caught up with that write.
func (r *Reconciler) objectHealth(ctx context.Context, target *Target, key types.NamespacedName, ref plumbv1.ObjectRef) health.Result {
	id := idOfRef(ref)
	gvk := schema.GroupVersionKind{Group: ref.Group, Version: ref.Version, Kind: ref.Kind}
	cached, err := target.Observer.Get(gvk, ref.Namespace, ref.Name)
	if err == nil && cached == nil && target.Observer.Partial() {
		// A sharded replica's cache lacks it: not labelled with the slot
		// yet (its tick relabels it), or a slot taken a moment ago.
		ctx, cancel := context.WithTimeout(ctx, partialReadTimeout) // the tick's: a drain or a lost slot cancels it
		fetched, ferr := target.Observer.Fetch(ctx, gvk, ref.Namespace, ref.Name)
		cancel()
		switch {
		case ferr != nil:
			return health.Result{Status: health.Unknown, Message: "not observed: " + ferr.Error()}
		case fetched != nil && fetched.Label(plumbv1.LabelAppName) != "":
			cached = fetched
		}
	}
	rv, written := r.memory.written(key, id)
	known := rv != "" && written != (health.Result{})
	switch {
	case known && errors.Is(err, informers.ErrNotStarted):
		// Of a kind whose CRD came with this very apply: watched from
		// the next tick on.
		return written
	case known && err == nil && cached != nil && olderThan(cached.GetResourceVersion(), rv):
		return written // changed by plumb; the cache has not caught up yet
	case known && err == nil && cached == nil && !seen(target, gvk, ref.Namespace, rv):
		return written // created by plumb; the cache has not caught up yet
	case err != nil:
		return health.Result{Status: health.Unknown, Message: "not observed: " + err.Error()}
	case cached == nil:
		return health.Result{Status: health.NotFound, Message: "not in the informer cache"}
	}
	return cached.Health()
}

// seen reports whether the informer of gvk in namespace has caught up with
// resourceVersion rv (an object it then lacks was deleted since).
func seen(target *Target, gvk schema.GroupVersionKind, namespace, rv string) bool {
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // ask, do not wait
	return target.Observer.WaitForResourceVersion(ctx, gvk, namespace, rv) == nil
}

// olderThan reports whether resourceVersion a is older than b (false when
// they cannot be compared).
func olderThan(a, b string) bool {
	c, err := resourceversion.CompareResourceVersion(a, b)
	return err == nil && c < 0
}

// changedObjects reports whether an apply created, configured or deleted
// anything.
func changedObjects(changes *fluxssa.ChangeSet) bool {
	if changes == nil {
		return false
	}
	for _, e := range changes.Entries {
		switch e.Action {
		case fluxssa.CreatedAction, fluxssa.ConfiguredAction, fluxssa.DeletedAction:
			return true
		}
	}
	return false
}
