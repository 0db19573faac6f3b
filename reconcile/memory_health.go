package reconcile

import (
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/plumb-dev/plumb/health"
)

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
	m.mu.Lock()
	defer m.mu.Unlock()
	a := m.app(key)
	a.pending.full = a.pending.full || marks.full
	a.pending.dependency = a.pending.dependency || marks.dependency
	a.pending.health = a.pending.health || marks.health
}

// takeMarks returns and clears why the App was enqueued: a health deadline
// that has passed counts as a health mark (the tick asked for at it is a
// re-assessment, also when its wait ended sooner).
func (m *memory) takeMarks(key types.NamespacedName, now time.Time) enqueueMarks {
	m.mu.Lock()
	defer m.mu.Unlock()
	a := m.app(key)
	marks := a.pending
	a.pending = enqueueMarks{}
	kept := a.healthDue[:0]
	for _, due := range a.healthDue {
		if now.Before(due) {
			kept = append(kept, due)
		} else {
			marks.health = true
		}
	}
	a.healthDue = kept
	return marks
}

// addHealthDue records a health deadline at which a tick was asked for.
func (m *memory) addHealthDue(key types.NamespacedName, at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a := m.app(key)
	for _, due := range a.healthDue {
		if due.Equal(at) {
			return
		}
	}
	if len(a.healthDue) >= maxDeadlines {
		a.healthDue = a.healthDue[1:]
	}
	a.healthDue = append(a.healthDue, at)
}

// setApplied records what the App's last full tick applied (nil: it failed).
func (m *memory) setApplied(key types.NamespacedName, outcome *appliedOutcome) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.app(key).applied = outcome
}

// appliedOf is what the App's last full tick in this term applied, nil when
// it failed or there was none.
func (m *memory) appliedOf(key types.NamespacedName) *appliedOutcome {
	m.mu.Lock()
	defer m.mu.Unlock()
	if a := m.apps[key]; a != nil {
		return a.applied
	}
	return nil
}

// wroteHealth records the health of an object as plumb's write left it.
func (m *memory) wroteHealth(key types.NamespacedName, id objectID, h health.Result) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.object(key, id).writtenHealth = h
}

// written is the resourceVersion and health of plumb's last write of an
// object ("" when none is known).
func (m *memory) written(key types.NamespacedName, id objectID) (string, health.Result) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if o := m.peek(key, id); o != nil {
		return o.written, o.writtenHealth
	}
	return "", health.Result{}
}
