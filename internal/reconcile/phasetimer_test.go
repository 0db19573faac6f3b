package reconcile

import (
	"testing"
	"time"
)

// A check that fails as a later phase ends the tick in that phase, from
// the check's start; one that fails as the phase under way, or an earlier
// one, leaves the timing alone.
func TestAFailureAheadEndsTheTickInItsPhase(t *testing.T) {
	start := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	timer := (&Reconciler{}).newPhaseTimer(start)
	timer.failedAhead(PhaseRead, start.Add(time.Second))
	if timer.phase != PhaseRead || len(timer.millis) != 0 {
		t.Fatalf("a Read failure during Read moved the timer: %s %v", timer.phase, timer.millis)
	}
	timer.failedAhead(PhaseApply, start.Add(2*time.Second))
	if timer.phase != PhaseApply || !timer.phaseStart.Equal(start.Add(2*time.Second)) || timer.millis[PhaseRead] != 2000 {
		t.Fatalf("after an Apply failure during Read: phase %s from %s, millis %v; want Apply from the check, Read 2000 ms",
			timer.phase, timer.phaseStart, timer.millis)
	}
	timer.failedAhead(PhaseDiff, start.Add(3*time.Second))
	if timer.phase != PhaseApply || len(timer.millis) != 1 {
		t.Fatalf("a failure of an earlier phase moved the timer: %s %v", timer.phase, timer.millis)
	}
}
