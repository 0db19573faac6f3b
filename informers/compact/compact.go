// Package compact is the form in which the Observe phase's cache keeps live
// objects: what a tick reads of them, in a small fraction of the memory of
// the decoded object. An Object keeps an object's identity, its
// resourceVersion and generation, plumb's own labels and annotations (those
// under plumb.dev/), who owns which field (managedFields, with each
// manager's field set as JSON text) and digests of the rest: of what an
// apply sets (labels, annotations and everything outside metadata and
// status) and of the other metadata. Unchanged ticks need no more than that;
// the Diff phase fetches an object whole only to describe a drift (see
// Whole and Content).
//
// Strings that repeat across objects (kinds, namespaces, App names,
// revisions, managers, and field sets, which objects of one shape share) are
// interned with package unique, so a thousand objects rendered from one
// template hold one copy of each.
package compact

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
	"unique"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/digest"
	"github.com/plumb-dev/plumb/internal/health"
)

// lastAppliedAnnotation is kubectl's copy of the object it last applied:
// it is in no digest, and an apply by plumb never sets it.
const lastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

// ownPrefix is the prefix of the labels and annotations an Object keeps.
const ownPrefix = "plumb.dev/"

// Digest is a short digest of part of an object (the first 16 bytes of a
// SHA-256 of its digest encoding).
type Digest [16]byte

// Object is a live object as the cache keeps it. It is immutable: share it,
// never change it.
type Object struct {
	apiVersion, kind unique.Handle[string]
	namespace        unique.Handle[string]
	name             string
	resourceVersion  string
	generation       int64
	deleting         bool
	// own are plumb's labels and annotations, as key/value pairs sorted by
	// key, each key prefixed "l" or "a"; but for the content hash, which is
	// contentHash (its value is the object's own: interning it would cost
	// more than it saves).
	own         []ownPair
	contentHash string
	managed     []ManagedEntry
	// applied digests what an apply sets and a dry-run shows: all labels,
	// the annotations but kubectl's last-applied copy, and every top-level
	// field but metadata and status. rest digests the other metadata
	// (owners, finalizers, deletion), but resourceVersion, generation and
	// managedFields.
	applied, rest Digest
	// healthStatus and healthMessage are the object's kstatus health (the
	// message interned: objects of one kind in one state share it).
	healthStatus  health.Status
	healthMessage unique.Handle[string]
	// whole is the object as the API server served it, kept only by Whole.
	whole *unstructured.Unstructured
}

// ownPair is one of plumb's labels or annotations.
type ownPair struct {
	key   string // "l" or "a", then the label or annotation key
	value unique.Handle[string]
}

// ManagedEntry is one entry of an object's managedFields.
type ManagedEntry struct {
	Manager, Operation, APIVersion, Subresource unique.Handle[string]
	// Fields is the entry's FieldsV1, as JSON text ("" for none).
	Fields unique.Handle[string]
	// unixTime is the entry's time in seconds, 0 for none.
	unixTime int64
}

// Time is when the entry's manager last changed its fields (nil: unknown).
func (e ManagedEntry) Time() *metav1.Time {
	if e.unixTime == 0 {
		return nil
	}
	t := metav1.NewTime(time.Unix(e.unixTime, 0).UTC())
	return &t
}

// Of compacts a live object as the API server served it (u is not changed
// nor kept).
func Of(u *unstructured.Unstructured) (*Object, error) {
	o := &Object{
		apiVersion:      intern(u.GetAPIVersion()),
		kind:            intern(u.GetKind()),
		namespace:       intern(u.GetNamespace()),
		name:            u.GetName(),
		resourceVersion: u.GetResourceVersion(),
		generation:      u.GetGeneration(),
	}
	metadata, _ := u.Object["metadata"].(map[string]any)
	_, o.deleting = metadata["deletionTimestamp"]
	for _, field := range [2]string{"labels", "annotations"} {
		values, _ := metadata[field].(map[string]any)
		for k, v := range values {
			if !strings.HasPrefix(k, ownPrefix) && (field != "annotations" || k != plumbv1.AnnotationHelmResourcePolicy) {
				continue // kept: plumb's own, and Helm's keep policy (the prune guard's)
			}
			s, ok := v.(string)
			if !ok {
				continue // the API server serves strings only
			}
			if field == "annotations" && k == plumbv1.AnnotationContentHash {
				o.contentHash = s
				continue
			}
			o.own = append(o.own, ownPair{key: field[:1] + k, value: intern(s)})
		}
	}
	slices.SortFunc(o.own, func(a, b ownPair) int { return strings.Compare(a.key, b.key) })
	var err error
	if o.managed, err = managedEntries(metadata["managedFields"]); err != nil {
		return nil, fmt.Errorf("%s %s: managedFields: %w", u.GetKind(), u.GetName(), err)
	}
	if o.applied, o.rest, err = digests(u); err != nil {
		return nil, fmt.Errorf("%s %s: %w", u.GetKind(), u.GetName(), err)
	}
	h := health.Of(u)
	o.healthStatus, o.healthMessage = h.Status, intern(h.Message)
	return o, nil
}

