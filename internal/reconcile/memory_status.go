package reconcile

import (
	"time"

	"k8s.io/apimachinery/pkg/types"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
)

// statusRecord is what memory keeps of an App's status writes: the App's
// resourceVersion after plumb's last write to it, how many ticks in a row
// changed it in nothing but times and went unwritten, the recent ticks
// (status.recentTicks, kept here because a tick that changed nothing but
// times may go unwritten), and when its last successful tick ended.
type statusRecord struct {
	appRV       string
	unwritten   int
	ticks       []plumbv1.TickRecord
	lastSuccess time.Time
}

// heartbeatEvery is how many ticks in a row may leave a status that changed
// in nothing but times unwritten: the times (last tick, last success) are a
// heartbeat, refreshed at most every tenth unchanged tick so that an idle
// App costs no write per tick, yet its status shows a loop that is alive.
const heartbeatEvery = 10

// skipWrite reports whether a status that changed only in its times may go
// unwritten this tick, and counts it.
func (m *memory) skipWrite(key types.NamespacedName) bool {
	return inApp(m, key, func(a *appMemory) bool {
		if a.status.unwritten+1 >= heartbeatEvery {
			return false
		}
		a.status.unwritten++
		return true
	})
}

// statusWritten resets the heartbeat count.
func (m *memory) statusWritten(key types.NamespacedName) {
	m.updateApp(key, func(a *appMemory) { a.status.unwritten = 0 })
}

// setAppRV records the App's resourceVersion after plumb wrote it.
func (m *memory) setAppRV(key types.NamespacedName, rv string) {
	m.updateApp(key, func(a *appMemory) { a.status.appRV = rv })
}

// appRV is the App's resourceVersion after plumb's last write ("" none).
func (m *memory) appRV(key types.NamespacedName) string {
	return inApp(m, key, func(a *appMemory) string { return a.status.appRV })
}

// succeeded records when a tick of the App succeeded.
func (m *memory) succeeded(key types.NamespacedName, at time.Time) {
	m.updateApp(key, func(a *appMemory) { a.status.lastSuccess = at })
}

// lastSuccessOf is when a tick of the App last succeeded here.
func (m *memory) lastSuccessOf(key types.NamespacedName) (time.Time, bool) {
	at := peekApp(m, key, func(a *appMemory) time.Time { return a.status.lastSuccess })
	return at, !at.IsZero()
}

// addTick appends rec to the App's remembered ticks (seeded from status
// when this process remembers none), keeps the last MaxRecentTicks and
// returns a copy.
func (m *memory) addTick(key types.NamespacedName, fromStatus []plumbv1.TickRecord, rec plumbv1.TickRecord) []plumbv1.TickRecord {
	return inApp(m, key, func(a *appMemory) []plumbv1.TickRecord {
		if a.status.ticks == nil {
			a.status.ticks = append([]plumbv1.TickRecord{}, fromStatus...)
		}
		a.status.ticks = append(a.status.ticks, rec)
		if n := len(a.status.ticks); n > plumbv1.MaxRecentTicks {
			a.status.ticks = append([]plumbv1.TickRecord{}, a.status.ticks[n-plumbv1.MaxRecentTicks:]...)
		}
		return copyTicks(a.status.ticks)
	})
}

// ticksOf is a copy of the App's remembered ticks (nil when this process
// remembers none).
func (m *memory) ticksOf(key types.NamespacedName) []plumbv1.TickRecord {
	return inApp(m, key, func(a *appMemory) []plumbv1.TickRecord {
		if a.status.ticks == nil {
			return nil
		}
		return copyTicks(a.status.ticks)
	})
}

// copyTicks is a deep copy of ticks.
func copyTicks(ticks []plumbv1.TickRecord) []plumbv1.TickRecord {
	out := make([]plumbv1.TickRecord, len(ticks))
	for i := range ticks {
		ticks[i].DeepCopyInto(&out[i])
	}
	return out
}
