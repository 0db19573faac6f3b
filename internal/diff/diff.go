// Package diff is the Diff phase without API calls: it compares a desired
// object with its live state from the informer cache, using what the API
// server records in managedFields. Right after plumb applies an object (or a
// dry-run confirms it), the tick keeps a Record: a hash of the desired
// content and the set of fields the "plumb" manager owned. Later ticks then
// decide from the cache alone:
//
//   - desired content changed (hash differs): Update;
//   - a field plumb owned is no longer owned by plumb: someone else changed
//     it (the API server moves a field to whoever writes it): Drifted, with
//     the fields, their values before and after, and who changed them;
//   - otherwise: Unchanged, with no request at all.
//
// The cache keeps live objects compacted (package compact): managedFields
// and digests, no content. A drift found there is Incomplete until the
// caller compares again with the object fetched whole, whose values and
// list items the drift's description and its healing patch need.
//
// Without a Record (e.g. after a restart) the state is Ambiguous, and the
// tick asks the API server once. Values of Secrets are never shown.
package diff

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf8"
	"unique"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	"sigs.k8s.io/structured-merge-diff/v6/value"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/informers/compact"
)

// Kind classifies one object.
type Kind string

const (
	// Create: the object does not exist.
	Create Kind = "create"
	// Update: Git's content for the object changed since plumb applied it.
	Update Kind = "update"
	// Unchanged: the live object is what plumb applied and nobody changed it.
	Unchanged Kind = "unchanged"
	// Drifted: someone else changed a field plumb applied.
	Drifted Kind = "drifted"
	// Deleted: someone deleted an object plumb applied.
	Deleted Kind = "deleted"
	// Ambiguous: plumb has no record of this object; ask the API server.
	Ambiguous Kind = "ambiguous"
)

// Record is what plumb knows about an object right after applying it.
type Record struct {
	// DesiredHash is Hash of the desired object that was applied.
	DesiredHash string
	// fields are the fields the plumb manager owned afterwards, as the JSON
	// of a fieldpath.Set, interned: the objects of one shape (a thousand
	// ConfigMaps with the same keys) share one copy. Only a Compare of a
	// changed object decodes it (Fields).
	fields unique.Handle[string]
	// digest is a short digest of fields (see FieldsDigest).
	digest [8]byte
}

// FieldsDigest is a short digest of Fields, in hex, kept in the App's
// inventory so that a restarted controller can rebuild the Record from the
// live object (see RecordFromLive).
func (r *Record) FieldsDigest() string { return hex.EncodeToString(r.digest[:]) }

// Change is one field that someone else changed.
type Change struct {
	// Path is the field, e.g. .spec.template.spec.containers[name="web"].image.
	Path string
	// FieldPath is Path as managedFields writes it (for Left and StripPaths).
	FieldPath fieldpath.Path `json:"-"`
	// Before is what plumb applied, After what is live now ("" when absent);
	// for Secrets both are masked.
	Before, After string
	// Manager, Operation and Time say who changed it, from managedFields;
	// Subresource names the subresource it was written through ("scale"
	// for kubectl scale and autoscalers), if any.
	Manager     string
	Operation   string
	Subresource string
	Time        *metav1.Time
}

// Result classifies one object.
type Result struct {
	Kind Kind
	// Incomplete is set on a Drifted result found on a compacted live
	// object: compare again with the object whole (compact.Whole) to
	// confirm the drift and describe it. LostOnly says that all it found
	// are fields plumb no longer owns, which an apply puts back without
	// the object's content (fields others added inside plumb's list items
	// need a patch built from it).
	Incomplete, LostOnly bool
	// Reclaim is set on an Unchanged result whose object holds what Git
	// says, though another manager took fields plumb applied over (and set
	// them back to Git's values): no drift, but plumb no longer owns them,
	// so it could not remove them if Git dropped them. A healing tick
	// applies the object again to take them back.
	Reclaim bool
	Changes []Change
	// Additions are fields someone else added inside list items plumb
	// applied (e.g. an env var in a container from Git), as JSON patch
	// operations that remove them from the live object, each guarded by a
	// test of the item's key.
	Additions []PatchOp
}

// PatchOp is one JSON patch operation (RFC 6902).
type PatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// PlumbFields returns the fields the plumb manager owns on a live object
// (its Apply entry on the main resource, not status).
func PlumbFields(live *compact.Object) (*fieldpath.Set, error) {
	for _, entry := range live.ManagedFields() {
		if isPlumbs(entry) && entry.Fields.Value() != "" {
			set, err := fieldsOf(entry)
			if err != nil {
				return nil, fmt.Errorf("reading plumb's managed fields of %s: %w", live.GetName(), err)
			}
			return set, nil
		}
	}
	return &fieldpath.Set{}, nil
}