// Whole is Of, keeping the whole object beside (see Content).
func Whole(u *unstructured.Unstructured) (*Object, error) {
	o, err := Of(u)
	if err != nil {
		return nil, err
	}
	o.whole = u
	return o, nil
}

// Transform is Of as an informer's transform function: objects of other
// types (a tombstone) pass unchanged. An object that cannot be compacted
// (a label that is no string) is an error, which the informer logs and
// skips.
func Transform(obj any) (any, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		return Of(u)
	}
	return obj, nil
}

// intern returns the canonical handle of s.
func intern(s string) unique.Handle[string] { return unique.Make(s) }

// managedEntries reads managedFields as decoded from JSON.
func managedEntries(v any) ([]ManagedEntry, error) {
	list, _ := v.([]any)
	if len(list) == 0 {
		return nil, nil
	}
	out := make([]ManagedEntry, 0, len(list))
	for _, item := range list {
		m, ok := item.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("an entry is not an object")
		}
		str := func(key string) string { s, _ := m[key].(string); return s }
		e := ManagedEntry{Manager: intern(str("manager")), Operation: intern(str("operation")),
			APIVersion: intern(str("apiVersion")), Subresource: intern(str("subresource")), Fields: intern("")}
		if parsed, err := time.Parse(time.RFC3339, str("time")); err == nil {
			e.unixTime = parsed.Unix()
		}
		if fields, ok := m["fieldsV1"]; ok && fields != nil {
			// Marshalled with its keys sorted: objects of one shape share
			// one interned text.
			data, err := json.Marshal(fields)
			if err != nil {
				return nil, err
			}
			e.Fields = intern(string(data))
		}
		out = append(out, e)
	}
	return out, nil
}

// digests computes an object's applied and rest digests (see Object).
func digests(u *unstructured.Unstructured) (applied, rest Digest, err error) {
	metadata, _ := u.Object["metadata"].(map[string]any)
	var e digest.Encoder
	e.Grow(2048)
	err = e.Map(u.Object, func(key string, v any) (any, bool) {
		switch key {
		case "status":
			return nil, true
		case "metadata":
			set := map[string]any{}
			if labels, ok := metadata["labels"].(map[string]any); ok && len(labels) > 0 {
				set["labels"] = labels
			}
			if annotations := withoutLastApplied(metadata["annotations"]); len(annotations) > 0 {
				set["annotations"] = annotations
			}
			return set, false
		}
		return v, false
	})
	if err != nil {
		return applied, rest, err
	}
	sum := e.Sum256()
	copy(applied[:], sum[:])
	e.Reset()
	err = e.Map(metadata, func(key string, v any) (any, bool) {
		switch key {
		case "resourceVersion", "generation", "managedFields", "labels", "annotations":
			return nil, true
		}
		return v, false
	})
	sum = e.Sum256()
	copy(rest[:], sum[:])
	return applied, rest, err
}

// withoutLastApplied is an annotations map without kubectl's
// last-applied-configuration (copied only when it has one).
func withoutLastApplied(v any) map[string]any {
	annotations, _ := v.(map[string]any)
	if _, ok := annotations[lastAppliedAnnotation]; !ok {
		return annotations
	}
	out := make(map[string]any, len(annotations))
	for k, value := range annotations {
		if k != lastAppliedAnnotation {
			out[k] = value
		}
	}
	return out
}

// AppliedDigest digests what an apply sets of u (as an Object's applied
// digest): a server-side dry-run's answer, compared with a cached Object,
// tells whether the apply would change it.
func AppliedDigest(u *unstructured.Unstructured) (Digest, error) {
	applied, _, err := digests(u)
	return applied, err
}

// GroupVersionKind is the object's kind.
func (o *Object) GroupVersionKind() schema.GroupVersionKind {
	return schema.FromAPIVersionAndKind(o.apiVersion.Value(), o.kind.Value())
}

// GetName is the object's name.
func (o *Object) GetName() string { return o.name }

// GetNamespace is the object's namespace ("" when cluster-scoped).
func (o *Object) GetNamespace() string { return o.namespace.Value() }

