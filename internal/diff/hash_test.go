package diff

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
)

func objectOf(t testing.TB, s string) *unstructured.Unstructured {
	t.Helper()
	if !strings.Contains(s, `"kind"`) {
		s = `{"apiVersion":"v1","kind":"ConfigMap",` + strings.TrimPrefix(s, "{")
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON([]byte(s)); err != nil {
		t.Fatal(err)
	}
	return u
}

func mustHash(t testing.TB, u *unstructured.Unstructured) string {
	t.Helper()
	h, err := Hash(u)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestHashLeavesOutPlumbsOwnAnnotations(t *testing.T) {
	plain := objectOf(t, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"data":{"k":"v"}}`)
	stamped := objectOf(t, fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","annotations":{%q:"main@sha1:1",%q:"x"}},"data":{"k":"v"}}`,
		plumbv1.AnnotationRevision, plumbv1.AnnotationContentHash))
	empty := objectOf(t, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","annotations":{}},"data":{"k":"v"}}`)
	null := objectOf(t, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","annotations":null},"data":{"k":"v"}}`)
	other := objectOf(t, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","annotations":{"team":"x"}},"data":{"k":"v"}}`)
	if mustHash(t, plain) != mustHash(t, stamped) {
		t.Error("the revision and content-hash annotations changed the hash")
	}
	if mustHash(t, plain) != mustHash(t, empty) {
		t.Error("an empty annotations map hashed unlike none")
	}
	// A render's empty "annotations:" is null until plumb stamps its own
	// annotations in: the stamped object must hash as the render did.
	if mustHash(t, plain) != mustHash(t, null) {
		t.Error("null annotations hashed unlike none")
	}
	if mustHash(t, plain) == mustHash(t, other) {
		t.Error("another annotation did not change the hash")
	}
	before := stamped.DeepCopy()
	mustHash(t, stamped)
	if !reflect.DeepEqual(before.Object, stamped.Object) {
		t.Error("Hash changed the object")
	}
}

// An object that gains the slot label (applied before the label existed)
// keeps its hash; its other labels still count.
func TestHashLeavesOutTheSlotLabel(t *testing.T) {
	owned := objectOf(t, `{"metadata":{"name":"a","labels":{"plumb.dev/app-name":"x"}},"data":{"k":"v"}}`)
	slotted := objectOf(t, `{"metadata":{"name":"a","labels":{"plumb.dev/app-name":"x","plumb.dev/slot":"7"}},"data":{"k":"v"}}`)
	plain := objectOf(t, `{"metadata":{"name":"a"},"data":{"k":"v"}}`)
	onlySlot := objectOf(t, `{"metadata":{"name":"a","labels":{"plumb.dev/slot":"7"}},"data":{"k":"v"}}`)
	if mustHash(t, owned) != mustHash(t, slotted) {
		t.Error("the slot label changed the hash")
	}
	if mustHash(t, plain) != mustHash(t, onlySlot) {
		t.Error("a labels map holding only the slot label hashed unlike none")
	}
	if mustHash(t, owned) == mustHash(t, plain) {
		t.Error("another label did not change the hash")
	}
	before := slotted.DeepCopy()
	mustHash(t, slotted)
	if !reflect.DeepEqual(before.Object, slotted.Object) {
		t.Error("Hash changed the object")
	}
}

// TestHashTellsContentsApart checks pairs that a careless encoding would
// confuse: key/value boundaries, types, nesting, order of list items.
func TestHashTellsContentsApart(t *testing.T) {
	pairs := [][2]string{
		{`{"data":{"ab":"c"}}`, `{"data":{"a":"bc"}}`},
		{`{"data":{"a":"1"}}`, `{"data":{"a":1}}`},
		{`{"data":{"a":1}}`, `{"data":{"a":1.5}}`},
		{`{"data":{"a":true}}`, `{"data":{"a":"true"}}`},
		{`{"data":{"a":null}}`, `{"data":{}}`},
		{`{"data":{"a":[]}}`, `{"data":{"a":{}}}`},
		{`{"data":{"a":["x","y"]}}`, `{"data":{"a":["y","x"]}}`},
		{`{"data":{"a":["x"],"b":[]}}`, `{"data":{"a":[],"b":["x"]}}`},
		{`{"data":{"a":{"b":"c"}}}`, `{"data":{"a":{"bc":""}}}`},
		{`{"data":{"a":""}}`, `{"data":{"a":null}}`},
		{`{"data":{"a":12}}`, `{"data":{"a":1,"2":""}}`},
	}
	for _, p := range pairs {
		a, b := objectOf(t, p[0]), objectOf(t, p[1])
		if mustHash(t, a) == mustHash(t, b) {
			t.Errorf("%s and %s hash alike", p[0], p[1])
		}
	}
}

func TestHashIsStableAcrossMapOrderAndCopies(t *testing.T) {
	var keys []string
	for i := range 50 {
		keys = append(keys, fmt.Sprintf(`"k%02d":"v%d"`, i, i))
	}
	obj := objectOf(t, `{"data":{`+strings.Join(keys, ",")+`}}`)
	want := mustHash(t, obj)
	for range 20 { // Go randomises map iteration: a hash that followed it would differ
		if got := mustHash(t, obj.DeepCopy()); got != want {
			t.Fatalf("hash %s, then %s", want, got)
		}
	}
}

// BenchmarkHash hashes a ConfigMap of about 400 bytes, as every tick does
// for every desired object; BenchmarkBaselineHashJSON is the way Hash
// worked before (a copy without plumb's annotations, encoding/json, sha256).
func BenchmarkHash(b *testing.B) {
	obj := benchObject(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Hash(obj); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBaselineHashJSON(b *testing.B) {
	obj := benchObject(b)
	b.ReportAllocs()
	for b.Loop() {
		c := obj.DeepCopy()
		annotations := c.GetAnnotations()
		delete(annotations, plumbv1.AnnotationRevision)
		delete(annotations, plumbv1.AnnotationContentHash)
		c.SetAnnotations(annotations)
		data, err := json.Marshal(c.Object)
		if err != nil {
			b.Fatal(err)
		}
		sum := sha256.Sum256(data)
		_ = hex.EncodeToString(sum[:])
	}
}

func benchObject(b *testing.B) *unstructured.Unstructured {
	return objectOf(b, fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm-0001","namespace":"bench",
		"labels":{"plumb.dev/app-name":"steady","plumb.dev/app-namespace":"bench"},
		"annotations":{%q:"main@sha1:0123456789012345678901234567890123456789",%q:"0123"}},
		"data":{"value":"one","payload":%q}}`, plumbv1.AnnotationRevision, plumbv1.AnnotationContentHash, strings.Repeat("x", 400)))
}

// TestHashIsPinned: the content hash is written on every object plumb
// applies and compared on every tick; a change of its encoding would make
// every object in every cluster look changed after an upgrade, and be
// applied again. The digest of this object must never change.
func TestHashIsPinned(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "a", "annotations": map[string]any{"plumb.dev/revision": "x", "team": "a"}, "labels": map[string]any{"l": "v"}},
		"data":     map[string]any{"k": "v", "n": int64(3), "f": 1.5, "b": true, "z": nil, "list": []any{"a", map[string]any{"q": "r"}}}}}
	got, err := Hash(u)
	if want := "c8c99b4222a8b18314576754805d2f8b423cca0f7ae0ea1a4b253d8a065e6017"; got != want || err != nil {
		t.Errorf("Hash = %s, %v; want %s", got, err, want)
	}
}
