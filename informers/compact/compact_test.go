package compact

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
)

const liveJSON = `{"apiVersion":"apps/v1","kind":"Deployment",
 "metadata":{"name":"web","namespace":"shop","resourceVersion":"7","generation":3,"uid":"u-1",
  "labels":{"plumb.dev/app-name":"shop","plumb.dev/app-namespace":"team-a","app":"web"},
  "annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{\"big\":true}","team":"a","plumb.dev/revision":"main@sha1:abc","plumb.dev/content-hash":"c0ffee"},
  "ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"owner","uid":"o-1"}],
  "managedFields":[
   {"manager":"plumb","operation":"Apply","apiVersion":"apps/v1","time":"2026-12-01T05:30:00Z","fieldsType":"FieldsV1",
    "fieldsV1":{"f:spec":{"f:replicas":{}}}},
   {"manager":"kube-controller-manager","operation":"Update","apiVersion":"apps/v1","time":"2026-12-01T05:31:00Z","fieldsType":"FieldsV1",
    "fieldsV1":{"f:status":{"f:replicas":{}}},"subresource":"status"}]},
 "spec":{"replicas":2},
 "status":{"replicas":2}}`

func decode(t *testing.T, mutate ...func(u *unstructured.Unstructured)) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON([]byte(liveJSON)); err != nil {
		t.Fatal(err)
	}
	for _, m := range mutate {
		m(u)
	}
	return u
}

func of(t *testing.T, u *unstructured.Unstructured) *Object {
	t.Helper()
	o, err := Of(u)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func TestAnObjectKeepsWhatATickReadsAndNoContent(t *testing.T) {
	o := of(t, decode(t))
	if got, want := o.GroupVersionKind(), (schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}); got != want {
		t.Errorf("kind = %v, want %v", got, want)
	}
	if o.GetName() != "web" || o.GetNamespace() != "shop" || o.GetResourceVersion() != "7" || o.GetGeneration() != 3 || o.Deleting() {
		t.Errorf("identity = %s/%s rv %s generation %d deleting %v", o.GetNamespace(), o.GetName(), o.GetResourceVersion(), o.GetGeneration(), o.Deleting())
	}
	if o.Label("plumb.dev/app-name") != "shop" || o.Label("plumb.dev/app-namespace") != "team-a" || o.Annotation("plumb.dev/revision") != "main@sha1:abc" ||
		o.Annotation("plumb.dev/content-hash") != "c0ffee" {
		t.Errorf("plumb's labels and annotations: %+v", o.own)
	}
	if o.Label("app") != "" || o.Annotation("team") != "" {
		t.Error("labels and annotations outside plumb.dev/ are kept (they are in the digests only)")
	}
	if o.Content() != nil {
		t.Error("a compacted object keeps its content")
	}
	type entry struct{ Manager, Operation, Subresource, Fields, Time string }
	var got []entry
	for _, e := range o.ManagedFields() {
		got = append(got, entry{e.Manager.Value(), e.Operation.Value(), e.Subresource.Value(), e.Fields.Value(), e.Time().UTC().Format("15:04:05")})
	}
	want := []entry{
		{"plumb", "Apply", "", `{"f:spec":{"f:replicas":{}}}`, "05:30:00"},
		{"kube-controller-manager", "Update", "status", `{"f:status":{"f:replicas":{}}}`, "05:31:00"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("managedFields (-want +got):\n%s", diff)
	}
	key, err := cache.MetaNamespaceKeyFunc(o)
	if err != nil || key != "shop/web" {
		t.Errorf("the informer's key of the object = %q, %v; want shop/web", key, err)
	}
}

func TestWholeKeepsTheContent(t *testing.T) {
	u := decode(t)
	o, err := Whole(u)
	if err != nil {
		t.Fatal(err)
	}
	if o.Content() != u || o.AppliedDigest() != of(t, decode(t)).AppliedDigest() {
		t.Error("Whole must keep the object and digest it as Of does")
	}
}

func TestObjectsOfOneShapeShareTheirFieldSets(t *testing.T) {
	a := of(t, decode(t))
	b := of(t, decode(t, func(u *unstructured.Unstructured) { u.SetName("other") }))
	if a.ManagedFields()[0].Fields != b.ManagedFields()[0].Fields {
		t.Error("two objects with the same field set hold two copies of it")
	}
}

// TestDigestsAndRelevance: the applied digest changes with what an apply
// sets and nothing else, and Relevant follows what a tick looks at.
func TestDigestsAndRelevance(t *testing.T) {
	base := of(t, decode(t))
	for _, tc := range []struct {
		name           string
		mutate         func(u *unstructured.Unstructured)
		appliedChanges bool
		relevant       bool
	}{
		{"a new resourceVersion alone", func(u *unstructured.Unstructured) {}, false, false},
		{"status", func(u *unstructured.Unstructured) { u.Object["status"] = map[string]any{"replicas": int64(3)} }, false, false},
		{"generation", func(u *unstructured.Unstructured) { u.SetGeneration(9) }, false, false},
		{"the time of a managedFields entry", func(u *unstructured.Unstructured) {
			u.SetManagedFields(nil)
			fields, _ := decode(t).Object["metadata"].(map[string]any)["managedFields"].([]any)
			fields[0].(map[string]any)["time"] = "2026-12-01T06:00:00Z"
			u.Object["metadata"].(map[string]any)["managedFields"] = fields
		}, false, false},
		{"a write through status changes its entry", func(u *unstructured.Unstructured) {
			fields := u.Object["metadata"].(map[string]any)["managedFields"].([]any)
			fields[1].(map[string]any)["fieldsV1"] = map[string]any{"f:status": map[string]any{"f:ready": map[string]any{}}}
		}, false, false},
		{"kubectl's last-applied copy", func(u *unstructured.Unstructured) {
			a := u.GetAnnotations()
			a["kubectl.kubernetes.io/last-applied-configuration"] = "{}"
			u.SetAnnotations(a)
		}, false, false},
		{"spec", func(u *unstructured.Unstructured) { u.Object["spec"] = map[string]any{"replicas": int64(3)} }, true, true},
		{"a label outside plumb's", func(u *unstructured.Unstructured) {
			l := u.GetLabels()
			l["app"] = "api"
			u.SetLabels(l)
		}, true, true},
		{"an annotation", func(u *unstructured.Unstructured) {
			a := u.GetAnnotations()
			a["team"] = "b"
			u.SetAnnotations(a)
		}, true, true},
		{"plumb's revision annotation", func(u *unstructured.Unstructured) {
			a := u.GetAnnotations()
			a["plumb.dev/revision"] = "main@sha1:def"
			u.SetAnnotations(a)
		}, true, true},
		{"plumb's content hash", func(u *unstructured.Unstructured) {
			a := u.GetAnnotations()
			a["plumb.dev/content-hash"] = "decaf"
			u.SetAnnotations(a)
		}, true, true},
		{"owners", func(u *unstructured.Unstructured) { u.SetOwnerReferences(nil) }, false, true},
		{"deletion", func(u *unstructured.Unstructured) {
			u.Object["metadata"].(map[string]any)["deletionTimestamp"] = "2026-12-01T06:00:00Z"
		}, false, true},
		{"the order of managedFields entries (by time)", func(u *unstructured.Unstructured) {
			fields := u.Object["metadata"].(map[string]any)["managedFields"].([]any)
			fields[0], fields[1] = fields[1], fields[0]
		}, false, false},
		{"who owns a field", func(u *unstructured.Unstructured) {
			fields := u.Object["metadata"].(map[string]any)["managedFields"].([]any)
			fields[0].(map[string]any)["manager"] = "kubectl-edit"
		}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := decode(t, tc.mutate)
			u.SetResourceVersion("8")
			changed := of(t, u)
			if got := changed.AppliedDigest() != base.AppliedDigest(); got != tc.appliedChanges {
				t.Errorf("applied digest changed = %v, want %v", got, tc.appliedChanges)
			}
			if got := Relevant(base, changed); got != tc.relevant {
				t.Errorf("Relevant = %v, want %v", got, tc.relevant)
			}
		})
	}
	if Relevant(base, of(t, decode(t, func(u *unstructured.Unstructured) { u.Object["spec"] = map[string]any{} }))) {
		t.Error("an update with the same resourceVersion (a resync) is relevant")
	}
}

