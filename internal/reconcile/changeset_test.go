package reconcile

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	ssaerrors "github.com/fluxcd/pkg/ssa/errors"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/queue"
)

// TestTheLastChangeSetSaysWhichSyncRequestItAnswered: a tick brought by a
// sync request records the request beside what it changed; a later tick
// that changes objects on its own does not claim that request, and a tick
// that changes nothing keeps the last change set.
func TestTheLastChangeSetSaysWhichSyncRequestItAnswered(t *testing.T) {
	w, repo := newRepo(t, map[string]string{"deploy/a.yaml": configMapYAML("a")})
	app := newApp(t, repo, nil)
	key := client.ObjectKeyFromObject(app)
	h := newHarness(t)

	got := h.tick(t, key, queue.WakeTimer)
	ready(t, got)
	if cs := got.Status.LastChangeSet; cs == nil || cs.Created != 1 || len(cs.Entries) != 1 || cs.Entries[0].Object != "ConfigMap/"+key.Namespace+"/a" ||
		cs.Entries[0].Action != "created" || cs.SyncRequest != "" || cs.Revision != got.Status.LastAppliedRevision {
		t.Fatalf("the first tick's change set: %+v", cs)
	}

	// A sync request, then a tick that answers it and changes an object.
	pushed(t, w, map[string]string{"deploy/b.yaml": configMapYAML("b")})
	patch := client.MergeFrom(got.DeepCopy())
	got.Annotations = map[string]string{plumbv1.AnnotationSyncRequestedAt: "2026-12-01T10:00:00Z"}
	if err := admin(t).Patch(context.Background(), got, patch); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() bool {
		cached := &plumbv1.App{}
		return h.r.Client.Get(context.Background(), key, cached) == nil && cached.Annotations[plumbv1.AnnotationSyncRequestedAt] != ""
	})
	got = h.tick(t, key, queue.WakeEvent)
	if cs := got.Status.LastChangeSet; cs == nil || cs.SyncRequest != "2026-12-01T10:00:00Z" || cs.Created != 1 || cs.Entries[0].Object != "ConfigMap/"+key.Namespace+"/b" {
		t.Fatalf("the change set of the tick that answered the request: %+v", cs)
	}
	answered := got.Status.LastChangeSet.DeepCopy()

	// A timer tick that changes nothing keeps it.
	got = h.tick(t, key, queue.WakeTimer)
	if cs := got.Status.LastChangeSet; cs == nil || cs.SyncRequest != answered.SyncRequest || !cs.Time.Equal(&answered.Time) {
		t.Fatalf("a tick that changed nothing replaced the change set: %+v", cs)
	}

	// A timer tick that changes objects claims no request.
	pushed(t, w, map[string]string{"deploy/b.yaml": ""})
	got = h.tick(t, key, queue.WakeTimer)
	if cs := got.Status.LastChangeSet; cs == nil || cs.SyncRequest != "" || cs.Deleted != 1 {
		t.Fatalf("the change set of a timer tick that pruned: %+v", cs)
	}
}

// TestMaskSecretLeavesNoValue masks what a preview shows of a Secret,
// whatever shape its render has.
func TestMaskSecretLeavesNoValue(t *testing.T) {
	secret := func(content map[string]any) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Secret",
			"metadata": map[string]any{"name": "s", "annotations": map[string]any{lastAppliedAnnotation: `{"data":{"password":"c2VjcmV0LXZhbHVl"}}`}}}}
		for k, v := range content {
			u.Object[k] = v
		}
		return u
	}
	for name, tc := range map[string]struct{ before, after *unstructured.Unstructured }{
		"changed":             {secret(map[string]any{"data": map[string]any{"password": "c2VjcmV0LXZhbHVl"}}), secret(map[string]any{"data": map[string]any{"password": "b3RoZXItdmFsdWU="}})},
		"created":             {nil, secret(map[string]any{"stringData": map[string]any{"password": "secret-value"}})},
		"pruned":              {secret(map[string]any{"data": map[string]any{"password": "c2VjcmV0LXZhbHVl"}}), nil},
		"stringData no map":   {nil, secret(map[string]any{"stringData": "secret-value"})},
		"data of no strings":  {nil, secret(map[string]any{"data": map[string]any{"password": map[string]any{"nested": "secret-value"}}})},
		"data that is a list": {secret(map[string]any{"data": []any{"secret-value"}}), nil},
	} {
		t.Run(name, func(t *testing.T) {
			if err := maskSecret(tc.before, tc.after); err != nil {
				t.Fatal(err)
			}
			for _, u := range []*unstructured.Unstructured{tc.before, tc.after} {
				if u == nil {
					continue
				}
				text := fmt.Sprint(u.Object)
				for _, value := range []string{"secret-value", "c2VjcmV0LXZhbHVl", "other-value", "b3RoZXItdmFsdWU="} {
					if strings.Contains(text, value) {
						t.Errorf("%s is shown: %s", value, text)
					}
				}
			}
		})
	}
	obj := secret(map[string]any{"stringData": map[string]any{"password": "secret-value"}, "data": map[string]any{"token": "c2VjcmV0LXZhbHVl"}})
	if got := redactSecret(`admission webhook "x" denied: password secret-value and token c2VjcmV0LXZhbHVl, stringData as data: c2VjcmV0LXZhbHVl`, obj); strings.Contains(got, "secret-value") || strings.Contains(got, "c2VjcmV0LXZhbHVl") {
		t.Errorf("redactSecret left a value: %s", got)
	}
}

// TestRefusedByServer tells a refusal of the object (which the Apply
// phase would fail on too) from a refusal of whoever previews.
func TestRefusedByServer(t *testing.T) {
	gr := schema.GroupResource{Resource: "configmaps"}
	wrap := func(err error) error { return ssaerrors.NewDryRunErr(err, &unstructured.Unstructured{}) }
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"invalid", apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, "web", nil), true},
		{"an admission webhook's denial", apierrors.NewForbidden(gr, "web", errors.New(`admission webhook "policy" denied the request: containers cannot run as root`)), true},
		{"a ValidatingAdmissionPolicy", apierrors.NewForbidden(gr, "web", errors.New(`ValidatingAdmissionPolicy 'p' with binding 'b' denied request: replicas cannot exceed 5`)), true},
		{"RBAC", apierrors.NewForbidden(gr, "web", errors.New(`User "reader" cannot patch resource "configmaps" in API group "" in the namespace "shop"`)), false},
		{"impersonation", apierrors.NewForbidden(schema.GroupResource{Resource: "serviceaccounts"}, "deployer", errors.New(`User "viewer" cannot impersonate resource "serviceaccounts" in API group ""`)), false},
		{"a timeout", apierrors.NewTimeoutError("slow", 1), false},
		{"no dry-run at all", errors.New("connection refused"), false},
	} {
		if got := refusedByServer(wrap(tc.err)); got != tc.want {
			t.Errorf("%s (%v): refusedByServer = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
