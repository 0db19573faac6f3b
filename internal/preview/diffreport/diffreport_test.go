package diffreport

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/diff"
	"github.com/plumb-dev/plumb/internal/reconcile"
)

func object(content map[string]any) *unstructured.Unstructured {
	base := map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "web", "namespace": "shop"}}
	for k, v := range content {
		base[k] = v
	}
	return &unstructured.Unstructured{Object: base}
}

func TestFields(t *testing.T) {
	for _, tc := range []struct {
		name          string
		before, after *unstructured.Unstructured
		want          []string
	}{
		{"the same", object(map[string]any{"data": map[string]any{"a": "1"}}), object(map[string]any{"data": map[string]any{"a": "1"}}), nil},
		{"a value", object(map[string]any{"data": map[string]any{"a": "1"}}), object(map[string]any{"data": map[string]any{"a": "2"}}), []string{".data.a"}},
		{"added and removed keys", object(map[string]any{"data": map[string]any{"a": "1"}}), object(map[string]any{"data": map[string]any{"b": "1"}}),
			[]string{".data.a", ".data.b"}},
		{"an item of a list of the same length", object(map[string]any{"spec": map[string]any{"ports": []any{map[string]any{"port": int64(80)}}}}),
			object(map[string]any{"spec": map[string]any{"ports": []any{map[string]any{"port": int64(81)}}}}), []string{".spec.ports[0].port"}},
		{"a list that grew is one field", object(map[string]any{"spec": map[string]any{"ports": []any{int64(80)}}}),
			object(map[string]any{"spec": map[string]any{"ports": []any{int64(80), int64(81)}}}), []string{".spec.ports"}},
		{"a key that is no identifier", object(nil), object(map[string]any{"metadata": map[string]any{"name": "web", "namespace": "shop",
			"labels": map[string]any{"app.kubernetes.io/name": "web"}}}), []string{".metadata.labels[app.kubernetes.io/name]"}},
		{"what the API server sets and plumb's bookkeeping are no change",
			object(map[string]any{"status": map[string]any{"x": int64(1)}, "metadata": map[string]any{"name": "web", "namespace": "shop", "resourceVersion": "1",
				"annotations": map[string]any{plumbv1.AnnotationContentHash: "a", plumbv1.AnnotationRevision: "r1"}}}),
			object(map[string]any{"metadata": map[string]any{"name": "web", "namespace": "shop", "resourceVersion": "2", "managedFields": []any{},
				"annotations": map[string]any{plumbv1.AnnotationContentHash: "b", plumbv1.AnnotationRevision: "r2"}}}), nil},
		{"created", nil, object(nil), []string{"."}},
		{"pruned", object(nil), nil, []string{"."}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Fields(tc.before, tc.after)); diff != "" {
				t.Errorf("Fields (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWrite(t *testing.T) {
	ref := plumbv1.ObjectRef{Version: "v1", Kind: "ConfigMap", Namespace: "shop", Name: "web"}
	p := &reconcile.Preview{Revision: "main@sha1:abc", Objects: []reconcile.PreviewObject{
		{ObjectRef: ref, Action: reconcile.PreviewDrift, Live: object(map[string]any{"data": map[string]any{"a": "2"}}),
			Next:  object(map[string]any{"data": map[string]any{"a": "1"}}),
			Drift: []diff.Change{{Path: ".data.a", Before: "1", After: "2", Manager: "kubectl-edit", Operation: "Update"}}},
		{ObjectRef: plumbv1.ObjectRef{Version: "v1", Kind: "Service", Namespace: "shop", Name: "web"}, Action: reconcile.PreviewUnchanged},
	}}
	var b strings.Builder
	if err := Write(&b, p, Options{}); err != nil {
		t.Fatal(err)
	}
	want := `! ConfigMap/shop/web (drifted by kubectl-edit; the next tick puts it back)
    .data.a: 1 → 2, by kubectl-edit (Update)
--- live
+++ main@sha1:abc
@@ -1,6 +1,6 @@
 apiVersion: v1
 data:
-  a: "2"
+  a: "1"
 kind: ConfigMap
 metadata:
   name: web
Summary: 1 drifted; 1 unchanged (main@sha1:abc)
`
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("Write (-want +got):\n%s", diff)
	}
	b.Reset()
	if err := Write(&b, p, Options{Color: true}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "\x1b[31m-  a: \"2\"\x1b[0m") || !strings.Contains(b.String(), "\x1b[32m+  a: \"1\"\x1b[0m") {
		t.Errorf("Write with colour marks no removed and added line:\n%q", b.String())
	}
	counts := CountsOf(p)
	if !counts.Differs() || counts.Drift != 1 || counts.Unchanged != 1 {
		t.Errorf("CountsOf = %+v", counts)
	}
	if got := Summary(&reconcile.Preview{Revision: "main@sha1:abc", Objects: p.Objects[1:]}); got != "No differences: 1 object matches main@sha1:abc" {
		t.Errorf("Summary of a converged App = %q", got)
	}
}

// TestNoControlCharacterReachesTheTerminal: values anyone could write (a
// drifted field, a ConfigMap's data) are shown escaped.
func TestNoControlCharacterReachesTheTerminal(t *testing.T) {
	ref := plumbv1.ObjectRef{Version: "v1", Kind: "ConfigMap", Namespace: "shop", Name: "web"}
	p := &reconcile.Preview{Revision: "main@sha1:abc", Objects: []reconcile.PreviewObject{{ObjectRef: ref, Action: reconcile.PreviewDrift,
		Live: object(map[string]any{"data": map[string]any{"a": "\x1b]52;c;ZXZpbA==\x07"}}), Next: object(map[string]any{"data": map[string]any{"a": "1"}}),
		Drift: []diff.Change{{Path: ".data.a", Before: "1", After: "\x1b]52;c;ZXZpbA==\x07", Manager: "evil\x1b[2J"}}}}}
	var b strings.Builder
	if err := Write(&b, p, Options{}); err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(b.String(), "\x1b\x07") {
		t.Errorf("a control character reached the output:\n%q", b.String())
	}
}

// The hooks the next sync runs are listed after the objects, in order.
func TestWriteListsTheHooksTheSyncRuns(t *testing.T) {
	p := &reconcile.Preview{Revision: "main@sha1:abc", Hooks: []reconcile.PreviewHook{
		{Phase: "PreSync", Wave: -1, ObjectRef: plumbv1.ObjectRef{Group: "batch", Version: "v1", Kind: "Job", Namespace: "shop"}, GenerateName: "migrate-"},
		{Phase: "PostSync", ObjectRef: plumbv1.ObjectRef{Version: "v1", Kind: "ConfigMap", Namespace: "shop", Name: "smoke"}},
	}}
	var b strings.Builder
	if err := Write(&b, p, Options{}); err != nil {
		t.Fatal(err)
	}
	want := "Hooks the next sync runs, in order:\n  PreSync  wave -1  Job.batch/shop/migrate-*\n  PostSync wave 0   ConfigMap/shop/smoke\n"
	if !strings.Contains(b.String(), want) {
		t.Errorf("Write lists the hooks as\n%s\nwant\n%s", b.String(), want)
	}
	r, err := Report("shop/web", p)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Hooks) != 2 || r.Hooks[0].GenerateName != "migrate-" || r.Hooks[1].Phase != "PostSync" {
		t.Errorf("the JSON report's hooks: %+v", r.Hooks)
	}
}

// A preview of an App that deploys into another cluster names it, in text
// and in JSON; one into plumb's own cluster does not.
func TestWriteNamesTheDestination(t *testing.T) {
	p := &reconcile.Preview{Revision: "main@sha1:abc", Destination: "cluster-b", Server: "https://b.example:6443"}
	var b strings.Builder
	if err := Write(&b, p, Options{}); err != nil {
		t.Fatal(err)
	}
	if want := "Destination: the cluster of Secret cluster-b (https://b.example:6443)\n"; !strings.HasPrefix(b.String(), want) {
		t.Errorf("Write begins\n%s\nwant\n%s", b.String(), want)
	}
	r, err := Report("shop/web", p)
	if err != nil || r.Destination != "cluster-b" || r.Server != "https://b.example:6443" {
		t.Errorf("the JSON report: %+v, %v; want the destination and its server", r, err)
	}
	b.Reset()
	if err := Write(&b, &reconcile.Preview{Revision: "main@sha1:abc"}, Options{}); err != nil || strings.Contains(b.String(), "Destination") {
		t.Errorf("a preview into plumb's own cluster: %q, %v", b.String(), err)
	}
}
