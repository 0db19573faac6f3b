package diff

import (
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// FieldChanges lists, field by field, how applying desired would change
// live: every field Git sets whose live value differs in meaning (0.5Gi and
// 512Mi are equal, so are "1" and 1 where a quantity or an int-or-string is
// meant). Fields only live has (server defaults, other managers' fields,
// status) are not changes. Secret values are masked. The tick does not need
// it (its Records decide); it is the field-level view for people (the
// coming `plumb diff`) and the oracle test's independent comparison.
func FieldChanges(desired, live *unstructured.Unstructured) []Change {
	var changes []Change
	secret := desired.GetKind() == "Secret" && desired.GroupVersionKind().Group == ""
	var liveObj map[string]any
	if live != nil {
		liveObj = live.Object
	}
	walk(desired.Object, liveObj, "", func(path string, want, got any, present bool) {
		if present && sameMeaning(want, got) {
			return
		}
		c := Change{Path: path, Before: render(got, present), After: render(want, true)}
		if secret && (strings.HasPrefix(path, ".data") || strings.HasPrefix(path, ".stringData") || strings.Contains(path, "last-applied-configuration")) {
			c.Before, c.After = "*** (before)", "*** (after)"
		}
		changes = append(changes, c)
	})
	sort.Slice(changes, func(i, j int) bool { return changes[i].Path < changes[j].Path })
	return changes
}

// walk visits every leaf of want with the value at the same place in got.
// Lists of objects with a name are matched by name, other lists by index.
func walk(want, got any, path string, visit func(path string, want, got any, present bool)) {
	switch w := want.(type) {
	case map[string]any:
		g, _ := got.(map[string]any)
		for k, v := range w {
			if path == "" && (k == "status" || k == "apiVersion" || k == "kind") {
				continue
			}
			if path == ".metadata" && k != "labels" && k != "annotations" {
				continue // name and namespace identify the object; the rest is the server's
			}
			gv, ok := g[k]
			child := path + "." + k
			if !ok {
				visit(child, v, nil, false)
				continue
			}
			walk(v, gv, child, visit)
		}
	case []any:
		g, _ := got.([]any)
		for i, item := range w {
			child, match, ok := matchItem(item, g, i)
			walkPath := path + child
			if !ok {
				visit(walkPath, item, nil, false)
				continue
			}
			walk(item, match, walkPath, visit)
		}
	default:
		visit(path, want, got, true)
	}
}

// matchItem finds the live counterpart of a list item: by name for objects
// that have one, else by index.
func matchItem(item any, list []any, i int) (string, any, bool) {
	if m, ok := item.(map[string]any); ok {
		if name, ok := m["name"].(string); ok {
			for _, candidate := range list {
				if cm, ok := candidate.(map[string]any); ok && cm["name"] == name {
					return fmt.Sprintf("[name=%q]", name), candidate, true
				}
			}
			return fmt.Sprintf("[name=%q]", name), nil, false
		}
	}
	if i < len(list) {
		return fmt.Sprintf("[%d]", i), list[i], true
	}
	return fmt.Sprintf("[%d]", i), nil, false
}

// sameMeaning compares two leaf values the way the API server would store
// them: quantities by amount, numbers and numeric strings by value.
func sameMeaning(want, got any) bool {
	if reflect.DeepEqual(want, got) {
		return true
	}
	_, wIsString := want.(string)
	_, gIsString := got.(string)
	if !wIsString && !gIsString {
		return numericString(want) == numericString(got) && numericString(want) != ""
	}
	// At least one string: a quantity ("500m" and 0.5), an int-or-string
	// ("80" and 80), or plain text.
	ws, gs := asString(want), asString(got)
	if ws == "" || gs == "" {
		return false
	}
	if ws == gs {
		return true
	}
	wq, err1 := resource.ParseQuantity(ws)
	gq, err2 := resource.ParseQuantity(gs)
	return err1 == nil && err2 == nil && wq.Cmp(gq) == 0
}

// asString renders a string or a number as text, "" for anything else.
func asString(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return numericString(v)
}

// numericString renders a number (or a numeric string) canonically, "" when
// the value is not a number.
func numericString(v any) string {
	switch n := v.(type) {
	case int64:
		return strconv.FormatInt(n, 10)
	case float64:
		return strconv.FormatFloat(n, 'f', -1, 64)
	case string:
		if f, err := strconv.ParseFloat(n, 64); err == nil {
			return strconv.FormatFloat(f, 'f', -1, 64)
		}
	}
	return ""
}