// isPlumbs reports plumb's own entry: its applies to the main resource.
func isPlumbs(e compact.ManagedEntry) bool {
	return e.Manager.Value() == plumbv1.FieldManager && e.Operation.Value() == string(metav1.ManagedFieldsOperationApply) && e.Subresource.Value() == ""
}

// fieldsOf decodes an entry's field set.
func fieldsOf(e compact.ManagedEntry) (*fieldpath.Set, error) {
	set := &fieldpath.Set{}
	if err := set.FromJSON(strings.NewReader(e.Fields.Value())); err != nil {
		return nil, err
	}
	return set, nil
}

// RecordOf makes the Record of an object plumb just applied (desired) and
// its live state as the API server returned it.
func RecordOf(desired, live *unstructured.Unstructured) (Record, error) {
	hash, err := Hash(desired)
	if err != nil {
		return Record{}, err
	}
	compacted, err := compact.Of(live)
	if err != nil {
		return Record{}, err
	}
	return RecordFromLive(hash, compacted)
}

// RecordFromLive makes a Record from the fields plumb owns on a live object
// now, for desired content whose Hash is desiredHash. It is the Record of
// plumb's last write only when its FieldsDigest equals the one recorded
// then: nobody has taken a field from plumb since.
func RecordFromLive(desiredHash string, live *compact.Object) (Record, error) {
	fields, err := PlumbFields(live)
	if err != nil {
		return Record{}, err
	}
	data, err := fields.ToJSON()
	if err != nil {
		return Record{}, fmt.Errorf("digesting plumb's managed fields of %s: %w", live.GetName(), err)
	}
	sum := sha256.Sum256(data)
	rec := Record{DesiredHash: desiredHash, fields: unique.Make(string(data))}
	copy(rec.digest[:], sum[:8])
	return rec, nil
}

// Fields are the fields the plumb manager owned after the write recorded.
func (r *Record) Fields() (*fieldpath.Set, error) {
	set := &fieldpath.Set{}
	if r.fields == (unique.Handle[string]{}) || r.fields.Value() == "" {
		return set, nil
	}
	if err := set.FromJSON(strings.NewReader(r.fields.Value())); err != nil {
		return nil, fmt.Errorf("reading the recorded fields: %w", err)
	}
	return set, nil
}

// Compare classifies desired against its cached live state (nil when the
// cache has none) and plumb's record (nil when it has none). Fields under
// an ignored pointer, and fields at or under a path in left (fields plumb
// leaves to a manager that keeps changing them), never count as drift.
func Compare(desired *unstructured.Unstructured, live *compact.Object, rec *Record, ignore Ignore, left *fieldpath.Set) (Result, error) {
	if live == nil || rec == nil {
		return CompareHashed(desired, "", live, rec, ignore, left) // no hash needed
	}
	hash, err := Hash(desired)
	if err != nil {
		return Result{}, err
	}
	return CompareHashed(desired, hash, live, rec, ignore, left)
}

// CompareHashed is Compare for a caller that has the Hash of desired at
// hand already.
func CompareHashed(desired *unstructured.Unstructured, hash string, live *compact.Object, rec *Record, ignore Ignore, left *fieldpath.Set) (Result, error) {
	if live == nil {
		if rec != nil {
			return Result{Kind: Deleted}, nil
		}
		return Result{Kind: Create}, nil
	}
	if rec == nil {
		return Result{Kind: Ambiguous}, nil
	}
	if hash != rec.DesiredHash {
		return Result{Kind: Update}, nil
	}
	current, err := PlumbFields(live)
	if err != nil {
		return Result{}, err
	}
	recorded, err := rec.Fields()
	if err != nil {
		return Result{}, err
	}
	lost := &fieldpath.Set{}
	recorded.Difference(current).Leaves().Iterate(func(p fieldpath.Path) {
		if !ignore.covers(p) && !coveredBy(left, p) {
			lost.Insert(p)
		}
	})
	content := live.Content()
	if content == nil {
		// Compacted: which fields changed and who owns them now is known
		// here, not what they hold.
		added := addedFields(live, recorded, ignore, left)
		if lost.Empty() && len(added) == 0 {
			return Result{Kind: Unchanged}, nil
		}
		return Result{Kind: Drifted, Incomplete: true, LostOnly: len(added) == 0, Changes: append(attribute(desired, live, nil, lost), added...)}, nil
	}
	changes, additions := additionsInPlumbItems(live, content, recorded, ignore, left)
	if lost.Empty() && len(additions) == 0 {
		return Result{Kind: Unchanged}, nil
	}
	if len(additions) == 0 && len(changes) == 0 && holdsDesired(desired, content, lost) {
		return Result{Kind: Unchanged, Reclaim: true}, nil
	}
	changes = append(attribute(desired, live, content, lost), changes...)
	return Result{Kind: Drifted, Changes: changes, Additions: additions}, nil
}