// GetResourceVersion is the object's resourceVersion.
func (o *Object) GetResourceVersion() string { return o.resourceVersion }

// GetGeneration is the object's generation.
func (o *Object) GetGeneration() int64 { return o.generation }

// Deleting reports an object that has a deletionTimestamp.
func (o *Object) Deleting() bool { return o.deleting }

// Label returns one of plumb's labels (key under plumb.dev/), "" if unset.
func (o *Object) Label(key string) string { return o.ownValue("l" + key) }

// Annotation returns one of plumb's annotations (key under plumb.dev/), ""
// if unset.
func (o *Object) Annotation(key string) string {
	if key == plumbv1.AnnotationContentHash {
		return o.contentHash
	}
	return o.ownValue("a" + key)
}

func (o *Object) ownValue(key string) string {
	for _, p := range o.own {
		if p.key == key {
			return p.value.Value()
		}
	}
	return ""
}

// Health is the object's kstatus health as of this version.
func (o *Object) Health() health.Result {
	if o.healthMessage == (unique.Handle[string]{}) {
		return health.Result{Status: o.healthStatus} // not made by Of
	}
	return health.Result{Status: o.healthStatus, Message: o.healthMessage.Value()}
}

// HealthChanged reports whether new's health differs from old's: the one
// thing in a write through the status subresource that matters to plumb.
func HealthChanged(old, new *Object) bool {
	return old.healthStatus != new.healthStatus || old.healthMessage != new.healthMessage
}

// ManagedFields are the object's managedFields entries (shared: do not
// change them).
func (o *Object) ManagedFields() []ManagedEntry { return o.managed }

// AppliedDigest digests what an apply sets (see Object).
func (o *Object) AppliedDigest() Digest { return o.applied }

// Content is the whole object, for an Object made by Whole; nil for one the
// cache keeps (compacted).
func (o *Object) Content() *unstructured.Unstructured { return o.whole }

// WithoutContent is o without the content Whole kept (a copy; o is not
// changed): for keeping what a tick learnt from an object read whole
// without keeping the whole object.
func (o *Object) WithoutContent() *Object {
	c := *o
	c.whole = nil
	return &c
}

// GetObjectMeta serves the object's identity and resourceVersion to
// client-go's key functions (meta.Accessor), which the informer's store
// uses.
func (o *Object) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Name: o.name, Namespace: o.GetNamespace(), ResourceVersion: o.resourceVersion, Generation: o.generation}
}

// Identity is an object that carries only o's kind, namespace and name, as
// requests that name an object take it.
func (o *Object) Identity() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(o.GroupVersionKind())
	u.SetNamespace(o.GetNamespace())
	u.SetName(o.name)
	return u
}

// Relevant reports whether the change from old to new touches anything a
// tick looks at: what an apply sets, the other metadata, deletion, plumb's
// labels and annotations, or who owns which field (the times in
// managedFields and writes through the status subresource aside). A new
// resourceVersion alone, or a change of status, is not relevant.
func Relevant(old, new *Object) bool {
	if old.resourceVersion == new.resourceVersion {
		return false
	}
	return old.applied != new.applied || old.rest != new.rest || old.deleting != new.deleting ||
		old.contentHash != new.contentHash || !slices.Equal(old.own, new.own) || !sameOwnership(old.managed, new.managed)
}

// withoutTimes are entries with their times cleared, but for status
// entries, which are left out.
func withoutTimes(entries []ManagedEntry) []ManagedEntry {
	out := make([]ManagedEntry, 0, len(entries))
	for _, e := range entries {
		if e.Subresource != statusSubresource {
			e.unixTime = 0
			out = append(out, e)
		}
	}
	return out
}

// statusSubresource is the interned name of the status subresource.
var statusSubresource = unique.Make("status")

// sameOwnership compares managedFields without times and status entries,
// in any order (the API server orders entries by time, so a new time alone
// may reorder them).
func sameOwnership(a, b []ManagedEntry) bool {
	x, y := withoutTimes(a), withoutTimes(b)
	if slices.Equal(x, y) {
		return true // the usual case: the same entries in the same order
	}
	byIdentity := func(p, q ManagedEntry) int {
		for _, pair := range [...][2]unique.Handle[string]{{p.Manager, q.Manager}, {p.Operation, q.Operation},
			{p.Subresource, q.Subresource}, {p.APIVersion, q.APIVersion}, {p.Fields, q.Fields}} {
			if c := strings.Compare(pair[0].Value(), pair[1].Value()); c != 0 {
				return c
			}
		}
		return 0
	}
	slices.SortFunc(x, byIdentity)
	slices.SortFunc(y, byIdentity)
	return slices.Equal(x, y)
}
