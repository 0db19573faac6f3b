package reconcile

import (
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// scheduleRecord is what memory keeps of why an App was enqueued since its
// last tick began (pending), the health deadlines a tick was asked for at
// (healthDue), and what its last full tick in this term applied, when it
// succeeded (applied: a health assessment alone may then settle Ready).
type scheduleRecord struct {
	pending   enqueueMarks
	healthDue []time.Time
	applied   *appliedOutcome
}

// enqueueMarks say why an App was enqueued: full, for a change of one of
// its objects that a tick must diff; dependency, for a change of an App it
// depends on; health, for a change of an object's health alone. An event
// tick with only the health mark re-assesses health and reads neither Git
// nor the API server.
type enqueueMarks struct {
	full, dependency, health bool
}

// maxDeadlines bounds the health deadlines remembered per App (a deadline
// forgotten makes its tick a whole one: harmless).
const maxDeadlines = 8

// appliedOutcome is what a successful full tick applied: at which
// generation and revision, and the Ready message it would give were every
// object healthy.
type appliedOutcome struct {
	generation int64
	revision   string
	message    string
}

// mark records why the App was enqueued.
func (m *memory) mark(key types.NamespacedName, marks enqueueMarks) {
	m.updateApp(key, func(a *appMemory) {
		p := &a.schedule.pending
		p.full = p.full || marks.full
		p.dependency = p.dependency || marks.dependency
		p.health = p.health || marks.health
	})
}

// takeMarks returns and clears why the App was enqueued: a health deadline
// that has passed counts as a health mark (the tick asked for at it is a
// re-assessment, also when its wait ended sooner).
func (m *memory) takeMarks(key types.NamespacedName, now time.Time) enqueueMarks {
	return inApp(m, key, func(a *appMemory) enqueueMarks {
		s := &a.schedule
		marks := s.pending
		s.pending = enqueueMarks{}
		kept := s.healthDue[:0]
		for _, due := range s.healthDue {
			if now.Before(due) {
				kept = append(kept, due)
			} else {
				marks.health = true
			}
		}
		s.healthDue = kept
		return marks
	})
}

// addHealthDue records a health deadline at which a tick was asked for.
func (m *memory) addHealthDue(key types.NamespacedName, at time.Time) {
	m.updateApp(key, func(a *appMemory) {
		s := &a.schedule
		for _, due := range s.healthDue {
			if due.Equal(at) {
				return
			}
		}
		if len(s.healthDue) >= maxDeadlines {
			s.healthDue = s.healthDue[1:]
		}
		s.healthDue = append(s.healthDue, at)
	})
}

// setApplied records what the App's last full tick applied (nil: it failed).
func (m *memory) setApplied(key types.NamespacedName, outcome *appliedOutcome) {
	m.updateApp(key, func(a *appMemory) { a.schedule.applied = outcome })
}

// appliedOf is what the App's last full tick in this term applied, nil when
// it failed or there was none.
func (m *memory) appliedOf(key types.NamespacedName) *appliedOutcome {
	return peekApp(m, key, func(a *appMemory) *appliedOutcome { return a.schedule.applied })
}