// addedRoots calls found with each field that another manager added inside
// a list item plumb applied (the shortest such path), and that neither an
// ignore rule nor a field left to others covers, with the entry that owns
// it. found returns false to stop.
func addedRoots(live *compact.Object, plumbFields *fieldpath.Set, ignore Ignore, left *fieldpath.Set,
	found func(root fieldpath.Path, entry compact.ManagedEntry) bool) {
	seen := map[string]bool{}
	covered := prefixesOf(plumbFields)
	for _, entry := range live.ManagedFields() {
		if entry.Manager.Value() == plumbv1.FieldManager || entry.Subresource.Value() != "" || entry.Fields.Value() == "" {
			continue
		}
		set, err := fieldsOf(entry)
		if err != nil {
			continue
		}
		stop := false
		set.Leaves().Iterate(func(p fieldpath.Path) {
			if stop {
				return
			}
			root, ok := addedRoot(p, plumbFields, covered)
			if !ok || ignore.covers(root) || coveredBy(left, root) || seen[root.String()] {
				return
			}
			seen[root.String()] = true
			stop = !found(root, entry)
		})
		if stop {
			return
		}
	}
}

// addedFields are the fields another manager owns inside list items plumb
// applied (see additionsInPlumbItems), without their values.
func addedFields(live *compact.Object, plumbFields *fieldpath.Set, ignore Ignore, left *fieldpath.Set) []Change {
	var out []Change
	addedRoots(live, plumbFields, ignore, left, func(root fieldpath.Path, entry compact.ManagedEntry) bool {
		out = append(out, Change{Path: root.String(), FieldPath: root, After: NotRead,
			Manager: entry.Manager.Value(), Operation: entry.Operation.Value(), Time: entry.Time()})
		return true
	})
	return out
}

// NotRead stands for a live value the Diff phase did not read (the object
// could not be fetched whole).
const NotRead = "(not read)"

// additionsInPlumbItems finds fields other managers added inside list items
// that plumb applied (keyed items such as a container by name): they change
// what plumb deployed, unlike a label or a replica count set beside it.
// content is the live object whole.
func additionsInPlumbItems(live *compact.Object, content *unstructured.Unstructured, plumbFields *fieldpath.Set, ignore Ignore, left *fieldpath.Set) ([]Change, []PatchOp) {
	var changes []Change
	var ops []PatchOp
	addedRoots(live, plumbFields, ignore, left, func(root fieldpath.Path, entry compact.ManagedEntry) bool {
		pointer, guards, ok := pointerTo(content.Object, root)
		if !ok {
			return true
		}
		after, _ := valueAt(content.Object, root)
		changes = append(changes, Change{Path: root.String(), FieldPath: root, After: render(after, true),
			Manager: entry.Manager.Value(), Operation: entry.Operation.Value(), Time: entry.Time()})
		ops = append(append(ops, guards...), PatchOp{Op: "remove", Path: pointer})
		return true
	})
	return changes, ops
}

// coveredBy reports whether set holds p or a path above it.
func coveredBy(set *fieldpath.Set, p fieldpath.Path) bool {
	if set == nil {
		return false
	}
	for i := range p {
		if set.Has(p[:i+1]) {
			return true
		}
	}
	return false
}

// OwnerOf names the manager that owns the field p of live (writes through
// the status subresource aside), or "" when nobody does.
func OwnerOf(live *compact.Object, p fieldpath.Path) string {
	for _, entry := range live.ManagedFields() {
		if entry.Fields.Value() == "" || entry.Subresource.Value() == "status" {
			continue
		}
		if set, err := fieldsOf(entry); err == nil && set.Has(p) {
			return entry.Manager.Value()
		}
	}
	return ""
}

