package reconcile

import (
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/plumb-dev/plumb/informers/compact"
	"github.com/plumb-dev/plumb/internal/diff"
)

// conflictsRecord is what memory keeps of an App's fights over fields:
// the changes, within conflictWindow, that other managers made to fields
// plumb applied (by object and "path\x00manager"), and the fields left to
// a manager that kept changing them.
type conflictsRecord struct {
	fieldDrifts map[objectID]map[string][]fieldChange
	left        map[objectID]*objectConflicts
}

// keepOnly forgets what is kept of objects not in ids.
func (r *conflictsRecord) keepOnly(ids map[objectID]bool) {
	for id := range r.fieldDrifts {
		if !ids[id] {
			delete(r.fieldDrifts, id)
		}
	}
	for id := range r.left {
		if !ids[id] {
			delete(r.left, id)
		}
	}
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
	return inApp(m, key, func(a *appMemory) int {
		fields := a.conflicts.fieldDrifts[id]
		if fields == nil {
			fields = map[string][]fieldChange{}
			a.conflicts.fieldDrifts[id] = fields
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
	})
}

// leave leaves a field of an object, whose content in Git is hash, to
// manager. It reports whether the field was not left before.
func (m *memory) leave(key types.NamespacedName, id objectID, hash string, path fieldpath.Path, manager string) bool {
	return inApp(m, key, func(a *appMemory) bool {
		c := a.conflicts.left[id]
		if c == nil || c.hash != hash {
			c = &objectConflicts{hash: hash, fields: map[string]fieldConflict{}}
			a.conflicts.left[id] = c
		}
		if _, ok := c.fields[path.String()]; ok {
			return false
		}
		encoded, _ := fieldsOf(path)
		c.fields[path.String()] = fieldConflict{path: path.Copy(), manager: manager, fields: encoded}
		return true
	})
}

// leftFields returns the fields of an object left to other managers, for
// the object's content in Git (hash) and its live state. A conflict ends
// when Git changes the object, or when its manager no longer owns the field.
func (m *memory) leftFields(key types.NamespacedName, id objectID, hash string, live *compact.Object) (*fieldpath.Set, []fieldConflict) {
	type left struct {
		set    *fieldpath.Set
		fields []fieldConflict
	}
	got := inApp(m, key, func(a *appMemory) left {
		c := a.conflicts.left[id]
		if c == nil {
			return left{}
		}
		if c.hash != hash || live == nil {
			delete(a.conflicts.left, id)
			return left{}
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
			delete(a.conflicts.left, id)
			return left{}
		}
		sort.Slice(out, func(i, j int) bool { return out[i].path.String() < out[j].path.String() })
		return left{set, out}
	})
	return got.set, got.fields
}
