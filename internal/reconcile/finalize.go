package reconcile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/impersonation"
	"github.com/plumb-dev/plumb/internal/syncorder"
	"github.com/plumb-dev/plumb/queue"
	"github.com/plumb-dev/plumb/ssa"
)

// finalize runs when an App is being deleted: with prune on it deletes the
// App's objects (those that still carry its labels) except those the prune
// guard keeps, which lose the App's labels (no deleted App claims them) and
// which a NotPruned Event names; otherwise it leaves them (orphans). Then it removes the finalizer and forgets the App.
func (r *Reconciler) finalize(ctx context.Context, app *plumbv1.App, log *zap.Logger) (queue.Outcome, error) {
	if !slices.Contains(app.Finalizers, plumbv1.Finalizer) {
		return queue.Dropped(), nil
	}
	interval := app.Spec.IntervalOrDefault()
	log = log.With(zap.String("phase", "finalize"), zap.String("revision", app.Status.LastAppliedRevision))
	r.endDriftEpisode(app, "the App is deleted")
	original := app.DeepCopy()
	// write writes what the finalizer changed in the status so far; each
	// write is a patch from the last one's result.
	write := func() {
		app.TypeMeta = original.TypeMeta // a write's result has none
		before := app.ResourceVersion
		r.writeStatus(ctx, original, app, true, log)
		if app.ResourceVersion != before {
			app.TypeMeta = original.TypeMeta
			original = app.DeepCopy()
		}
	}
	// Delete hooks given up (status.deleteHooks turned off) are given up for
	// both phases.
	runsHooks := func() bool { return app.Status.DeleteHooks && !app.Spec.Suspend }
	// hooks runs the delete hooks of phase; wait says the deletion waits
	// for them. What they did is written at once: a hook deleted by its
	// policy must not be taken for one that vanished.
	hooks := func(phase syncorder.Phase) (outcome queue.Outcome, wait bool, err error) {
		if !runsHooks() {
			return queue.Outcome{}, false, nil
		}
		waiting, err := r.deleteHooks(ctx, app, phase, log)
		write()
		if err == nil && waiting == "" {
			return queue.Outcome{}, false, nil
		}
		return queue.Every(min(interval, syncPollInterval)), true, err
	}
	if applied, named := app.Status.Destination, app.Spec.Destination.SecretName(); applied != named && (inventoryLen(app) > 0 || runsHooks()) {
		// Its destination changed and no tick has recorded that yet: the
		// inventory names objects of the former cluster, and the same
		// names in the new one may be anyone's. They are left in place,
		// as a tick would leave them, and the delete hooks, which would
		// run in the new cluster, are given up.
		r.Events.Eventf(app, corev1.EventTypeWarning, plumbv1.ReasonOrphaned,
			"the App is deleted and its destination changed from %s to %s since its objects were applied, so its %d objects in the former are left there, not pruned, and its delete hooks are not run",
			destinationName(applied), destinationName(named), inventoryLen(app))
		log.Warn("Orphaned the deleted App's objects: its destination changed", zap.String("from", destinationName(applied)),
			zap.String("to", destinationName(named)), zap.Int("objects", inventoryLen(app)))
		app.Status.Inventory = nil
		app.Status.DeleteHooks = false
		write()
	}
	// Once pruned, the PostDelete hooks are all that is left.
	pruned := runsHooks() && app.Status.Sync != nil && app.Status.Sync.Phase == plumbv1.SyncPhasePostDelete
	if pruned {
		if outcome, wait, err := hooks(syncorder.PostDelete); wait {
			return outcome, err
		}
		return r.removeFinalizer(ctx, app, interval)
	}
	hadHooks := runsHooks()
	if outcome, wait, err := hooks(syncorder.PreDelete); wait {
		return outcome, err
	}
	if hadHooks && !runsHooks() && inventoryLen(app) > 0 {
		// The delete hooks were given up: nothing is pruned for an error
		// (a backup that never ran), the objects are left in place.
		r.Events.Eventf(app, corev1.EventTypeWarning, plumbv1.ReasonOrphaned,
			"the App is deleted and its PreDelete hooks could not run, so its %d objects are left in place, not pruned", inventoryLen(app))
		log.Warn("Orphaned the deleted App's objects: its PreDelete hooks could not run", zap.Int("objects", inventoryLen(app)))
		app.Status.Inventory = nil
		write()
	}
	var target *Target
	var targetErr error
	prunes := app.Spec.PruneEnabled() && !app.Spec.Suspend
	if prunes && inventoryLen(app) > 0 {
		if target, targetErr = r.targetOf(ctx, app); targetErr == nil {
			targetErr = reach(target)
		}
	}
	switch {
	case !prunes:
		log.Info("Orphaned the deleted App's objects", zap.Int("objects", inventoryLen(app)))
	case inventoryLen(app) == 0:
	case destinationLost(targetErr):
		// Its namespace is being deleted, most likely, or the cluster is
		// no longer to be reached: its objects there are left in place.
		r.Events.Eventf(app, corev1.EventTypeWarning, plumbv1.ReasonOrphaned,
			"the App is deleted but its destination cannot be used, so its %d objects there are left in place, not pruned: %v", inventoryLen(app), targetErr)
		log.Warn("Orphaned the deleted App's objects: its destination cannot be used", zap.Int("objects", inventoryLen(app)), zap.Error(targetErr))
	case targetErr != nil:
		r.Events.Eventf(app, corev1.EventTypeWarning, plumbv1.ReasonPruneFailed, "pruning the deleted App's objects: %v", targetErr)
		return queue.Every(interval), fmt.Errorf("pruning the objects of deleted App %s/%s: %w", app.Namespace, app.Name, targetErr)
	default:
		stale := r.staleObjects(app.Status.Inventory, nil, newTickKinds(target.Mapper))
		if len(stale) > 0 {
			applier, err := r.applierFor(ctx, app, target)
			switch {
			case errors.Is(err, impersonation.ErrServiceAccountNotFound) && r.serviceAccountGone(ctx, app):
				// Its namespace is being deleted, most likely: orphan the
				// objects rather than hold the App (and the namespace) up,
				// and never prune with the controller's own rights.
				names := make([]string, 0, len(stale))
				for _, obj := range stale {
					names = append(names, idOf(obj).String())
				}
				r.Events.Eventf(app, corev1.EventTypeWarning, plumbv1.ReasonOrphaned,
					"the App is deleted but its ServiceAccount is gone, so its %d objects are left in place, not pruned: %v; %s",
					len(stale), err, truncate(strings.Join(names, ", "), 800))
				log.Warn("Orphaned the deleted App's objects: its ServiceAccount is gone", zap.Strings("objects", names), zap.Error(err))
			case err != nil:
				r.Events.Eventf(app, corev1.EventTypeWarning, plumbv1.ReasonPruneFailed, "pruning the deleted App's objects: %v", err)
				return queue.Every(interval), fmt.Errorf("pruning the objects of deleted App %s/%s: %w", app.Namespace, app.Name, err)
			default:
				owner := ssa.Owner{Name: app.Name, Namespace: app.Namespace}
				cs, guarded, err := applier.Prune(ctx, stale, owner)
				if cs != nil {
					r.reportUnserved(app, cs)
				}
				if err != nil {
					r.Events.Eventf(app, corev1.EventTypeWarning, plumbv1.ReasonPruneFailed, "pruning the deleted App's objects: %v", err)
					return queue.Every(interval), fmt.Errorf("pruning the objects of deleted App %s/%s: %w", app.Namespace, app.Name, err)
				}
				r.disownKept(ctx, app, applier, owner, guarded, log)
				log.Info("Pruned the deleted App's objects", zap.String("changes", changeSummary(cs)))
			}
		}
	}
	if runsHooks() {
		// Recorded before the PostDelete hooks run, so that a later round
		// neither runs the PreDelete hooks again nor prunes again.
		app.Status.Inventory = nil
		if sync := app.Status.Sync; sync == nil || sync.Phase != plumbv1.SyncPhasePreDelete {
			app.Status.Sync = &plumbv1.SyncStatus{StartedAt: metav1.NewTime(r.now())} // the live App's last sync is not this one
		}
		app.Status.Sync.Phase, app.Status.Sync.Wave, app.Status.Sync.WaitingSince = plumbv1.SyncPhasePostDelete, nil, nil
		write()
	}
	if outcome, wait, err := hooks(syncorder.PostDelete); wait {
		return outcome, err
	}
	return r.removeFinalizer(ctx, app, interval)
}

