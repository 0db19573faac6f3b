package diff

import (
	"encoding/hex"
	"fmt"
	"maps"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/digest"
)

// Hash is a stable digest of an object's content, without the revision and
// content-hash annotations (they follow the content, see package
// v1alpha1); an annotations map left empty without them counts as none.
// The slot label is left out too: it names where the App is ticked, not
// what Git says, so that objects applied before it existed keep their
// hash (and an ordered App's content) when they gain it.
//
// It walks the object once, writing each value with its type and length
// (maps with their keys in order) and hashes the result: no copy of the
// object and no reflection, since every tick hashes every desired object.
// Two objects hash alike only when they hold the same values of the same
// JSON types.
func Hash(obj *unstructured.Unstructured) (string, error) {
	var e digest.Encoder
	e.Grow(1024)
	err := e.Map(obj.Object, func(key string, v any) (any, bool) {
		if metadata, ok := v.(map[string]any); ok && key == "metadata" {
			return withoutSlotLabel(withoutOwnAnnotations(metadata)), false
		}
		return v, false
	})
	if err != nil {
		return "", fmt.Errorf("hashing %s: %w", obj.GetName(), err)
	}
	sum := e.Sum256()
	return hex.EncodeToString(sum[:]), nil
}

// withoutOwnAnnotations returns metadata without the revision and content
// hash annotations, and without an annotations map left empty or null
// (YAML's empty "annotations:"), as the stamped object will hold it;
// metadata itself is not changed (it is copied only when it must be).
func withoutOwnAnnotations(metadata map[string]any) map[string]any {
	return withoutEntries(metadata, "annotations", plumbv1.AnnotationRevision, plumbv1.AnnotationContentHash)
}

// withoutSlotLabel returns metadata without the slot label, and without a
// labels map left empty or null; metadata itself is not changed.
func withoutSlotLabel(metadata map[string]any) map[string]any {
	return withoutEntries(metadata, "labels", plumbv1.LabelSlot)
}

// withoutEntries returns metadata without keys in its map field, and
// without the field when that leaves it empty or it is null; metadata is
// copied only when something must go.
func withoutEntries(metadata map[string]any, field string, keys ...string) map[string]any {
	value, present := metadata[field]
	if present && value == nil {
		out := maps.Clone(metadata)
		delete(out, field)
		return out
	}
	entries, ok := value.(map[string]any)
	if !ok {
		return metadata
	}
	found := false
	for _, key := range keys {
		if _, ok := entries[key]; ok {
			found = true
		}
	}
	if !found && len(entries) > 0 {
		return metadata
	}
	kept := maps.Clone(entries)
	for _, key := range keys {
		delete(kept, key)
	}
	out := maps.Clone(metadata)
	if len(kept) == 0 {
		delete(out, field)
	} else {
		out[field] = kept
	}
	return out
}
