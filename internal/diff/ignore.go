package diff

import (
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// Ignore holds JSON pointers (RFC 6901) of fields plumb leaves to others.
type Ignore []string

// Strip removes the ignored fields from a desired object, so that plumb
// neither applies nor owns them.
func (ig Ignore) Strip(obj *unstructured.Unstructured) {
	for _, pointer := range ig {
		removePointer(obj.Object, splitPointer(pointer))
	}
}

// covers reports whether a managedFields path lies at or under an ignored
// pointer (only paths of plain field names can match).
func (ig Ignore) covers(p fieldpath.Path) bool {
	var parts []string
	for _, pe := range p {
		switch {
		case pe.FieldName != nil:
			parts = append(parts, *pe.FieldName)
		case pe.Index != nil:
			parts = append(parts, strconv.Itoa(*pe.Index))
		default:
			parts = append(parts, "\x00") // a keyed element matches no pointer
		}
	}
	for _, pointer := range ig {
		segments := splitPointer(pointer)
		if len(segments) <= len(parts) && slicesEqual(segments, parts[:len(segments)]) {
			return true
		}
	}
	return false
}

func slicesEqual(a, b []string) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// splitPointer decodes a JSON pointer into its segments.
func splitPointer(pointer string) []string {
	parts := strings.Split(strings.TrimPrefix(pointer, "/"), "/")
	for i, p := range parts {
		parts[i] = strings.ReplaceAll(strings.ReplaceAll(p, "~1", "/"), "~0", "~")
	}
	return parts
}

// removePointer deletes the value at segments, through maps and lists.
func removePointer(cur any, segments []string) {
	for i, seg := range segments {
		last := i == len(segments)-1
		switch node := cur.(type) {
		case map[string]any:
			if last {
				delete(node, seg)
				return
			}
			cur = node[seg]
		case []any:
			idx, err := strconv.Atoi(seg)
			if err != nil || idx < 0 || idx >= len(node) {
				return
			}
			if last {
				return // removing a list item would shift the others: not supported
			}
			cur = node[idx]
		default:
			return
		}
	}
}