// removeFinalizer lets the deleted App go, and forgets it.
func (r *Reconciler) removeFinalizer(ctx context.Context, app *plumbv1.App, interval time.Duration) (queue.Outcome, error) {
	patch := client.MergeFrom(app.DeepCopy())
	app.Finalizers = slices.DeleteFunc(app.Finalizers, func(f string) bool { return f == plumbv1.Finalizer })
	if err := r.Client.Patch(ctx, app, patch); client.IgnoreNotFound(err) != nil {
		return queue.Every(interval), fmt.Errorf("removing the finalizer of App %s/%s: %w", app.Namespace, app.Name, err)
	}
	r.forgetDeleted(client.ObjectKeyFromObject(app))
	return queue.Dropped(), nil
}

// deleteHooks runs a deleted App's delete hooks of phase (PreDelete before
// its objects are pruned, PostDelete after), read from its source as its
// spec names it now, with the ordered sync's machinery: status.sync
// records each, so none runs twice. waiting says what it waits for; an
// error, what failed.
//
// A hook that failed holds the deletion (until a new content of the source
// runs the hooks again, or the finalizer is removed by hand): the hook
// said the App's objects must not go. An error that keeps the hooks from
// running (an unreadable source or manifest, a right the ServiceAccount
// lacks, an API error) holds it for the App's timeout from the first such
// error (status.sync.waitingSince), unless a hook of the phase still runs
// within its own timeout; then the phase's hooks are given up, with an
// Event, rather than hold the App for ever (both phases: status.deleteHooks
// is turned off). They are given up at once where they cannot run at all: a hook out of the App's namespace under
// --no-cross-namespace, the App's namespace being deleted, or its
// ServiceAccount gone.
func (r *Reconciler) deleteHooks(ctx context.Context, app *plumbv1.App, phase syncorder.Phase, log *zap.Logger) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, app.Spec.TimeoutOrDefault())
	defer cancel()
	failedBefore := ""
	if app.Status.Sync != nil {
		failedBefore = app.Status.Sync.Failure
	}
	waiting, failed, err := r.runDeleteHooks(ctx, app, phase, log)
	sync := app.Status.Sync
	// A hook recorded as running holds the deletion whatever the error: it
	// is read again, and ended by its own timeout, once reads work again.
	running := sync != nil && slices.ContainsFunc(sync.Hooks, func(h plumbv1.HookStatus) bool { return h.Status == plumbv1.HookRunning })
	var never *neverRuns
	switch {
	case errors.As(err, &never) && (never.now || !running):
		r.Events.Eventf(app, corev1.EventTypeWarning, plumbv1.ReasonSyncFailed, "the App's delete hooks were not run: %v", err)
		log.Info("Gave up the deleted App's delete hooks", zap.String("hookPhase", string(phase)), zap.Error(err))
		app.Status.DeleteHooks = false
		return "", nil
	case failed != "":
		sync.Failure, sync.FailingSince = truncate(failed, 1024), nil
		if sync.Failure != failedBefore {
			r.Events.Eventf(app, corev1.EventTypeWarning, plumbv1.ReasonSyncFailed, "the deletion of the App waits: %s", truncate(failed, 1000))
		}
		setCondition(app, plumbv1.ConditionReady, false, plumbv1.ReasonSyncFailed, truncate("the deletion of the App waits: "+failed, 1024), r.now())
		return "", fmt.Errorf("the deletion of App %s/%s waits: %s (a new content of its source runs the hooks again)", app.Namespace, app.Name, failed)
	case err == nil:
		if sync != nil {
			sync.FailingSince = nil
		}
		return waiting, nil
	}
	if sync == nil {
		sync = &plumbv1.SyncStatus{Phase: string(phase), StartedAt: metav1.NewTime(r.now())}
		app.Status.Sync = sync
	}
	if sync.FailingSince == nil {
		since := metav1.NewTime(r.now())
		sync.FailingSince = &since
	}
	timeout := app.Spec.TimeoutOrDefault()
	if running || r.now().Sub(sync.FailingSince.Time) <= timeout {
		return "", fmt.Errorf("the %s hooks of deleted App %s/%s: %w", phase, app.Namespace, app.Name, err)
	}
	r.Events.Eventf(app, corev1.EventTypeWarning, plumbv1.ReasonSyncFailed, "the App's delete hooks were given up in phase %s after %s of errors: %v", phase, timeout, err)
	log.Info("Gave up the deleted App's delete hooks", zap.String("hookPhase", string(phase)), zap.Error(err))
	sync.FailingSince = nil
	app.Status.DeleteHooks = false
	return "", nil
}

