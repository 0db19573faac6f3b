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

// record is the tick's TickRecord once it ended with err: the phase under
// way is timed until now (a failure the tick reports as a later phase's,
// such as the refusal of an empty render, which is Apply's, happens while
// it is still Read's turn).
func (t *phaseTimer) record(app *plumbv1.App, trigger Trigger, changes *fluxssa.ChangeSet, err error) plumbv1.TickRecord {
	now := t.r.now()
	rec := plumbv1.TickRecord{Start: metav1.NewTime(t.start), Trigger: string(trigger), Revision: t.revision,
		Result: plumbv1.ReasonSucceeded, TotalMillis: now.Sub(t.start).Milliseconds()}
	var waiting *dependencyWait
	var phaseErr *PhaseError
	switch {
	case errors.As(err, &waiting):
		rec.Result = TickWaiting
	case errors.As(err, &phaseErr):
		rec.Result, rec.FailedPhase = phaseErr.Reason, phaseName(phaseErr.Phase)
		if phaseErr.Detail != "" {
			rec.Result = phaseErr.Detail
		}
	case err != nil:
		rec.Result, rec.FailedPhase = plumbv1.ReasonApplyFailed, phaseName(PhaseApply)
	}
	if err != nil && t.phase != "" {
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

// addTick appends rec to the App's remembered ticks (seeded from status
// when this process remembers none), keeps the last MaxRecentTicks and
// returns a copy.
func (m *memory) addTick(key types.NamespacedName, fromStatus []plumbv1.TickRecord, rec plumbv1.TickRecord) []plumbv1.TickRecord {
	m.mu.Lock()
	defer m.mu.Unlock()
	a := m.app(key)
	if a.ticks == nil {
		a.ticks = append([]plumbv1.TickRecord{}, fromStatus...)
	}
	a.ticks = append(a.ticks, rec)
	if n := len(a.ticks); n > plumbv1.MaxRecentTicks {
		a.ticks = append([]plumbv1.TickRecord{}, a.ticks[n-plumbv1.MaxRecentTicks:]...)
	}
	return copyTicks(a.ticks)
}

// copyTicks is a deep copy of ticks.
func copyTicks(ticks []plumbv1.TickRecord) []plumbv1.TickRecord {
	out := make([]plumbv1.TickRecord, len(ticks))
	for i := range ticks {
		ticks[i].DeepCopyInto(&out[i])
	}
	return out
}

// ticksOf is a copy of the App's remembered ticks (nil when this process
// remembers none).
func (m *memory) ticksOf(key types.NamespacedName) []plumbv1.TickRecord {
	m.mu.Lock()
	defer m.mu.Unlock()
	a := m.app(key)
	if a.ticks == nil {
		return nil
	}
	return copyTicks(a.ticks)
}

// Every status write carries the remembered ticks, and at most
// heartbeatEvery ticks in a row go unwritten: the list's MaxRecentTicks
// hold them all. (This fails to compile should heartbeatEvery exceed it.)
var _ = [plumbv1.MaxRecentTicks - heartbeatEvery]struct{}{}
