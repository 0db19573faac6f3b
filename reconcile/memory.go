package reconcile

import (
	"sort"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/compact"
	"github.com/plumb-dev/plumb/diff"
	"github.com/plumb-dev/plumb/health"
	"github.com/plumb-dev/plumb/source"
)

// memory is what the controller remembers between ticks, per App: for each
// object the diff Record of what plumb last applied, the resourceVersion
// its last write produced and the inputs of its last Unchanged verdict,
// drift episodes, the last successful read, and
// the App's resourceVersion after plumb's last write to it. It is lost on
// restart; the tick then rebuilds the record of each object that is as
// plumb left it (see Reconciler.compare), asks the API server once about
// each other object (diff.Ambiguous) and reads Git afresh. Ticks of one App never run at
// once, but ticks of different Apps and the informers' event handlers do,
// hence the lock.
type memory struct {
	mu   sync.Mutex
	apps map[types.NamespacedName]*appMemory // guarded by mu
}

// appMemory is what memory keeps about one App.
type appMemory struct {
	// objects holds what is known of each object, one entry each (an App
	// of thousands of objects keeps one map, not one per kind of fact).
	objects map[objectID]*objectMemory
	// fieldDrifts are the changes, within conflictWindow, that another
	// manager made to a field plumb applied, by object and "path\x00manager".
	fieldDrifts map[objectID]map[string][]fieldChange
	// conflicts are the fields left to a manager that kept changing them.
	conflicts map[objectID]*objectConflicts
	// writing is non-nil while the tick writes objects: events for the App
	// meanwhile are held here, since the result of the write (its
	// resourceVersion) is not known yet.
	writing []heldEvent
	// lastRead is the last successful Read phase.
	lastRead *lastRead
	// readGeneration is the App's generation at the last read, whether it
	// succeeded or not; readKnown says there was one.
	readGeneration int64
	readKnown      bool
	// appRV is the App's resourceVersion after plumb's last write to it.
	appRV string
	// unwritten counts the ticks in a row whose status changed in nothing
	// but times, and was not written.
	unwritten int
	// ticks are the App's recent ticks (status.recentTicks), kept here
	// because a tick that changed nothing but times may go unwritten.
	ticks []plumbv1.TickRecord
	// driftNotified says a DriftDetected was sent and its DriftResolved not
	// yet (an episode of the App, for its Notifications).
	driftNotified bool
	// revisionSent is the last revision event sent for the App.
	revisionSent sentRevision
	// lastSuccess is when the App's last successful tick ended.
	lastSuccess time.Time
	// pending says why the App was enqueued since its last tick began (see
	// enqueueMarks); healthDue are the health deadlines a tick was asked
	// for at.
	pending   enqueueMarks
	healthDue []time.Time
	// applied is what the App's last full tick in this term applied, when
	// it succeeded: a health assessment alone may then settle Ready.
	applied *appliedOutcome
}

// sentRevision is a revision event as sent: the revision, the event and
// what failed.
type sentRevision struct {
	revision string
	kind     plumbv1.NotificationEvent
	detail   string
}

// objectMemory is what memory keeps about one object of an App.
type objectMemory struct {
	// record is the diff Record of what plumb last applied or confirmed
	// (hasRecord says there is one).
	record    diff.Record
	hasRecord bool
	// verified are the inputs of the Diff phase's last Unchanged verdict
	// (live nil for none; see verification).
	verified verification
	// described is the drift last described from the object fetched whole,
	// kept while the cached object stays as it was then.
	described *describedDrift
	// written is the resourceVersion of plumb's last write of the object.
	written string
	// drifting: drifted and not seen converged since (a drift episode).
	drifting bool
	// stamp is the content hash of the object as the last tick prepared it.
	stamp stamp
	// writtenHealth is the object's health as plumb's last write of it
	// (written) left it, until the cache shows that version or a newer one.
	writtenHealth health.Result
}

