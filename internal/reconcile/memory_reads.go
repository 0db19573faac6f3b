package reconcile

import (
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/plumb-dev/plumb/internal/source"
)

// readsRecord is what memory keeps of an App's reads: the last successful
// one, reused by ticks that only events brought forward, and the App's
// generation at the last read, successful or not (known says there was
// one).
type readsRecord struct {
	last       *lastRead
	generation int64
	known      bool
	// syncSeen is when this replica's App informer saw the sync request
	// syncRequest, by this replica's clock.
	syncRequest string
	syncSeen    time.Time
}

// lastRead is a successful read at the App's generation.
type lastRead struct {
	generation int64
	result     *source.Result
}

// rememberRead keeps a successful read of the App at its generation.
func (m *memory) rememberRead(key types.NamespacedName, generation int64, result *source.Result) {
	m.updateApp(key, func(a *appMemory) {
		a.reads.last = &lastRead{generation: generation, result: result}
	})
}

// triedRead records the generation of a read, successful or not.
func (m *memory) triedRead(key types.NamespacedName, generation int64) {
	m.updateApp(key, func(a *appMemory) {
		a.reads.generation, a.reads.known = generation, true
	})
}

// readGeneration is the App's generation at its last read, if any.
func (m *memory) readGeneration(key types.NamespacedName) (int64, bool) {
	r := inApp(m, key, func(a *appMemory) readsRecord { return a.reads })
	return r.generation, r.known
}

// forgetRead drops the last read (the read failed: the next tick reads again).
func (m *memory) forgetRead(key types.NamespacedName) {
	m.updateApp(key, func(a *appMemory) { a.reads.last = nil })
}

// readAt returns the last successful read of the App at generation, if any.
func (m *memory) readAt(key types.NamespacedName, generation int64) *source.Result {
	return inApp(m, key, func(a *appMemory) *source.Result {
		if last := a.reads.last; last != nil && last.generation == generation {
			return last.result
		}
		return nil
	})
}

// sawSyncRequest records when the App's sync request was seen (the
// informer tells each change of it, "" when it was removed: a request that
// comes back later is seen anew).
func (m *memory) sawSyncRequest(key types.NamespacedName, request string, at time.Time) {
	m.updateApp(key, func(a *appMemory) {
		a.reads.syncRequest, a.reads.syncSeen = request, at
	})
}

// syncRequestSeen is when the sync request was first seen, if it was.
func (m *memory) syncRequestSeen(key types.NamespacedName, request string) (time.Time, bool) {
	r := peekApp(m, key, func(a *appMemory) readsRecord { return a.reads })
	return r.syncSeen, request != "" && r.syncRequest == request && !r.syncSeen.IsZero()
}
