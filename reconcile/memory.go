package reconcile

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/plumb-dev/plumb/diff"
)

// memory is what the controller remembers between ticks, per App and
// object: the diff Record of what it last applied, and how many times in a
// row it healed the same drift. It is lost on restart; the tick then asks
// the API server once per object (diff.Ambiguous). Ticks of one App never
// run at once, but ticks of different Apps do, hence the lock.
type memory struct {
	mu       sync.Mutex
	records  map[types.NamespacedName]map[objectID]diff.Record
	episodes map[types.NamespacedName]map[objectID]*episode
	refresh  map[types.NamespacedName]bool // a webhook asked for a fresh read
}

// episode is the drift history of one object.
type episode struct {
	active bool        // drifted and not yet seen converged
	drifts []time.Time // drifts seen within conflictWindow
}

// conflictWindow is how far back drifts count towards a conflict.
const conflictWindow = 10 * time.Minute

func (m *memory) init() {
	if m.records == nil {
		m.records = map[types.NamespacedName]map[objectID]diff.Record{}
		m.episodes = map[types.NamespacedName]map[objectID]*episode{}
		m.refresh = map[types.NamespacedName]bool{}
	}
}

func (m *memory) record(app types.NamespacedName, id objectID) *diff.Record {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.init()
	rec, ok := m.records[app][id]
	if !ok {
		return nil
	}
	return &rec
}

func (m *memory) remember(app types.NamespacedName, id objectID, rec diff.Record) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.init()
	if m.records[app] == nil {
		m.records[app] = map[objectID]diff.Record{}
	}
	m.records[app][id] = rec
}

// keepOnly forgets the objects of app that are not in ids.
func (m *memory) keepOnly(app types.NamespacedName, ids map[objectID]bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.init()
	for id := range m.records[app] {
		if !ids[id] {
			delete(m.records[app], id)
		}
	}
	for id := range m.episodes[app] {
		if !ids[id] {
			delete(m.episodes[app], id)
		}
	}
}

// forgetApp drops everything about a deleted App.
func (m *memory) forgetApp(app types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.init()
	delete(m.records, app)
	delete(m.episodes, app)
}

// drifted records a drift of an object seen at now. It reports whether a
// new episode starts (the object was converged before) and how many drifts
// the object had within conflictWindow, this one included.
func (m *memory) drifted(app types.NamespacedName, id objectID, now time.Time) (newEpisode bool, recent int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.init()
	if m.episodes[app] == nil {
		m.episodes[app] = map[objectID]*episode{}
	}
	e := m.episodes[app][id]
	if e == nil {
		e = &episode{}
		m.episodes[app][id] = e
	}
	newEpisode = !e.active
	e.active = true
	kept := e.drifts[:0]
	for _, t := range e.drifts {
		if now.Sub(t) < conflictWindow {
			kept = append(kept, t)
		}
	}
	e.drifts = append(kept, now)
	return newEpisode, len(e.drifts)
}

// converged ends an object's drift episode (its history still counts
// towards a conflict for conflictWindow).
func (m *memory) converged(app types.NamespacedName, id objectID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.init()
	if e := m.episodes[app][id]; e != nil {
		e.active = false
	}
}

// askRefresh marks an App's next read as fresh.
func (m *memory) askRefresh(app types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.init()
	m.refresh[app] = true
}

// takeRefresh reports and clears the mark.
func (m *memory) takeRefresh(app types.NamespacedName) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.init()
	asked := m.refresh[app]
	delete(m.refresh, app)
	return asked
}
