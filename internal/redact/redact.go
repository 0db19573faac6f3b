// Package redact hides Secret values in messages that plumb did not write
// itself: a renderer's error quoting its input, an API server's or an
// admission webhook's refusal quoting the object. plumb's own messages never
// print values; this is the defence in depth behind that rule.
package redact

import (
	"encoding/base64"
	"encoding/json"
	"sort"
	"strings"
)

// Mask is what a hidden value is replaced with.
const Mask = "***"

// minLength keeps very short values (e.g. "1") from hiding unrelated text;
// they reveal little anyway.
const minLength = 4

// Values is a set of secret values to hide. The zero value is empty and
// ready to use.
type Values struct {
	set map[string]bool
}

// Add records v, and the form it takes inside a JSON string, to be hidden.
func (s *Values) Add(v string) {
	if len(v) < minLength {
		return
	}
	if s.set == nil {
		s.set = map[string]bool{}
	}
	s.set[v] = true
	quoted, _ := json.Marshal(v)
	s.set[strings.Trim(string(quoted), `"`)] = true
}

// AddSecret records every value of a Secret given as its object map
// (unstructured content or a decoded manifest): data as written and
// decoded, stringData as written and encoded, since a message may quote
// either form. Any object of kind Secret counts, whatever its apiVersion:
// a malformed one (apiVersion V1, say) is just what makes a render fail
// and its message quote the input, and hiding too much costs nothing.
func (s *Values) AddSecret(obj map[string]any) {
	if obj == nil || obj["kind"] != "Secret" {
		return
	}
	for _, field := range []string{"data", "stringData"} {
		m, _ := obj[field].(map[string]any)
		for _, v := range m {
			value, ok := v.(string)
			if !ok {
				continue
			}
			s.Add(value)
			if field == "data" {
				if decoded, err := base64.StdEncoding.DecodeString(value); err == nil {
					s.Add(string(decoded))
				}
			} else {
				s.Add(base64.StdEncoding.EncodeToString([]byte(value)))
			}
		}
	}
}

// Empty reports whether there is nothing to hide.
func (s *Values) Empty() bool { return len(s.set) == 0 }

// In returns message with every recorded value replaced by Mask, the
// longest first so that a value containing another is hidden whole.
func (s *Values) In(message string) string {
	values := make([]string, 0, len(s.set))
	for v := range s.set {
		values = append(values, v)
	}
	sort.Slice(values, func(i, j int) bool {
		if len(values[i]) != len(values[j]) {
			return len(values[i]) > len(values[j])
		}
		return values[i] < values[j]
	})
	for _, v := range values {
		message = strings.ReplaceAll(message, v, Mask)
	}
	return message
}