// StripPaths removes from a desired object the fields at the paths in set,
// so that plumb neither applies nor owns them (through keyed list items;
// a path that ends at a list item is left as is).
func StripPaths(obj *unstructured.Unstructured, set *fieldpath.Set) {
	if set == nil {
		return
	}
	set.Iterate(func(p fieldpath.Path) {
		if len(p) == 0 || p[len(p)-1].FieldName == nil {
			return
		}
		parent, ok := valueAt(obj.Object, p[:len(p)-1])
		if m, isMap := parent.(map[string]any); ok && isMap {
			delete(m, *p[len(p)-1].FieldName)
		}
	})
}

// prefixesOf lists every path at or above a member of set.
func prefixesOf(set *fieldpath.Set) map[string]bool {
	out := map[string]bool{}
	set.Iterate(func(p fieldpath.Path) {
		for i := range p {
			out[p[:i+1].String()] = true
		}
	})
	return out
}

// addedRoot returns the shortest prefix of p that plumb owns nothing at or
// under, when it lies inside a keyed list item that plumb owns.
func addedRoot(p fieldpath.Path, plumbFields *fieldpath.Set, covered map[string]bool) (fieldpath.Path, bool) {
	insideItem := false
	for i := range p {
		prefix := p[:i+1]
		if covered[prefix.String()] {
			if p[i].Key != nil && plumbFields.Has(prefix) {
				insideItem = true
			}
			continue
		}
		if !insideItem {
			return nil, false
		}
		return prefix.Copy(), true
	}
	return nil, false
}

// pointerTo turns a managedFields path into a JSON pointer into obj (keyed
// items become indices), with test operations that guard each index.
func pointerTo(obj map[string]any, p fieldpath.Path) (string, []PatchOp, bool) {
	var b strings.Builder
	var guards []PatchOp
	var cur any = obj
	for _, pe := range p {
		switch {
		case pe.FieldName != nil:
			m, ok := cur.(map[string]any)
			if !ok {
				return "", nil, false
			}
			b.WriteString("/" + strings.ReplaceAll(strings.ReplaceAll(*pe.FieldName, "~", "~0"), "/", "~1"))
			cur = m[*pe.FieldName]
		case pe.Key != nil:
			list, ok := cur.([]any)
			if !ok {
				return "", nil, false
			}
			found := -1
			for i, item := range list {
				if m, ok := item.(map[string]any); ok && matchesKey(m, *pe.Key) {
					found = i
					break
				}
			}
			if found < 0 {
				return "", nil, false
			}
			fmt.Fprintf(&b, "/%d", found)
			item := list[found].(map[string]any)
			for _, f := range *pe.Key {
				guards = append(guards, PatchOp{Op: "test", Path: b.String() + "/" + f.Name, Value: item[f.Name]})
			}
			cur = item
		default:
			return "", nil, false
		}
	}
	return b.String(), guards, true
}

// attribute names, for each lost field, its values (content is the live
// object whole; nil: the live values are NotRead) and the manager that
// owns it now.
func attribute(desired *unstructured.Unstructured, live *compact.Object, content *unstructured.Unstructured, lost *fieldpath.Set) []Change {
	type owner struct {
		set   *fieldpath.Set
		entry compact.ManagedEntry
	}
	var owners []owner
	for _, entry := range live.ManagedFields() {
		// A write through a subresource other than status (kubectl scale, an
		// autoscaler through scale) owns main-resource fields too.
		if entry.Manager.Value() == plumbv1.FieldManager || entry.Fields.Value() == "" || entry.Subresource.Value() == "status" {
			continue
		}
		if set, err := fieldsOf(entry); err == nil {
			owners = append(owners, owner{set: set, entry: entry})
		}
	}
	secret := desired.GetKind() == "Secret" && desired.GroupVersionKind().Group == ""
	var changes []Change
	lost.Iterate(func(p fieldpath.Path) {
		c := Change{Path: p.String(), FieldPath: p.Copy(), Manager: "unknown", Operation: "unknown"}
		before, hadBefore := valueAt(desired.Object, p)
		var after any
		hasAfter := true
		c.Before, c.After = render(before, hadBefore), NotRead
		if content != nil {
			after, hasAfter = valueAt(content.Object, p)
			c.After = render(after, hasAfter)
		}
		if secret && (strings.HasPrefix(c.Path, ".data") || strings.HasPrefix(c.Path, ".stringData") || strings.Contains(c.Path, "last-applied-configuration")) {
			c.Before, c.After = "*** (before)", "*** (after)"
		}
		for _, o := range owners {
			if o.set.Has(p) {
				c.Manager, c.Operation, c.Subresource, c.Time = o.entry.Manager.Value(), o.entry.Operation.Value(), o.entry.Subresource.Value(), o.entry.Time()
				break
			}
		}
		if c.Manager == "unknown" && !hasAfter {
			// A removed field has no owner left, and the API server keeps no
			// record of who removed it; guessing would blame the wrong actor.
			c.Operation = "removed"
		}
		changes = append(changes, c)
	})
	sort.Slice(changes, func(i, j int) bool { return changes[i].Path < changes[j].Path })
	return changes
}