// stamp is the content hash of a desired object prepared from a rendered
// one, with what else the preparation depended on: the rendered object
// itself (the render cache's, shared while the render is the same), the
// App's generation (target namespace, ignore rules) and the namespace it
// was given (the kind's scope; part of the object's ID).
type stamp struct {
	from       *source.Object
	generation int64
	hash       string
}

// heldEvent is an informer event that arrived while the tick was writing.
type heldEvent struct {
	id objectID
	rv string
}

// lastRead is a successful read, reused by ticks that only events brought
// forward.
type lastRead struct {
	generation int64
	result     *source.Result
}

// objectConflicts are the fields of one object left to other managers.
type objectConflicts struct {
	hash   string                   // the object's content in Git when they were left
	fields map[string]fieldConflict // by path
}

// fieldConflict is one field left to the manager that keeps changing it.
type fieldConflict struct {
	path    fieldpath.Path
	manager string
	// fields is path as managedFields writes fields (fieldsOf), encoded
	// once, when the field is left; "" when it cannot be encoded.
	fields string
}

// conflictWindow is how far back drifts of a field count towards a conflict.
const conflictWindow = 10 * time.Minute

// app returns the memory of an App, creating it. m.mu is held.
func (m *memory) app(key types.NamespacedName) *appMemory {
	if m.apps == nil {
		m.apps = map[types.NamespacedName]*appMemory{}
	}
	a := m.apps[key]
	if a == nil {
		a = &appMemory{objects: map[objectID]*objectMemory{},
			fieldDrifts: map[objectID]map[string][]fieldChange{}, conflicts: map[objectID]*objectConflicts{}}
		m.apps[key] = a
	}
	return a
}

// object returns the memory of one object of an App, creating it. m.mu is
// held.
func (m *memory) object(key types.NamespacedName, id objectID) *objectMemory {
	a := m.app(key)
	o := a.objects[id]
	if o == nil {
		o = &objectMemory{}
		a.objects[id] = o
	}
	return o
}

// peek returns the memory of one object, nil when there is none. m.mu is
// held.
func (m *memory) peek(key types.NamespacedName, id objectID) *objectMemory {
	if a := m.apps[key]; a != nil {
		return a.objects[id]
	}
	return nil
}

func (m *memory) record(key types.NamespacedName, id objectID) *diff.Record {
	m.mu.Lock()
	defer m.mu.Unlock()
	o := m.peek(key, id)
	if o == nil || !o.hasRecord {
		return nil
	}
	rec := o.record
	return &rec
}

func (m *memory) remember(key types.NamespacedName, id objectID, rec diff.Record) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o := m.object(key, id)
	if o.stamp.hash == rec.DesiredHash {
		rec.DesiredHash = o.stamp.hash // one copy of the string, not two
	}
	o.record, o.hasRecord = rec, true
	o.verified = verification{} // found Unchanged against another record
	o.described = nil
}

// verification is what a verdict of the Diff phase depended on: the
// cached live object, the hash of the desired object and the App's
// generation (its ignore rules). While the hash and generation stay the
// same and the cached object changes in nothing a tick looks at (a new
// status and resourceVersion are not: compact.Relevant), the verdict does
// too, and the tick need not compare the object again.
type verification struct {
	live       *compact.Object
	hash       string
	generation int64
}

// holds reports whether a verdict under v still holds under now.
func (v verification) holds(now verification) bool {
	return v.live != nil && now.live != nil && v.hash == now.hash && v.generation == now.generation &&
		(v.live == now.live || !compact.Relevant(v.live, now.live))
}

// verify records that the object was found Unchanged under v.
func (m *memory) verify(key types.NamespacedName, id objectID, v verification) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o := m.object(key, id)
	o.verified = v
	o.described = nil
}

// describedDrift is a drift described from the object fetched whole (live),
// under the verification of the cached object it was seen on.
type describedDrift struct {
	under  verification
	result diff.Result
	live   *compact.Object
	until  time.Time // zero: no end but the verification's
}

