package source

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/plumb-dev/plumb/internal/source/manifest"
)

// TestAnEncodedObjectDecodesAsRenderedWithEveryType: what a tick decodes
// must be the rendered object, value for value and type for type (its
// content hash depends on both), and each decode a copy of its own.
func TestAnEncodedObjectDecodesAsRenderedWithEveryType(t *testing.T) {
	rendered := map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": "web", "namespace": "shop", "labels": map[string]any{"app": "web"}},
		"spec": map[string]any{
			"replicas": int64(2), "ratio": 1.0, "half": 0.5, "paused": false, "note": nil,
			"list":  []any{"a", int64(1), map[string]any{"k": "v"}, []any{}},
			"empty": map[string]any{}, "text": "ünïcode ✓",
		},
	}
	o, err := encode(manifest.Object{Unstructured: &unstructured.Unstructured{Object: rendered}, Source: manifest.Source{File: "deploy/web.yaml", Line: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if o.GroupVersionKind() != (schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}) || o.GetKind() != "Deployment" ||
		o.GetNamespace() != "shop" || o.GetName() != "web" || o.Source.File != "deploy/web.yaml" {
		t.Errorf("identity: %v %s/%s from %v", o.GroupVersionKind(), o.GetNamespace(), o.GetName(), o.Source)
	}
	first, err := o.Decode()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(rendered, first.Object); diff != "" {
		t.Errorf("decoded (-rendered +decoded):\n%s", diff)
	}
	first.Object["spec"].(map[string]any)["replicas"] = int64(9)
	second, err := o.Decode()
	if err != nil {
		t.Fatal(err)
	}
	if got := second.Object["spec"].(map[string]any)["replicas"]; got != int64(2) {
		t.Errorf("a change to one decoded copy shows in the next: replicas %v", got)
	}
}
