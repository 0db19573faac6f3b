// Package digest writes JSON-like values (what encoding/json decodes into
// an `any`: maps, lists, strings, numbers, booleans, null) as an
// unambiguous byte string, for stable digests of objects: each value with
// a tag for its type and its length, maps with their keys in order. It
// walks a value once, without copying it and without reflection, so that
// digesting every object of a large App stays cheap. Two values encode
// alike only when they hold the same values of the same JSON types.
package digest

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
)

// Encoder accumulates the encoding of values. The zero value is ready to
// use; Reset makes an Encoder reusable.
type Encoder struct{ buf []byte }

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

// Filter may replace, or leave out (skip true), the value of a key of a
// map written by Map.
type Filter func(key string, v any) (out any, skip bool)

// Grow makes room for n more bytes, so that encoding a value of about that
// size allocates once.
func (e *Encoder) Grow(n int) { e.buf = slices.Grow(e.buf, n) }

// Reset empties the encoder, keeping its buffer.
func (e *Encoder) Reset() { e.buf = e.buf[:0] }

// Sum256 is the SHA-256 of what was written.
func (e *Encoder) Sum256() [32]byte { return sha256.Sum256(e.buf) }

// String writes a string value.
func (e *Encoder) String(s string) {
	e.buf = append(e.buf, tagString)
	e.str(s)
}

func (e *Encoder) length(n int) {
	e.buf = binary.AppendUvarint(e.buf, uint64(n))
}

func (e *Encoder) str(s string) {
	e.length(len(s))
	e.buf = append(e.buf, s...)
}

// Map writes a map with its keys in order; each value goes through filter
// (nil: none), which may replace it or leave its key out.
func (e *Encoder) Map(m map[string]any, filter Filter) error {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	// Filter first, so that the length written counts only the keys kept
	// (values holds what the filter gave; nil without a filter).
	var values []any
	if filter != nil {
		kept := keys[:0]
		values = make([]any, 0, len(keys))
		for _, k := range keys {
			if v, skip := filter(k, m[k]); !skip {
				kept = append(kept, k)
				values = append(values, v)
			}
		}
		keys = kept
	}
	e.buf = append(e.buf, tagMap)
	e.length(len(keys))
	for i, k := range keys {
		v := m[k]
		if values != nil {
			v = values[i]
		}
		e.str(k)
		if err := e.Value(v); err != nil {
			return err
		}
	}
	return nil
}

// Value writes any JSON-like value.
func (e *Encoder) Value(v any) error {
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
		e.String(v)
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
		return e.Map(v, nil)
	case []any:
		e.buf = append(e.buf, tagList)
		e.length(len(v))
		for _, item := range v {
			if err := e.Value(item); err != nil {
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