// describeDrift keeps the description of a drift seen on the cached object
// under v (v.live nil keeps nothing).
func (m *memory) describeDrift(key types.NamespacedName, id objectID, v verification, result diff.Result, live *compact.Object, until time.Time) {
	if v.live == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.object(key, id).described = &describedDrift{under: v, result: result, live: live, until: until}
}

// describedDrift returns the description of a drift kept under v.
func (m *memory) describedDrift(key types.NamespacedName, id objectID, v verification, now time.Time) (describedDrift, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o := m.peek(key, id)
	if o == nil || o.described == nil || !o.described.under.holds(v) || (!o.described.until.IsZero() && now.After(o.described.until)) {
		return describedDrift{}, false
	}
	return *o.described, true
}

// isVerified reports whether the object was found Unchanged under v.
func (m *memory) isVerified(key types.NamespacedName, id objectID, v verification) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	o := m.peek(key, id)
	if o == nil || !o.verified.holds(v) {
		return false
	}
	o.verified.live = v.live // the cache's newer copy: the older one need not stay in memory
	return true
}

// wrote records the resourceVersion that plumb's write of an object produced.
func (m *memory) wrote(key types.NamespacedName, id objectID, rv string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.object(key, id).written = rv
}

// writtenRV is the resourceVersion of plumb's last write of an object ("" none).
func (m *memory) writtenRV(key types.NamespacedName, id objectID) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if o := m.peek(key, id); o != nil {
		return o.written
	}
	return ""
}

// beginWrites starts holding the App's events (see appMemory.writing).
func (m *memory) beginWrites(key types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.app(key).writing = []heldEvent{}
}

// endWrites stops holding events and reports whether one of the held events
// was not plumb's own write after all (someone else wrote meanwhile).
func (m *memory) endWrites(key types.NamespacedName) (missed bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a := m.app(key)
	for _, e := range a.writing {
		if o := a.objects[e.id]; o == nil || o.written != e.rv {
			missed = true
		}
	}
	a.writing = nil
	return missed
}

// ownWrite reports whether an informer event for an object of App key at
// rv is plumb's own write: the one it recorded, or one under way.
func (m *memory) ownWrite(key types.NamespacedName, id objectID, rv string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	a := m.apps[key]
	switch {
	case a == nil:
		return false
	case a.objects[id] != nil && a.objects[id].written == rv:
		return true
	case a.writing != nil:
		a.writing = append(a.writing, heldEvent{id: id, rv: rv})
		return true
	}
	return false
}

// keepOnly forgets the objects of the App that are not in ids.
func (m *memory) keepOnly(key types.NamespacedName, ids map[objectID]bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a := m.app(key)
	for id := range a.objects {
		if !ids[id] {
			delete(a.objects, id)
		}
	}
	for id := range a.fieldDrifts {
		if !ids[id] {
			delete(a.fieldDrifts, id)
		}
	}
	for id := range a.conflicts {
		if !ids[id] {
			delete(a.conflicts, id)
		}
	}
}

// forgetApp drops everything about a deleted App.
func (m *memory) forgetApp(key types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.apps, key)
}

// drifted records that an object drifted. It reports whether a new episode
// starts (the object was converged before).
func (m *memory) drifted(key types.NamespacedName, id objectID) (newEpisode bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o := m.object(key, id)
	newEpisode = !o.drifting
	o.drifting = true
	return newEpisode
}

// fieldChange is one change of a field by another manager: when plumb saw
// it, and the resourceVersion of plumb's own last write of the object then.
type fieldChange struct {
	at       time.Time
	healedAt string
}

// maxFieldKeys bounds the fields and managers remembered per object: a
// writer that takes a new manager name for every change cannot grow it.
const maxFieldKeys = 64