// neverRuns is why a deleted App's delete hooks cannot run at all; now
// says they are given up even while a hook runs (its namespace is going:
// so is the hook).
type neverRuns struct {
	why string
	now bool
}

func (e *neverRuns) Error() string { return e.why }

// runDeleteHooks reads the App's source and runs its hooks of phase, once
// the hooks still running of another sync (one the deletion cut short, or
// an earlier content's delete hooks) have ended.
func (r *Reconciler) runDeleteHooks(ctx context.Context, app *plumbv1.App, phase syncorder.Phase, log *zap.Logger) (waiting, failed string, err error) {
	if r.namespaceTerminating(ctx, app) {
		return "", "", &neverRuns{why: fmt.Sprintf("the App's namespace %s is being deleted", app.Namespace), now: true}
	}
	s := &pass{r: r, app: app, key: client.ObjectKeyFromObject(app), log: log}
	if s.target, err = r.targetOf(ctx, app); err == nil {
		err = reach(s.target)
	}
	if err != nil {
		return "", "", err
	}
	result, err := r.read(ctx, app, false, time.Time{}, s.target.Cluster)
	if err != nil {
		return "", "", err
	}
	s.result, s.revision = result, result.Revision.String()
	if s.desired, s.kinds, s.order, err = r.prepare(app, result, s.target); err != nil {
		return "", "", err
	}
	if s.applier, err = r.applierFor(ctx, app, s.target); err != nil {
		if errors.Is(err, impersonation.ErrServiceAccountNotFound) && r.serviceAccountGone(ctx, app) {
			return "", "", &neverRuns{why: err.Error()}
		}
		return "", "", err
	}
	sync := app.Status.Sync
	deleting := sync != nil && (sync.Phase == plumbv1.SyncPhasePreDelete || sync.Phase == plumbv1.SyncPhasePostDelete)
	if sync != nil && !sync.Done() && !(deleting && s.sameSync(sync)) {
		if waiting, err := s.letHooksEnd(ctx, sync); err != nil || waiting != "" {
			return waiting, "", err
		}
	}
	var hooks []hookObject
	for _, h := range s.order.hooks {
		if h.place.In(phase) {
			hooks = append(hooks, h)
		}
	}
	if len(hooks) == 0 {
		return "", "", nil
	}
	objs := make([]*unstructured.Unstructured, 0, len(hooks))
	for _, h := range hooks {
		objs = append(objs, h.obj)
	}
	if err := r.checkNamespaces(app, objs, s.revision); err != nil {
		return "", "", &neverRuns{why: err.Error()}
	}
	if sa := r.serviceAccountOf(app); sa != "" {
		if err := s.authorizeHooks(ctx, sa, hooks); err != nil {
			return "", "", err
		}
	}
	if !deleting || !s.sameSync(sync) {
		sync = &plumbv1.SyncStatus{Revision: s.revision, Content: s.order.content, StartedAt: metav1.NewTime(r.now())}
		app.Status.Sync = sync
	}
	sync.Phase = string(phase)
	waiting, failed, err = s.runHooks(ctx, sync, phase, log)
	if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
		return "", "", &neverRuns{why: fmt.Sprintf("the App's namespace %s is being deleted", app.Namespace), now: true}
	}
	sync.Message = truncate(waiting, 1024)
	return waiting, failed, err
}

