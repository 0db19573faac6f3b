package compact

import (
	"encoding/json"
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

const liveJSON = `{"apiVersion":"apps/v1","kind":"Deployment",
 "metadata":{"name":"web","namespace":"shop","resourceVersion":"7",
  "annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{\"big\":true}","team":"a"},
  "managedFields":[
   {"manager":"plumb","operation":"Apply","apiVersion":"apps/v1","time":"2026-12-01T05:30:00Z","fieldsType":"FieldsV1",
    "fieldsV1":{"f:spec":{"f:replicas":{}}}},
   {"manager":"kube-controller-manager","operation":"Update","apiVersion":"apps/v1","time":"2026-12-01T05:31:00Z","fieldsType":"FieldsV1",
    "fieldsV1":{"f:status":{"f:replicas":{}}},"subresource":"status"}]},
 "spec":{"replicas":2},
 "status":{"replicas":2}}`

func decode(t *testing.T) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON([]byte(liveJSON)); err != nil {
		t.Fatal(err)
	}
	return u
}

func TestTrimKeepsWhatATickReadsAndDropsTheRest(t *testing.T) {
	full := decode(t)
	trimmed := decode(t)
	Trim(trimmed)

	if got, want := ManagedFields(trimmed), full.GetManagedFields(); !reflect.DeepEqual(got, want) {
		t.Errorf("managedFields of the trimmed object:\n%+v\nwant\n%+v", got, want)
	}
	if len(trimmed.GetManagedFields()) != 0 {
		t.Errorf("the trimmed object still has decoded managedFields: %v", trimmed.GetManagedFields())
	}
	if _, ok := trimmed.Object["status"]; ok {
		t.Error("the trimmed object kept its status")
	}
	if got := trimmed.GetAnnotations(); !reflect.DeepEqual(got, map[string]string{"team": "a"}) {
		t.Errorf("annotations = %v, want only team=a (no last-applied copy)", got)
	}
	if !reflect.DeepEqual(trimmed.Object["spec"], full.Object["spec"]) || trimmed.GetResourceVersion() != "7" {
		t.Errorf("spec or resourceVersion changed: %v %q", trimmed.Object["spec"], trimmed.GetResourceVersion())
	}

	before, _ := json.Marshal(trimmed.Object)
	Trim(trimmed)
	if after, _ := json.Marshal(trimmed.Object); string(after) != string(before) {
		t.Errorf("trimming twice changed the object:\n%s\n%s", before, after)
	}
}

func TestManagedFieldsOfAnObjectNotTrimmed(t *testing.T) {
	full := decode(t)
	got := ManagedFields(full)
	if len(got) != 2 || got[0].Manager != "plumb" || got[1].Subresource != "status" ||
		string(got[0].FieldsV1.Raw) != `{"f:spec":{"f:replicas":{}}}` {
		t.Errorf("managedFields = %+v", got)
	}
	empty := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "x"}}}
	Trim(empty)
	if got := ManagedFields(empty); len(got) != 0 {
		t.Errorf("an object without managedFields has %v", got)
	}
}

func TestTransformPassesOtherTypes(t *testing.T) {
	other := &metav1.PartialObjectMetadata{}
	if got, err := Transform(other); err != nil || got != other {
		t.Errorf("Transform(%T) = %v, %v", other, got, err)
	}
	u := decode(t)
	if _, err := Transform(u); err != nil || u.Object["status"] != nil {
		t.Errorf("Transform did not trim: %v", err)
	}
}