// fieldDrifted records that manager changed the field path of an object,
// and returns how many distinct changes it made within conflictWindow. A
// change counts only when plumb wrote the object since the last one counted
// (healedAt, the resourceVersion of plumb's last write, differs): the same
// change seen again while a heal keeps failing, whatever else changes on
// the object meanwhile (its status), is not a new one.
func (m *memory) fieldDrifted(key types.NamespacedName, id objectID, path, manager, healedAt string, now time.Time) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	a := m.app(key)
	fields := a.fieldDrifts[id]
	if fields == nil {
		fields = map[string][]fieldChange{}
		a.fieldDrifts[id] = fields
	}
	// Forget what is older than the window, for every field of the object.
	oldestKey, oldest := "", now
	for k, changes := range fields {
		kept := changes[:0]
		for _, c := range changes {
			if now.Sub(c.at) < conflictWindow {
				kept = append(kept, c)
			}
		}
		if len(kept) == 0 {
			delete(fields, k)
			continue
		}
		fields[k] = kept
		if last := kept[len(kept)-1].at; oldestKey == "" || last.Before(oldest) {
			oldestKey, oldest = k, last
		}
	}
	k := path + "\x00" + manager
	changes := fields[k]
	if n := len(changes); n > 0 && changes[n-1].healedAt == healedAt {
		return n
	}
	if _, known := fields[k]; !known && len(fields) >= maxFieldKeys && oldestKey != "" {
		delete(fields, oldestKey)
	}
	fields[k] = append(changes, fieldChange{at: now, healedAt: healedAt})
	return len(fields[k])
}

// leave leaves a field of an object, whose content in Git is hash, to
// manager. It reports whether the field was not left before.
func (m *memory) leave(key types.NamespacedName, id objectID, hash string, path fieldpath.Path, manager string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	a := m.app(key)
	c := a.conflicts[id]
	if c == nil || c.hash != hash {
		c = &objectConflicts{hash: hash, fields: map[string]fieldConflict{}}
		a.conflicts[id] = c
	}
	if _, ok := c.fields[path.String()]; ok {
		return false
	}
	encoded, _ := fieldsOf(path)
	c.fields[path.String()] = fieldConflict{path: path.Copy(), manager: manager, fields: encoded}
	return true
}

// leftFields returns the fields of an object left to other managers, for
// the object's content in Git (hash) and its live state. A conflict ends
// when Git changes the object, or when its manager no longer owns the field.
func (m *memory) leftFields(key types.NamespacedName, id objectID, hash string, live *compact.Object) (*fieldpath.Set, []fieldConflict) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a := m.app(key)
	c := a.conflicts[id]
	if c == nil {
		return nil, nil
	}
	if c.hash != hash || live == nil {
		delete(a.conflicts, id)
		return nil, nil
	}
	set := &fieldpath.Set{}
	var out []fieldConflict
	for k, f := range c.fields {
		if diff.OwnerOf(live, f.path) != f.manager {
			delete(c.fields, k)
			continue
		}
		set.Insert(f.path)
		out = append(out, f)
	}
	if len(c.fields) == 0 {
		delete(a.conflicts, id)
		return nil, nil
	}
	sort.Slice(out, func(i, j int) bool { return out[i].path.String() < out[j].path.String() })
	return set, out
}

// converged ends an object's drift episode (its history still counts
// towards a conflict for conflictWindow).
func (m *memory) converged(key types.NamespacedName, id objectID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if o := m.peek(key, id); o != nil {
		o.drifting = false
	}
}

// rememberRead keeps a successful read of the App at its generation.
func (m *memory) rememberRead(key types.NamespacedName, generation int64, result *source.Result) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.app(key).lastRead = &lastRead{generation: generation, result: result}
}

// triedRead records the generation of a read, successful or not.
func (m *memory) triedRead(key types.NamespacedName, generation int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a := m.app(key)
	a.readGeneration, a.readKnown = generation, true
}

// readGeneration is the App's generation at its last read, if any.
func (m *memory) readGeneration(key types.NamespacedName) (int64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a := m.app(key)
	return a.readGeneration, a.readKnown
}

// forgetRead drops the last read (the read failed: the next tick reads again).
func (m *memory) forgetRead(key types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.app(key).lastRead = nil
}

