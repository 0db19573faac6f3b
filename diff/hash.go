package diff

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
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
	e := contentEncoder{buf: make([]byte, 0, 1024)}
	if err := e.root(obj.Object); err != nil {
		return "", fmt.Errorf("hashing %s: %w", obj.GetName(), err)
	}
	sum := sha256.Sum256(e.buf)
	return hex.EncodeToString(sum[:]), nil
}

// contentEncoder writes JSON-like values as an unambiguous byte string:
// a tag byte per value, lengths before strings and collections.
type contentEncoder struct{ buf []byte }

// Tags of the encoded values.
const (
	tagNull   = 'n'
	tagTrue   = 't'
	tagFalse  = 'f'
	tagString = 's'
	tagInt    = 'i'
	tagFloat  = 'd'
	tagMap    = 'm'
	tagList   = 'l'
	tagOther  = 'j' // any other type, as its JSON
)

// root writes the object, leaving out plumb's own annotations.
func (e *contentEncoder) root(obj map[string]any) error {
	return e.mapOf(obj, func(key string, v any) any {
		if metadata, ok := v.(map[string]any); ok && key == "metadata" {
			return withoutOwnAnnotations(metadata)
		}
		return v
	})
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

func (e *contentEncoder) length(n int) {
	e.buf = binary.AppendUvarint(e.buf, uint64(n))
}

func (e *contentEncoder) str(s string) {
	e.length(len(s))
	e.buf = append(e.buf, s...)
}

// mapOf writes a map with its keys in order; each value goes through
// filter, which may replace it.
func (e *contentEncoder) mapOf(m map[string]any, filter func(key string, v any) any) error {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	e.buf = append(e.buf, tagMap)
	e.length(len(keys))
	for _, k := range keys {
		v := m[k]
		if filter != nil {
			v = filter(k, v)
		}
		e.str(k)
		if err := e.value(v); err != nil {
			return err
		}
	}
	return nil
}

func (e *contentEncoder) value(v any) error {
	switch v := v.(type) {
	case nil:
		e.buf = append(e.buf, tagNull)
	case bool:
		if v {
			e.buf = append(e.buf, tagTrue)
		} else {
			e.buf = append(e.buf, tagFalse)
		}
	case string:
		e.buf = append(e.buf, tagString)
		e.str(v)
	case int64:
		e.buf = append(e.buf, tagInt)
		e.buf = strconv.AppendInt(e.buf, v, 10)
		e.buf = append(e.buf, ';')
	case int:
		e.buf = append(e.buf, tagInt)
		e.buf = strconv.AppendInt(e.buf, int64(v), 10)
		e.buf = append(e.buf, ';')
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("unsupported number %v", v)
		}
		e.buf = append(e.buf, tagFloat)
		e.buf = strconv.AppendFloat(e.buf, v, 'g', -1, 64)
		e.buf = append(e.buf, ';')
	case map[string]any:
		return e.mapOf(v, nil)
	case []any:
		e.buf = append(e.buf, tagList)
		e.length(len(v))
		for _, item := range v {
			if err := e.value(item); err != nil {
				return err
			}
		}
	default:
		data, err := json.Marshal(v)
		if err != nil {
			return err
		}
		e.buf = append(e.buf, tagOther)
		e.str(string(data))
	}
	return nil
}
