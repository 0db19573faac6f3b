package diff

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestFieldChangesCompareByMeaning(t *testing.T) {
	obj := func(m map[string]any) *unstructured.Unstructured { return &unstructured.Unstructured{Object: m} }
	container := func(image string, resources map[string]any) map[string]any {
		return map[string]any{"name": "web", "image": image, "resources": resources}
	}
	desired := obj(map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": "web", "labels": map[string]any{"app": "web"}},
		"spec": map[string]any{"replicas": int64(2), "template": map[string]any{"spec": map[string]any{
			"containers": []any{container("nginx:1.28", map[string]any{"requests": map[string]any{"cpu": "0.5", "memory": "0.5Gi"}})},
		}}},
	})
	live := obj(map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": "web", "uid": "x", "resourceVersion": "7", "labels": map[string]any{"app": "web", "extra": "kept"}},
		"spec": map[string]any{"replicas": int64(2), "progressDeadlineSeconds": int64(600), "template": map[string]any{"spec": map[string]any{
			"containers": []any{container("nginx:1.27", map[string]any{"requests": map[string]any{"cpu": "500m", "memory": "512Mi"}})},
		}}},
		"status": map[string]any{"replicas": int64(2)},
	})
	want := []Change{{Path: `.spec.template.spec.containers[name="web"].image`, Before: "nginx:1.27", After: "nginx:1.28"}}
	if diff := cmp.Diff(want, FieldChanges(desired, live)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestFieldChangesMasksSecrets(t *testing.T) {
	desired := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Secret",
		"metadata": map[string]any{"name": "s", "annotations": map[string]any{"kubectl.kubernetes.io/last-applied-configuration": `{"data":{"p":"bmV3"}}`}},
		"data":     map[string]any{"p": "bmV3"}}}
	live := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Secret",
		"metadata": map[string]any{"name": "s", "annotations": map[string]any{"kubectl.kubernetes.io/last-applied-configuration": `{"data":{"p":"b2xk"}}`}},
		"data":     map[string]any{"p": "b2xk"}}}
	for _, c := range FieldChanges(desired, live) {
		if c.Before != "*** (before)" || c.After != "*** (after)" {
			t.Errorf("%s shows %q → %q", c.Path, c.Before, c.After)
		}
	}
	if n := len(FieldChanges(desired, live)); n != 2 {
		t.Errorf("%d changes, want 2 (data and the last-applied annotation)", n)
	}
}

func TestSameMeaning(t *testing.T) {
	for _, tt := range []struct {
		a, b any
		same bool
	}{
		{"0.5Gi", "512Mi", true}, {"500m", "0.5", true}, {"1", "1000m", true}, {"1", int64(1), true},
		{int64(80), "80", true}, {"http", "http", true}, {"http", "https", false}, {int64(1), int64(2), false},
		{"1Gi", "1G", false}, {true, "true", false}, {0.25, "250m", true}, {float64(2), "2", true}, {0.5, "1", false},
	} {
		if got := sameMeaning(tt.a, tt.b); got != tt.same {
			t.Errorf("sameMeaning(%#v, %#v) = %v, want %v", tt.a, tt.b, got, tt.same)
		}
	}
}
