package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	fluxssa "github.com/fluxcd/pkg/ssa"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
)

// Only the tick writes an App's status, at most once per tick (see Tick's
// defer and writeStatus).

// writeStatus writes the App's status when the tick changed it, with
// optimistic locking: on a conflict it reads the App afresh from the API
// server and writes the tick's status over that. A status that changed in
// nothing but its times is written only as a heartbeat (see
// heartbeatEvery) — when the tick started from the very App that plumb
// last wrote; a copy plumb cannot vouch for (after a restart, or after
// someone else wrote the App) is written over, so no stale field survives.
//
// onlyIfChanged (a re-assessment of health) writes only a status that
// changed, and does not count towards the heartbeat.
func (r *Reconciler) writeStatus(ctx context.Context, original, app *plumbv1.App, onlyIfChanged bool, log *zap.Logger) {
	if onlyIfChanged && equality.Semantic.DeepEqual(original.Status, app.Status) {
		return
	}
	key := client.ObjectKeyFromObject(app)
	log = log.With(zap.String("phase", "status"), zap.String("revision", app.Status.LastAttemptedRevision))
	heartbeat := original.ResourceVersion == r.memory.appRV(key) && sameButTimes(original.Status, app.Status)
	if heartbeat && r.memory.skipWrite(key) {
		return
	}
	// Whatever brought this write (a tick, a re-assessment, a suspended
	// App), it carries the ticks that earlier writes skipped.
	if ticks := r.memory.ticksOf(key); ticks != nil {
		app.Status.RecentTicks = ticks
	}
	var patch client.Patch = client.MergeFromWithOptions(original, client.MergeFromWithOptimisticLock{})
	if heartbeat {
		// Only the times moved: send them alone rather than compute a patch
		// from two encodings of the whole App (its inventory of thousands).
		data, err := heartbeatPatch(original.ResourceVersion, app.Status)
		if err != nil {
			log.Error("Failed to write status", zap.Error(err))
			return
		}
		patch = client.RawPatch(types.MergePatchType, data)
	}
	err := r.Client.Status().Patch(ctx, app, patch)
	if apierrors.IsConflict(err) && r.APIReader != nil {
		status := app.Status
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			fresh := &plumbv1.App{}
			if err := r.APIReader.Get(ctx, key, fresh); err != nil {
				return err
			}
			*app = *fresh.DeepCopy()
			app.Status = status
			return r.Client.Status().Patch(ctx, app, client.MergeFromWithOptions(fresh, client.MergeFromWithOptimisticLock{}))
		})
	}
	switch {
	case err == nil:
		r.memory.setAppRV(key, app.ResourceVersion)
		r.memory.statusWritten(key)
	case !apierrors.IsNotFound(err):
		log.Error("Failed to write status", zap.Error(err))
	}
}

// heartbeatPatch is a JSON merge patch of a status's times alone, with the
// resourceVersion it applies to (the server refuses it, Conflict, when the
// App changed since).
func heartbeatPatch(resourceVersion string, status plumbv1.AppStatus) ([]byte, error) {
	type phaseTime struct {
		LastSuccessTime *metav1.Time `json:"lastSuccessTime"`
	}
	times := map[string]any{
		"recentTicks":            status.RecentTicks,
		"lastTickTime":           status.LastTickTime,
		"lastSuccessfulTickTime": status.LastSuccessfulTickTime,
		"phases": map[string]phaseTime{
			"read": {status.Phases.Read.LastSuccessTime}, "observe": {status.Phases.Observe.LastSuccessTime},
			"diff": {status.Phases.Diff.LastSuccessTime}, "apply": {status.Phases.Apply.LastSuccessTime},
		},
	}
	if status.Drift != nil {
		times["drift"] = map[string]any{"lastDetectedTime": status.Drift.LastDetectedTime}
	}
	return json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": resourceVersion}, "status": times})
}

// sameButTimes reports whether two statuses differ in nothing but the times
// that move on every tick. The inventory, by far the largest part, is
// compared entry by entry rather than by reflection, and not copied.
func sameButTimes(a, b plumbv1.AppStatus) bool {
	invA, invB := a.Inventory, b.Inventory
	if (invA == nil) != (invB == nil) || (invA != nil && !slices.Equal(invA.Entries, invB.Entries)) {
		return false
	}
	a.Inventory, b.Inventory = nil, nil
	return equality.Semantic.DeepEqual(withoutTimes(a), withoutTimes(b))
}

// withoutTimes is a status with the times that move on every tick cleared.
func withoutTimes(status plumbv1.AppStatus) plumbv1.AppStatus {
	s := *status.DeepCopy()
	s.LastTickTime, s.LastSuccessfulTickTime = nil, nil
	s.RecentTicks = nil
	for _, ps := range []*plumbv1.PhaseStatus{&s.Phases.Read, &s.Phases.Observe, &s.Phases.Diff, &s.Phases.Apply} {
		ps.LastSuccessTime = nil
	}
	if s.Drift != nil {
		s.Drift.LastDetectedTime = nil
	}
	return s
}

