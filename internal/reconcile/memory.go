package reconcile

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// memory is what the controller remembers between ticks, per App, in one
// typed record per concern (memory_*.go): its objects (the diff Record of
// what plumb last applied, the resourceVersion its last write produced,
// the inputs of the last Unchanged verdict, drift episodes), the fields
// left to other managers, its reads, its status writes, what its
// Notifications were told, and why it was enqueued. It is lost on restart;
// the tick then rebuilds the record of each object that is as plumb left
// it (see Reconciler.compare), asks the API server once about each other
// object (diff.Ambiguous) and reads Git afresh. Ticks of one App never run
// at once, but ticks of different Apps and the informers' event handlers
// do, hence the lock, taken only through inApp, inObject and peekApp.
type memory struct {
	mu   sync.Mutex
	apps map[types.NamespacedName]*appMemory // guarded by mu
}

// appMemory is what memory keeps about one App.
type appMemory struct {
	objects   objectsRecord
	conflicts conflictsRecord
	reads     readsRecord
	status    statusRecord
	notified  notifiedRecord
	schedule  scheduleRecord
}

// inApp runs f on the App's memory, made when there is none, under the
// lock, and returns what f returns.
func inApp[T any](m *memory, key types.NamespacedName, f func(a *appMemory) T) T {
	m.mu.Lock()
	defer m.mu.Unlock()
	return f(m.app(key))
}

// inObject runs f on the memory of one object of the App, made when there
// is none, under the lock.
func inObject[T any](m *memory, key types.NamespacedName, id objectID, f func(o *objectMemory) T) T {
	m.mu.Lock()
	defer m.mu.Unlock()
	return f(m.app(key).objects.object(id))
}

// peekApp runs f on the App's memory under the lock, when there is one;
// otherwise it returns T's zero value and makes none.
func peekApp[T any](m *memory, key types.NamespacedName, f func(a *appMemory) T) T {
	m.mu.Lock()
	defer m.mu.Unlock()
	if a := m.apps[key]; a != nil {
		return f(a)
	}
	var zero T
	return zero
}

// peekObject runs f on the memory of one object under the lock, when
// there is one; otherwise it returns T's zero value and makes none.
func peekObject[T any](m *memory, key types.NamespacedName, id objectID, f func(o *objectMemory) T) T {
	return peekApp(m, key, func(a *appMemory) T {
		if o := a.objects.byID[id]; o != nil {
			return f(o)
		}
		var zero T
		return zero
	})
}

// updateApp, updateObject and updateKnownObject are inApp, inObject and
// peekObject for changes that return nothing.
func (m *memory) updateApp(key types.NamespacedName, f func(a *appMemory)) {
	inApp(m, key, func(a *appMemory) struct{} { f(a); return struct{}{} })
}

func (m *memory) updateObject(key types.NamespacedName, id objectID, f func(o *objectMemory)) {
	inObject(m, key, id, func(o *objectMemory) struct{} { f(o); return struct{}{} })
}

func (m *memory) updateKnownObject(key types.NamespacedName, id objectID, f func(o *objectMemory)) {
	peekObject(m, key, id, func(o *objectMemory) struct{} { f(o); return struct{}{} })
}

// app returns the memory of an App, creating it. m.mu is held.
func (m *memory) app(key types.NamespacedName) *appMemory {
	if m.apps == nil {
		m.apps = map[types.NamespacedName]*appMemory{}
	}
	a := m.apps[key]
	if a == nil {
		a = &appMemory{objects: objectsRecord{byID: map[objectID]*objectMemory{}},
			conflicts: conflictsRecord{fieldDrifts: map[objectID]map[string][]fieldChange{}, left: map[objectID]*objectConflicts{}}}
		m.apps[key] = a
	}
	return a
}

// keepOnly forgets the objects of the App that are not in ids.
func (m *memory) keepOnly(key types.NamespacedName, ids map[objectID]bool) {
	m.updateApp(key, func(a *appMemory) {
		for id := range a.objects.byID {
			if !ids[id] {
				delete(a.objects.byID, id)
			}
		}
		a.conflicts.keepOnly(ids)
	})
}

// forgetApp drops everything about a deleted App.
func (m *memory) forgetApp(key types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.apps, key)
}

// newTerm forgets drift episodes and conflicts, which another replica may
// have ended or changed while this one did not lead, and the Unchanged
// verdicts that may have depended on them; what the App's Notifications
// were told, why it was enqueued and the ticks remembered (another
// replica ticked meanwhile: status holds its ticks). Records and plumb's
// own writes are kept: they are checked against the live objects anyway.
func (m *memory) newTerm() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, a := range m.apps {
		for _, o := range a.objects.byID {
			o.verified = verification{} // it may have depended on conflicts forgotten here
			o.described = nil
			o.drifting = false
		}
		a.conflicts = conflictsRecord{fieldDrifts: map[objectID]map[string][]fieldChange{}, left: map[objectID]*objectConflicts{}}
		a.notified = notifiedRecord{}
		a.schedule = scheduleRecord{}
		a.status.ticks = nil
	}
}