// readAt returns the last successful read of the App at generation, if any.
func (m *memory) readAt(key types.NamespacedName, generation int64) *source.Result {
	m.mu.Lock()
	defer m.mu.Unlock()
	if last := m.app(key).lastRead; last != nil && last.generation == generation {
		return last.result
	}
	return nil
}

// setAppRV records the App's resourceVersion after plumb wrote it.
func (m *memory) setAppRV(key types.NamespacedName, rv string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.app(key).appRV = rv
}

// appRV is the App's resourceVersion after plumb's last write ("" none).
func (m *memory) appRV(key types.NamespacedName) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.app(key).appRV
}

// stampOf returns the stamp of an object as the last tick prepared it.
func (m *memory) stampOf(key types.NamespacedName, id objectID) stamp {
	m.mu.Lock()
	defer m.mu.Unlock()
	if o := m.peek(key, id); o != nil {
		return o.stamp
	}
	return stamp{}
}

// setStamp records the stamp of an object as this tick prepared it.
func (m *memory) setStamp(key types.NamespacedName, id objectID, s stamp) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.object(key, id).stamp = s
}

// heartbeatEvery is how many ticks in a row may leave a status that changed
// in nothing but times unwritten: the times (last tick, last success) are a
// heartbeat, refreshed at most every tenth unchanged tick so that an idle
// App costs no write per tick, yet its status shows a loop that is alive.
const heartbeatEvery = 10

// skipWrite reports whether a status that changed only in its times may go
// unwritten this tick, and counts it.
func (m *memory) skipWrite(key types.NamespacedName) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	a := m.app(key)
	if a.unwritten+1 >= heartbeatEvery {
		return false
	}
	a.unwritten++
	return true
}

// statusWritten resets the heartbeat count.
func (m *memory) statusWritten(key types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.app(key).unwritten = 0
}

// newTerm forgets drift episodes and conflicts, which another replica may
// have ended or changed while this one did not lead, and the Unchanged
// verdicts that may have depended on them. Records and plumb's own writes
// are kept: they are checked against the live objects anyway.
func (m *memory) newTerm() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, a := range m.apps {
		for _, o := range a.objects {
			o.verified = verification{} // it may have depended on conflicts forgotten here
			o.described = nil
			o.drifting = false
		}
		a.fieldDrifts = map[objectID]map[string][]fieldChange{}
		a.conflicts = map[objectID]*objectConflicts{}
		a.driftNotified, a.revisionSent = false, sentRevision{}
		a.applied, a.pending, a.healthDue = nil, enqueueMarks{}, nil
		a.ticks = nil // another replica ticked meanwhile: status holds its ticks
	}
}

// driftNotified reports whether the App's drift episode was announced (a
// DriftDetected sent, its DriftResolved not yet).
func (m *memory) driftNotifiedOf(key types.NamespacedName) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.app(key).driftNotified
}

// setDriftNotified records whether the App's drift episode is announced.
func (m *memory) setDriftNotified(key types.NamespacedName, open bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.app(key).driftNotified = open
}

// succeeded records when a tick of the App succeeded.
func (m *memory) succeeded(key types.NamespacedName, at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.app(key).lastSuccess = at
}

// lastSuccessOf is when a tick of the App last succeeded here.
func (m *memory) lastSuccessOf(key types.NamespacedName) (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a, ok := m.apps[key]
	if !ok || a.lastSuccess.IsZero() {
		return time.Time{}, false
	}
	return a.lastSuccess, true
}

// sendRevision records a revision event and reports whether it differs
// from the last one sent (and so is to be sent).
func (m *memory) sendRevision(key types.NamespacedName, sent sentRevision) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	a := m.app(key)
	if a.revisionSent == sent {
		return false
	}
	a.revisionSent = sent
	return true
}

// lastSent is the last revision event sent for the App.
func (m *memory) lastSent(key types.NamespacedName) sentRevision {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.app(key).revisionSent
}

// revisionSentFor reports whether any revision event was sent for revision.
func (m *memory) revisionSentFor(key types.NamespacedName, revision string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.app(key).revisionSent.revision == revision
}