// recordOutcome sets conditions, phase status and times, logs the result
// and records an Event when something changed or a failure is new. On
// success it returns what was applied (Ready's message when every object
// is healthy; settleHealth then decides Ready).
func (r *Reconciler) recordOutcome(app *plumbv1.App, changes *fluxssa.ChangeSet, err error, start time.Time, log *zap.Logger) *appliedOutcome {
	now := r.now()
	t := metav1.NewTime(now)
	app.Status.LastTickTime = &t
	if summary := changeSummary(changes); summary != "" {
		r.Events.Eventf(app, corev1.EventTypeNormal, plumbv1.ReasonApplied, "revision %s: %s", app.Status.LastAttemptedRevision, summary)
	}
	if err == nil {
		app.Status.ObservedGeneration = app.Generation
		app.Status.LastSuccessfulTickTime = &t
		message := fmt.Sprintf("Applied revision %s (%d objects)", app.Status.LastAppliedRevision, inventoryLen(app)-len(app.Status.Kept))
		if len(app.Status.Kept) > 0 {
			message = fmt.Sprintf("Applied revision %s (%d objects; %d that left Git kept by the prune guard, see status.kept)",
				app.Status.LastAppliedRevision, inventoryLen(app)-len(app.Status.Kept), len(app.Status.Kept))
		}
		log.Info("Ticked", zap.String("phase", string(PhaseApply)), zap.String("revision", app.Status.LastAppliedRevision), zap.Duration("took", now.Sub(start)))
		return &appliedOutcome{generation: app.Generation, revision: app.Status.LastAppliedRevision, message: message}
	}

	var phaseErr *PhaseError
	if !errors.As(err, &phaseErr) {
		phaseErr = &PhaseError{Phase: PhaseApply, Reason: plumbv1.ReasonApplyFailed, Err: err}
	}
	ps := phaseStatus(app, phaseErr.Phase)
	message := fmt.Sprintf("%s phase failed: %v", phaseErr.Phase, phaseErr.Err)
	isNew := ps.LastError != message
	ps.LastFailureTime = &t
	ps.LastError = truncate(message, 2048)
	ps.Reason = phaseErr.Detail
	if ps.Reason == "" {
		ps.Reason = phaseErr.Reason
	}
	ps.ConsecutiveFailures++
	setCondition(app, plumbv1.ConditionReady, false, phaseErr.Reason, message, now)
	setCondition(app, plumbv1.ConditionReconciling, !phaseErr.Terminal, phaseErr.Reason, message, now)
	setCondition(app, plumbv1.ConditionStalled, phaseErr.Terminal, phaseErr.Reason, message, now)
	if isNew {
		r.Events.Eventf(app, corev1.EventTypeWarning, phaseErr.Reason, "%s", truncate(message, 1024))
	}
	log.Error("Tick failed", zap.String("phase", string(phaseErr.Phase)), zap.String("revision", app.Status.LastAttemptedRevision), zap.String("reason", phaseErr.Reason),
		zap.String("detail", phaseErr.Detail), zap.Error(phaseErr.Err))
	return nil
}

// changeSummary lists what an apply and prune changed ("" when nothing).
func changeSummary(changes *fluxssa.ChangeSet) string {
	if changes == nil {
		return ""
	}
	var parts []string
	for _, e := range changes.Entries {
		switch e.Action {
		case fluxssa.CreatedAction, fluxssa.ConfiguredAction, fluxssa.DeletedAction:
			parts = append(parts, e.Subject+" "+string(e.Action))
		}
	}
	parts = cutList(parts)
	return strings.Join(parts, ", ")
}

// maxChangeSetEntries bounds the objects status.lastChangeSet lists.
const maxChangeSetEntries = 50

// recordChangeSet keeps what the tick created, configured and deleted in
// status.lastChangeSet, when it changed anything (a tick that changed
// nothing leaves the last one), with the sync request it answered.
func (r *Reconciler) recordChangeSet(app *plumbv1.App, changes *fluxssa.ChangeSet, answered string) {
	if !changedObjects(changes) {
		return // nothing created, configured or deleted: the last one stays
	}
	cs := &plumbv1.ChangeSet{Revision: app.Status.LastAttemptedRevision, Time: metav1.NewTime(r.now()), SyncRequest: answered}
	for _, e := range changes.Entries {
		switch e.Action {
		case fluxssa.CreatedAction:
			cs.Created++
		case fluxssa.ConfiguredAction:
			cs.Configured++
		case fluxssa.DeletedAction:
			cs.Deleted++
		default:
			continue
		}
		if len(cs.Entries) < maxChangeSetEntries {
			cs.Entries = append(cs.Entries, plumbv1.ChangeSetEntry{Object: changeSubject(e), Action: string(e.Action)})
		}
	}
	app.Status.LastChangeSet = cs
}

// changeSubject names a change set's object as status names objects.
func changeSubject(e fluxssa.ChangeSetEntry) string {
	if e.ObjMetadata.Name == "" {
		return e.Subject // an entry plumb made, already so named
	}
	return plumbv1.ObjectRef{Group: e.ObjMetadata.GroupKind.Group, Kind: e.ObjMetadata.GroupKind.Kind,
		Namespace: e.ObjMetadata.Namespace, Name: e.ObjMetadata.Name}.String()
}