func TestAppliedDigestMatchesADryRunsAnswer(t *testing.T) {
	live := of(t, decode(t))
	// A dry-run's answer differs in resourceVersion, times, status and
	// last-applied, never in what the apply sets when nothing changes.
	answer := decode(t, func(u *unstructured.Unstructured) {
		u.SetResourceVersion("7")
		delete(u.Object, "status")
		a := u.GetAnnotations()
		delete(a, "kubectl.kubernetes.io/last-applied-configuration")
		u.SetAnnotations(a)
	})
	got, err := AppliedDigest(answer)
	if err != nil || got != live.AppliedDigest() {
		t.Errorf("AppliedDigest of an unchanged answer differs from the live object's (%v)", err)
	}
	emptied := decode(t, func(u *unstructured.Unstructured) {
		u.SetLabels(map[string]string{})
		u.SetAnnotations(map[string]string{})
	})
	none := decode(t, func(u *unstructured.Unstructured) {
		md := u.Object["metadata"].(map[string]any)
		delete(md, "labels")
		delete(md, "annotations")
	})
	if of(t, emptied).AppliedDigest() != of(t, none).AppliedDigest() {
		t.Error("empty label and annotation maps digest unlike none")
	}
}

func TestTransformCompactsOnlyObjects(t *testing.T) {
	got, err := Transform(decode(t))
	if _, ok := got.(*Object); !ok || err != nil {
		t.Errorf("Transform of an object = %T, %v", got, err)
	}
	tombstone := cache.DeletedFinalStateUnknown{Key: "shop/web"}
	if got, _ := Transform(tombstone); got != tombstone {
		t.Errorf("Transform of a tombstone = %v", got)
	}
	if id := of(t, decode(t)).Identity(); id.GetName() != "web" || id.GetNamespace() != "shop" || id.GetKind() != "Deployment" || !strings.HasPrefix(id.GetAPIVersion(), "apps/") {
		t.Errorf("Identity = %v", id.Object)
	}
}
