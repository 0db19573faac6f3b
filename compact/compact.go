// Package compact is the form in which the Observe phase's cache keeps live
// objects: what a tick reads of them, in less memory. Decoded into nested
// maps, an object's managedFields take about half of its memory (every
// field path is a map of its own), so they are kept as their JSON text and
// decoded only when a tick reads them (ManagedFields). The status, which
// the Diff phase never reads, and kubectl's last-applied-configuration
// annotation, a second copy of the whole object, are dropped.
package compact

import (
	"encoding/json"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// managedFieldsKey holds, in the metadata of a compacted object, its
// managedFields as JSON text. It is not a field of ObjectMeta: the API
// server would drop it, and libraries reading managedFields see none
// rather than something wrong.
const managedFieldsKey = "plumb.dev/compactManagedFields"

// LastAppliedAnnotation is kubectl's copy of the object it last applied.
const LastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

// Trim compacts a live object in place. Trimming an object twice changes
// nothing more.
func Trim(u *unstructured.Unstructured) {
	delete(u.Object, "status")
	metadata, ok := u.Object["metadata"].(map[string]any)
	if !ok {
		return
	}
	if annotations, ok := metadata["annotations"].(map[string]any); ok {
		delete(annotations, LastAppliedAnnotation)
		if len(annotations) == 0 {
			delete(metadata, "annotations")
		}
	}
	fields, ok := metadata["managedFields"]
	if !ok {
		return
	}
	delete(metadata, "managedFields")
	if data, err := json.Marshal(fields); err == nil {
		metadata[managedFieldsKey] = string(data)
	}
}

// Transform is Trim as an informer's transform function: objects of other
// types (a tombstone) pass unchanged.
func Transform(obj any) (any, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		Trim(u)
	}
	return obj, nil
}

// ManagedFields returns the managedFields of a live object, compacted or
// not.
func ManagedFields(u *unstructured.Unstructured) []metav1.ManagedFieldsEntry {
	metadata, _ := u.Object["metadata"].(map[string]any)
	data, ok := metadata[managedFieldsKey].(string)
	if !ok {
		return u.GetManagedFields()
	}
	var out []metav1.ManagedFieldsEntry
	if err := json.Unmarshal([]byte(data), &out); err != nil {
		return nil
	}
	return out
}

// IsCompacted reports whether a metadata key is one Trim added (which
// compares of metadata must skip, as they skip managedFields).
func IsCompacted(metadataKey string) bool { return metadataKey == managedFieldsKey }
