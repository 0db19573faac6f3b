package digest

import "testing"

func sum(t *testing.T, m map[string]any, filter Filter) [32]byte {
	t.Helper()
	var e Encoder
	if err := e.Map(m, filter); err != nil {
		t.Fatal(err)
	}
	return e.Sum256()
}

func TestValuesOfDifferentTypesOrShapesEncodeApart(t *testing.T) {
	values := []map[string]any{
		{},
		{"a": nil},
		{"a": ""},
		{"a": "1"},
		{"a": int64(1)},
		{"a": 1.0},
		{"a": true},
		{"a": false},
		{"a": []any{}},
		{"a": map[string]any{}},
		{"a": []any{"1"}},
		{"a": map[string]any{"1": nil}},
		{"ab": ""},
		{"a": "b"},
		{"a": "", "b": ""},
	}
	seen := map[[32]byte]int{}
	for i, v := range values {
		s := sum(t, v, nil)
		if j, ok := seen[s]; ok {
			t.Errorf("%v and %v encode alike", values[j], v)
		}
		seen[s] = i
	}
}

func TestAFilterReplacesOrLeavesOutKeys(t *testing.T) {
	m := map[string]any{"keep": "x", "drop": "y", "swap": "z"}
	filter := func(key string, v any) (any, bool) {
		switch key {
		case "drop":
			return nil, true
		case "swap":
			return "w", false
		}
		return v, false
	}
	if got, want := sum(t, m, filter), sum(t, map[string]any{"keep": "x", "swap": "w"}, nil); got != want {
		t.Error("a filtered map must encode as the map the filter leaves")
	}
	var e Encoder
	if err := e.Value(map[string]any{"n": []any{1.5, int64(2), 3}}); err != nil {
		t.Fatal(err)
	}
	if err := e.Value(map[string]any{"bad": func() {}}); err == nil {
		t.Error("a value JSON cannot hold encodes without an error")
	}
}