// holdsDesired reports whether live holds, at every path of paths, the
// value desired has there (by meaning: quantities by amount, numbers by
// value).
func holdsDesired(desired, live *unstructured.Unstructured, paths *fieldpath.Set) bool {
	same := true
	paths.Iterate(func(p fieldpath.Path) {
		if !same {
			return
		}
		want, ok1 := valueAt(desired.Object, p)
		got, ok2 := valueAt(live.Object, p)
		same = ok1 && ok2 && sameMeaning(want, got)
	})
	return same
}

// render shows a value compactly; absent fields show as "".
func render(v any, ok bool) string {
	if !ok {
		return ""
	}
	s, isString := v.(string)
	if !isString {
		data, err := json.Marshal(v)
		if err != nil {
			s = fmt.Sprint(v)
		} else {
			s = string(data)
		}
	}
	return shorten(s)
}

// maxValueBytes bounds a value shown in a Change: a drift is described in
// Events and kept between ticks, and a field may hold megabytes.
const maxValueBytes = 256

// shorten cuts s to maxValueBytes (at a character boundary), saying how
// long it was.
func shorten(s string) string {
	if len(s) <= maxValueBytes {
		return s
	}
	cut := maxValueBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d bytes)", s[:cut], len(s))
}

// valueAt finds the value at a managedFields path in an object.
func valueAt(obj map[string]any, p fieldpath.Path) (any, bool) {
	var cur any = obj
	for _, pe := range p {
		switch {
		case pe.FieldName != nil:
			m, ok := cur.(map[string]any)
			if !ok {
				return nil, false
			}
			if cur, ok = m[*pe.FieldName]; !ok {
				return nil, false
			}
		case pe.Key != nil:
			list, ok := cur.([]any)
			if !ok {
				return nil, false
			}
			found := false
			for _, item := range list {
				m, ok := item.(map[string]any)
				if ok && matchesKey(m, *pe.Key) {
					cur, found = m, true
					break
				}
			}
			if !found {
				return nil, false
			}
		case pe.Value != nil:
			list, ok := cur.([]any)
			if !ok {
				return nil, false
			}
			want := value.ToString(*pe.Value)
			found := false
			for _, item := range list {
				if value.ToString(value.NewValueInterface(item)) == want {
					cur, found = item, true
					break
				}
			}
			if !found {
				return nil, false
			}
		case pe.Index != nil:
			list, ok := cur.([]any)
			if !ok || *pe.Index >= len(list) {
				return nil, false
			}
			cur = list[*pe.Index]
		default:
			return nil, false
		}
	}
	return cur, true
}

func matchesKey(m map[string]any, key value.FieldList) bool {
	for _, f := range key {
		v, ok := m[f.Name]
		if !ok || value.ToString(value.NewValueInterface(v)) != value.ToString(f.Value) {
			return false
		}
	}
	return true
}

// Normalize makes a desired object compare the way the API server stores
// it: a Secret's stringData becomes base64 data (the server stores data
// only, and plumb must own data.<key> to see it changed).
func Normalize(obj *unstructured.Unstructured) {
	if obj.GetKind() != "Secret" || obj.GroupVersionKind().Group != "" {
		return
	}
	stringData, ok := obj.Object["stringData"].(map[string]any)
	if !ok {
		return
	}
	data, _ := obj.Object["data"].(map[string]any)
	if data == nil {
		data = map[string]any{}
	}
	for k, v := range stringData {
		if s, ok := v.(string); ok {
			data[k] = base64.StdEncoding.EncodeToString([]byte(s))
		}
	}
	obj.Object["data"] = data
	delete(obj.Object, "stringData")
}

// Describe is a one-line account of a drift, for Events and conditions.
func Describe(changes []Change) string {
	parts := make([]string, 0, len(changes))
	for _, c := range changes {
		when := ""
		if c.Time != nil {
			when = " at " + c.Time.UTC().Format(time.RFC3339)
		}
		how := c.Operation
		if c.Subresource != "" {
			how += " of " + c.Subresource
		}
		parts = append(parts, fmt.Sprintf("%s %q → %q by %s (%s%s)", c.Path, c.Before, c.After, c.Manager, how, when))
	}
	return strings.Join(parts, "; ")
}
