package reconcile

import (
	"errors"
	"time"

	fluxssa "github.com/fluxcd/pkg/ssa"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
)

// phaseTimer times the phases of one tick, for the phase metric and the
// tick's record in status.recentTicks.
type phaseTimer struct {
	r          *Reconciler
	start      time.Time
	phase      Phase // the phase under way
	phaseStart time.Time
	millis     map[Phase]int64
	// revision is what the tick's Read read ("" until it has).
	revision string
}

func (r *Reconciler) newPhaseTimer(start time.Time) *phaseTimer {
	return &phaseTimer{r: r, start: start, phase: PhaseRead, phaseStart: start, millis: map[Phase]int64{}}
}

// done ends the phase under way (recording its duration in the metric) and
// starts next.
func (t *phaseTimer) done(next Phase) {
	now := t.r.now()
	t.r.metrics().ObservePhase(string(t.phase), now.Sub(t.phaseStart))
	t.millis[t.phase] = now.Sub(t.phaseStart).Milliseconds()
	t.phase, t.phaseStart = next, now
}

// failedAhead ends the phase under way at at, when a check of a later
// phase, made ahead of it, failed (pass.guard): the tick ends in that
// phase, timed from at. Like a phase that fails, it is not observed in the
// phase metric. A failure named as the phase under way, or an earlier one,
// changes nothing.
func (t *phaseTimer) failedAhead(phase Phase, at time.Time) {
	if phase.order() <= t.phase.order() {
		return
	}
	t.millis[t.phase] = at.Sub(t.phaseStart).Milliseconds()
	t.phase, t.phaseStart = phase, at
}

// order is the place of a phase in a tick: Read first, Apply last (0 for
// a phase outside the four).
func (p Phase) order() int {
	switch p {
	case PhaseRead:
		return 1
	case PhaseObserve:
		return 2
	case PhaseDiff:
		return 3
	case PhaseApply:
		return 4
	}
	return 0
}

// record is the tick's TickRecord once it ended with err, or held by its
// dependsOn: the phase under way is timed until now.
func (t *phaseTimer) record(app *plumbv1.App, trigger Trigger, changes *fluxssa.ChangeSet, held bool, err error) plumbv1.TickRecord {
	now := t.r.now()
	rec := plumbv1.TickRecord{Start: metav1.NewTime(t.start), Trigger: string(trigger), Revision: t.revision,
		Result: plumbv1.ReasonSucceeded, TotalMillis: now.Sub(t.start).Milliseconds(), Shard: t.r.Shard}
	var phaseErr *PhaseError
	switch {
	case held:
		rec.Result = TickWaiting
	case errors.As(err, &phaseErr):
		rec.Result, rec.FailedPhase = phaseErr.Reason, phaseName(phaseErr.Phase)
		if phaseErr.Detail != "" {
			rec.Result = phaseErr.Detail
		}
	case err != nil:
		rec.Result, rec.FailedPhase = plumbv1.ReasonApplyFailed, phaseName(PhaseApply)
	}
	if (err != nil || held) && t.phase != "" {
		t.millis[t.phase] = now.Sub(t.phaseStart).Milliseconds()
	}
	if changes != nil {
		for _, e := range changes.Entries {
			if e.Action == fluxssa.CreatedAction || e.Action == fluxssa.ConfiguredAction || e.Action == fluxssa.DeletedAction {
				rec.Changed++
			}
		}
	}
	for phase, field := range map[Phase]**int64{PhaseRead: &rec.ReadMillis, PhaseObserve: &rec.ObserveMillis, PhaseDiff: &rec.DiffMillis, PhaseApply: &rec.ApplyMillis} {
		if ms, ok := t.millis[phase]; ok {
			*field = &ms
		}
	}
	return rec
}

// TickWaiting is the result of a tick that waits for its dependsOn.
const TickWaiting = "Waiting"

// phaseName is a phase as status.recentTicks names it: Read, Observe,
// Diff or Apply.
func phaseName(p Phase) string {
	if p == "" {
		return ""
	}
	return string(p[0]-'a'+'A') + string(p[1:])
}

// recordTick appends the tick to status.recentTicks. The list is kept in
// memory too: a tick whose status write is skipped (only times changed)
// is written with the next one rather than lost.
func (r *Reconciler) recordTick(key types.NamespacedName, app *plumbv1.App, rec plumbv1.TickRecord) {
	app.Status.RecentTicks = r.memory.addTick(key, app.Status.RecentTicks, rec)
}

// Every status write carries the remembered ticks, and at most
// heartbeatEvery ticks in a row go unwritten: the list's MaxRecentTicks
// hold them all. (This fails to compile should heartbeatEvery exceed it.)
var _ = [plumbv1.MaxRecentTicks - heartbeatEvery]struct{}{}
