package diff

import (
	"encoding/hex"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/digest"
)

// Hash is a stable digest of an object's content, without the revision and
// content-hash annotations (they follow the content, see package
// v1alpha1); an annotations map left empty without them counts as none.
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
			return withoutOwnAnnotations(metadata), false
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
	value, present := metadata["annotations"]
	if present && value == nil {
		out := make(map[string]any, len(metadata))
		for k, v := range metadata {
			out[k] = v
		}
		delete(out, "annotations")
		return out
	}
	annotations, ok := value.(map[string]any)
	if !ok {
		return metadata
	}
	_, rev := annotations[plumbv1.AnnotationRevision]
	_, hash := annotations[plumbv1.AnnotationContentHash]
	if !rev && !hash && len(annotations) > 0 {
		return metadata
	}
	kept := make(map[string]any, len(annotations))
	for k, v := range annotations {
		if k != plumbv1.AnnotationRevision && k != plumbv1.AnnotationContentHash {
			kept[k] = v
		}
	}
	out := make(map[string]any, len(metadata))
	for k, v := range metadata {
		out[k] = v
	}
	if len(kept) == 0 {
		delete(out, "annotations")
	} else {
		out["annotations"] = kept
	}
	return out
}
