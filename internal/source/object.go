package source

import (
	"bytes"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor/direct"

	"github.com/plumb-dev/plumb/internal/source/manifest"
)

// Object is one rendered object as a read returns it: its identity, the
// file it came from, and its content encoded, from which Decode makes a copy
// of the tick's own. Decoded into nested maps an object takes about three
// times the memory of its encoding, and the cache of renders keeps every
// object of every App's current revision: so the cache keeps them encoded.
// The encoding is CBOR (Kubernetes' own, package direct), which, unlike
// JSON, gives back every value with its type (an integer stays int64, a
// float float64), so that a decoded object hashes as the rendered one did.
// An Object is immutable and shared between the reads that hit the cache.
type Object struct {
	// Source is where the object was rendered from.
	Source manifest.Source
	gvk    schema.GroupVersionKind
	// namespace and name are as rendered (a namespace may be unset).
	namespace, name string
	data            []byte
}

// encode makes the Object of a rendered object.
func encode(o manifest.Object) (*Object, error) {
	data, err := direct.Marshal(o.Object)
	if err != nil {
		return nil, fmt.Errorf("%s: encoding the rendered object: %w", o.Source, err)
	}
	// Cloned: the encoder's buffer has room to spare, which the cache would keep.
	return &Object{Source: o.Source, gvk: o.GroupVersionKind(), namespace: o.GetNamespace(), name: o.GetName(), data: bytes.Clone(data)}, nil
}

// GroupVersionKind is the object's kind.
func (o *Object) GroupVersionKind() schema.GroupVersionKind { return o.gvk }

// GetKind is the object's kind's name.
func (o *Object) GetKind() string { return o.gvk.Kind }

// GetNamespace is the namespace the object names ("" for none).
func (o *Object) GetNamespace() string { return o.namespace }

// GetName is the object's name.
func (o *Object) GetName() string { return o.name }

// Decode returns a copy of the object, the caller's own to change.
func (o *Object) Decode() (*unstructured.Unstructured, error) {
	var content map[string]any
	if err := direct.Unmarshal(o.data, &content); err != nil {
		return nil, fmt.Errorf("%s: decoding the rendered object: %w", o.Source, err)
	}
	return &unstructured.Unstructured{Object: content}, nil
}

// encodeAll encodes the objects of a render.
func encodeAll(objects []manifest.Object) ([]*Object, error) {
	out := make([]*Object, 0, len(objects))
	for _, o := range objects {
		encoded, err := encode(o)
		if err != nil {
			return nil, err
		}
		out = append(out, encoded)
	}
	return out, nil
}
