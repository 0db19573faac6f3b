package reconcile

import (
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/plumb-dev/plumb/informers/compact"
	"github.com/plumb-dev/plumb/internal/diff"
	"github.com/plumb-dev/plumb/internal/health"
	"github.com/plumb-dev/plumb/internal/source"
)

// objectsRecord is what memory keeps about an App's objects: one entry per
// object (an App of thousands of objects keeps one map, not one per kind
// of fact), and the events held while the tick writes.
type objectsRecord struct {
	byID map[objectID]*objectMemory
	// writing is non-nil while the tick writes objects: events for the App
	// meanwhile are held here, since the result of the write (its
	// resourceVersion) is not known yet.
	writing []heldEvent
}

// object returns the memory of one object, creating it.
func (r *objectsRecord) object(id objectID) *objectMemory {
	o := r.byID[id]
	if o == nil {
		o = &objectMemory{}
		r.byID[id] = o
	}
	return o
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

// describedDrift is a drift described from the object fetched whole (live),
// under the verification of the cached object it was seen on.
type describedDrift struct {
	under  verification
	result diff.Result
	live   *compact.Object
	until  time.Time // zero: no end but the verification's
}

func (m *memory) record(key types.NamespacedName, id objectID) *diff.Record {
	return peekObject(m, key, id, func(o *objectMemory) *diff.Record {
		if !o.hasRecord {
			return nil
		}
		rec := o.record
		return &rec
	})
}

func (m *memory) remember(key types.NamespacedName, id objectID, rec diff.Record) {
	m.updateObject(key, id, func(o *objectMemory) {
		if o.stamp.hash == rec.DesiredHash {
			rec.DesiredHash = o.stamp.hash // one copy of the string, not two
		}
		o.record, o.hasRecord = rec, true
		o.verified = verification{} // found Unchanged against another record
		o.described = nil
	})
}

// verify records that the object was found Unchanged under v.
func (m *memory) verify(key types.NamespacedName, id objectID, v verification) {
	m.updateObject(key, id, func(o *objectMemory) {
		o.verified, o.described = v, nil
	})
}

// isVerified reports whether the object was found Unchanged under v.
func (m *memory) isVerified(key types.NamespacedName, id objectID, v verification) bool {
	return peekObject(m, key, id, func(o *objectMemory) bool {
		if !o.verified.holds(v) {
			return false
		}
		o.verified.live = v.live // the cache's newer copy: the older one need not stay in memory
		return true
	})
}

// describeDrift keeps the description of a drift seen on the cached object
// under v (v.live nil keeps nothing).
func (m *memory) describeDrift(key types.NamespacedName, id objectID, v verification, result diff.Result, live *compact.Object, until time.Time) {
	if v.live == nil {
		return
	}
	m.updateObject(key, id, func(o *objectMemory) {
		o.described = &describedDrift{under: v, result: result, live: live, until: until}
	})
}

// describedDrift returns the description of a drift kept under v.
func (m *memory) describedDrift(key types.NamespacedName, id objectID, v verification, now time.Time) (describedDrift, bool) {
	d := peekObject(m, key, id, func(o *objectMemory) *describedDrift {
		if o.described == nil || !o.described.under.holds(v) || (!o.described.until.IsZero() && now.After(o.described.until)) {
			return nil
		}
		d := *o.described
		return &d
	})
	if d == nil {
		return describedDrift{}, false
	}
	return *d, true
}

// wrote records the resourceVersion that plumb's write of an object produced.
func (m *memory) wrote(key types.NamespacedName, id objectID, rv string) {
	m.updateObject(key, id, func(o *objectMemory) { o.written = rv })
}

// writtenRV is the resourceVersion of plumb's last write of an object ("" none).
func (m *memory) writtenRV(key types.NamespacedName, id objectID) string {
	return peekObject(m, key, id, func(o *objectMemory) string { return o.written })
}

// wroteHealth records the health of an object as plumb's write left it.
func (m *memory) wroteHealth(key types.NamespacedName, id objectID, h health.Result) {
	m.updateObject(key, id, func(o *objectMemory) { o.writtenHealth = h })
}

// written is the resourceVersion and health of plumb's last write of an
// object ("" when none is known).
func (m *memory) written(key types.NamespacedName, id objectID) (string, health.Result) {
	type written struct {
		rv     string
		health health.Result
	}
	w := peekObject(m, key, id, func(o *objectMemory) written { return written{o.written, o.writtenHealth} })
	return w.rv, w.health
}

// beginWrites starts holding the App's events (see objectsRecord.writing).
func (m *memory) beginWrites(key types.NamespacedName) {
	m.updateApp(key, func(a *appMemory) { a.objects.writing = []heldEvent{} })
}

// endWrites stops holding events and reports whether one of the held events
// was not plumb's own write after all (someone else wrote meanwhile).
func (m *memory) endWrites(key types.NamespacedName) (missed bool) {
	return inApp(m, key, func(a *appMemory) bool {
		missed := false
		for _, e := range a.objects.writing {
			if o := a.objects.byID[e.id]; o == nil || o.written != e.rv {
				missed = true
			}
		}
		a.objects.writing = nil
		return missed
	})
}

// ownWrite reports whether an informer event for an object of App key at
// rv is plumb's own write: the one it recorded, or one under way.
func (m *memory) ownWrite(key types.NamespacedName, id objectID, rv string) bool {
	return peekApp(m, key, func(a *appMemory) bool {
		switch {
		case a.objects.byID[id] != nil && a.objects.byID[id].written == rv:
			return true
		case a.objects.writing != nil:
			a.objects.writing = append(a.objects.writing, heldEvent{id: id, rv: rv})
			return true
		}
		return false
	})
}

// drifted records that an object drifted. It reports whether a new episode
// starts (the object was converged before).
func (m *memory) drifted(key types.NamespacedName, id objectID) (newEpisode bool) {
	return inObject(m, key, id, func(o *objectMemory) bool {
		newEpisode := !o.drifting
		o.drifting = true
		return newEpisode
	})
}

// converged ends an object's drift episode (its history still counts
// towards a conflict for conflictWindow).
func (m *memory) converged(key types.NamespacedName, id objectID) {
	m.updateKnownObject(key, id, func(o *objectMemory) { o.drifting = false })
}

// stampOf returns the stamp of an object as the last tick prepared it.
func (m *memory) stampOf(key types.NamespacedName, id objectID) stamp {
	return peekObject(m, key, id, func(o *objectMemory) stamp { return o.stamp })
}

// setStamp records the stamp of an object as this tick prepared it.
func (m *memory) setStamp(key types.NamespacedName, id objectID, s stamp) {
	m.updateObject(key, id, func(o *objectMemory) { o.stamp = s })
}