// namespaceTerminating says the App's namespace is being deleted (read
// from the API server): no hook can be created in it any more.
func (r *Reconciler) namespaceTerminating(ctx context.Context, app *plumbv1.App) bool {
	if r.APIReader == nil {
		return false
	}
	ns := &metav1.PartialObjectMetadata{}
	ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	err := r.APIReader.Get(ctx, client.ObjectKey{Name: app.Namespace}, ns)
	return err == nil && ns.DeletionTimestamp != nil
}

// forgetDeleted drops what the controller holds for a deleted App: its
// cached objects, credentials and identity, and its memory; a drift
// episode still open is resolved (the App may be gone without this
// replica's finalizer having run, e.g. removed by hand), so that no
// Notification is left with an alert that fires for ever.
func (r *Reconciler) forgetDeleted(key types.NamespacedName) {
	r.endDriftEpisode(&plumbv1.App{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}, "the App is deleted")
	r.AppReleased(key)
}

// disownKept removes the deleted App's labels from the objects the prune
// guard kept, so that no App claims them any more, and names them in one
// NotPruned Event. An object whose labels cannot be removed keeps them (it
// stays claimed by the deleted App: another App needs a takeover
// annotation); that does not hold the App's deletion up.
func (r *Reconciler) disownKept(ctx context.Context, app *plumbv1.App, applier Applier, owner ssa.Owner, kept []ssa.Kept, log *zap.Logger) {
	if len(kept) == 0 {
		return
	}
	var parts []string
	for _, k := range kept {
		part := fmt.Sprintf("%s (%s)", idOf(k.Object), k.Guard.Message)
		if err := applier.Disown(ctx, k.Object, owner); err != nil {
			log.Warn("Could not remove a deleted App's labels from an object it kept", zap.Error(err))
			part += fmt.Sprintf(" [still labelled as this App's: %v]", err)
		}
		parts = append(parts, part)
	}
	parts = cutList(parts)
	r.Events.Eventf(app, corev1.EventTypeNormal, plumbv1.ReasonNotPruned,
		"the App is deleted; kept what the prune guard protects, without the App's labels: %s", truncate(strings.Join(parts, "; "), 1000))
}

// serviceAccountGone confirms with the API server (not a cache that may
// lag) that the App's ServiceAccount does not exist, before its objects are
// orphaned for good.
func (r *Reconciler) serviceAccountGone(ctx context.Context, app *plumbv1.App) bool {
	if r.APIReader == nil {
		return true
	}
	sa := &metav1.PartialObjectMetadata{}
	sa.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ServiceAccount"))
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: app.Namespace, Name: r.serviceAccountOf(app)}, sa)
	return apierrors.IsNotFound(err)
}
