package controller

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
)

// The App informer's handler tells the tick when it first sees a sync
// request (before it enqueues the App, so that the tick knows), and
// enqueues an App for what a tick must see, and for nothing else.
func TestAppEventsTellNewSyncRequestsAndEnqueue(t *testing.T) {
	var log []string
	handler := appEvents(
		func(key types.NamespacedName) { log = append(log, "enqueue "+key.Name) },
		func(key types.NamespacedName, request string) { log = append(log, "seen "+key.Name+" "+request) },
		func(key types.NamespacedName) { log = append(log, "gone "+key.Name) })
	app := func(generation int64, request string) *plumbv1.App {
		a := &plumbv1.App{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "web", Generation: generation}}
		if request != "" {
			a.Annotations = map[string]string{plumbv1.AnnotationSyncRequestedAt: request}
		}
		return a
	}
	for _, tc := range []struct {
		name  string
		event func()
		want  []string
	}{
		{"an App created with a request", func() { handler.OnAdd(app(1, "t1"), false) }, []string{"seen web t1", "enqueue web"}},
		{"an App created without one", func() { handler.OnAdd(app(1, ""), false) }, []string{"enqueue web"}},
		{"a new request", func() { handler.OnUpdate(app(1, "t1"), app(1, "t2")) }, []string{"seen web t2", "enqueue web"}},
		{"a status write", func() { handler.OnUpdate(app(1, "t2"), app(1, "t2")) }, nil},
		{"the request removed", func() { handler.OnUpdate(app(1, "t2"), app(1, "")) }, []string{"seen web ", "enqueue web"}},
		{"the same request again", func() { handler.OnUpdate(app(1, ""), app(1, "t2")) }, []string{"seen web t2", "enqueue web"}},
		{"a spec change", func() { handler.OnUpdate(app(1, "t2"), app(2, "t2")) }, []string{"enqueue web"}},
		{"a deletion", func() { handler.OnDelete(app(2, "t2")) }, []string{"gone web", "enqueue web"}},
	} {
		log = nil
		tc.event()
		if diff := cmp.Diff(tc.want, log); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
}
