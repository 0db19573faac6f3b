package reconcile

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/plumb-dev/plumb/internal/source/git/gittest"
	"github.com/plumb-dev/plumb/queue"
)

// TestRequestsPerTick asserts the exact API cost of ticks on a 200-object
// App, counting every request the tick's clients make: an unchanged tick
// makes none at all (the App, its credentials and the live state come from
// caches, and an unchanged status is not written); a tick with 5 changed
// objects makes one apply each and one status write; after a restart (no
// memory) objects as the controller left them cost nothing, a changed one
// costs one dry-run and one read.
func TestRequestsPerTick(t *testing.T) {
	const objects = 200
	ctx := context.Background()
	w, repo := newRepo(t, configMaps(objects, func(int) string { return "one" }))
	app := newApp(t, repo, nil)
	key := client.ObjectKeyFromObject(app)
	h := newHarness(t)
	ready(t, h.tick(t, key, queue.WakeTimer)) // the first tick creates every object
	cached := func(h *harness, want func(i int) string) {
		t.Helper()
		// The cache keeps no data: it has caught up when it holds each
		// object at the resourceVersion of the content wanted.
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			for i := range objects {
				name := fmt.Sprintf("cm-%03d", i)
				live := &corev1.ConfigMap{}
				if err := admin(t).Get(ctx, client.ObjectKey{Namespace: app.Namespace, Name: name}, live); err != nil || live.Data["value"] != want(i) {
					return false, nil
				}
				obj, _ := h.r.Observer.Get(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, app.Namespace, name)
				if obj == nil || obj.GetResourceVersion() != live.ResourceVersion {
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			t.Fatalf("the informer cache did not catch up: %v", err)
		}
	}
	cached(h, func(int) string { return "one" })
	ready(t, h.tick(t, key, queue.WakeTimer)) // settles what the first tick's status write changed

	t.Run("an unchanged tick makes no request at all", func(t *testing.T) {
		for _, trigger := range []queue.Wake{queue.WakeTimer, queue.WakeEvent} {
			lsRemotes := gitServer.RequestCounts(repo)[gittest.RequestListRefs]
			h.counter.Reset()
			ready(t, h.tick(t, key, trigger))
			if got := h.counter.Matching(""); len(got) != 0 {
				t.Errorf("%s tick: %d API requests, want 0: %v", trigger, len(got), got)
			}
			want := map[queue.Wake]int{queue.WakeTimer: 1, queue.WakeEvent: 0}[trigger]
			if got := gitServer.RequestCounts(repo)[gittest.RequestListRefs] - lsRemotes; got != want {
				t.Errorf("%s tick: %d ls-remotes, want %d", trigger, got, want)
			}
		}
	})

	t.Run("the status is written as a heartbeat every tenth unchanged tick", func(t *testing.T) {
		writes := 0
		for range 2 * heartbeatEvery {
			h.counter.Reset()
			h.tick(t, key, queue.WakeEvent)
			writes += len(h.counter.Matching("/status"))
		}
		if writes != 2 {
			t.Errorf("%d status writes in %d unchanged ticks, want 2", writes, 2*heartbeatEvery)
		}
		// The status lags; the last success the metrics serve does not.
		written := h.tick(t, key, queue.WakeEvent).Status.LastSuccessfulTickTime
		last, ok := h.r.LastSuccess(key)
		if !ok || written == nil || !last.After(written.Time) {
			t.Errorf("LastSuccess = %v (%v) after an unwritten tick, want later than the status's %v", last, ok, written)
		}
	})

	t.Run("a tick with 5 of 200 objects changed", func(t *testing.T) {
		changed := func(i int) string {
			if i < 5 {
				return "two"
			}
			return "one"
		}
		pushed(t, w, configMaps(objects, changed))
		h.counter.Reset()
		ready(t, h.tick(t, key, queue.WakeTimer))
		got := h.counter.Matching("/namespaces/" + app.Namespace + "/configmaps/")
		if len(got) != 5 {
			t.Errorf("%d requests concerning the App's objects, want 5 (one apply each): %v", len(got), got)
		}
		for _, req := range got {
			if !strings.HasPrefix(req, "PATCH ") {
				t.Errorf("request %q is not an apply", req)
			}
		}
		if all := h.counter.Matching(""); len(all) != 6 {
			t.Errorf("%d requests in all, want the 5 applies and 1 status write: %v", len(all), all)
		}
		cached(h, changed)
		h.counter.Reset()
		ready(t, h.tick(t, key, queue.WakeTimer))
		if got := h.counter.Matching("/namespaces/" + app.Namespace + "/configmaps/"); len(got) != 0 {
			t.Errorf("the tick after the change made %d requests for its objects, want 0: %v", len(got), got)
		}
	})

	t.Run("a restarted controller asks nothing about objects as it left them", func(t *testing.T) {
		restarted := newHarness(t)
		ready(t, restarted.tick(t, key, queue.WakeTimer))
		if got := restarted.counter.Matching("/namespaces/" + app.Namespace + "/configmaps/"); len(got) != 0 {
			t.Errorf("the first tick after a restart made %d requests concerning its %d unchanged objects, want 0: %v", len(got), objects, got)
		}
		restarted.counter.Reset()
		ready(t, restarted.tick(t, key, queue.WakeTimer))
		if got := restarted.counter.Matching(""); len(got) > 1 {
			t.Errorf("the second tick after a restart made %d requests, want at most the status write: %v", len(got), got)
		}
	})

	t.Run("an object changed while the controller was down costs one dry-run and is healed", func(t *testing.T) {
		cm := &corev1.ConfigMap{}
		if err := admin(t).Get(ctx, client.ObjectKey{Namespace: app.Namespace, Name: "cm-100"}, cm); err != nil {
			t.Fatal(err)
		}
		cm.Data["value"] = "hand-edited"
		if err := admin(t).Update(ctx, cm, client.FieldOwner("kubectl-edit")); err != nil {
			t.Fatal(err)
		}
		restarted := newHarness(t) // its informers start with this tick: they list the edit
		ready(t, restarted.tick(t, key, queue.WakeTimer))
		got := restarted.counter.Matching("/namespaces/" + app.Namespace + "/configmaps/")
		var dryRuns, applies, reads []string
		for _, req := range got {
			switch {
			case strings.HasPrefix(req, "PATCH ") && strings.Contains(req, "dryRun=All"):
				dryRuns = append(dryRuns, req)
			case strings.HasPrefix(req, "PATCH "):
				applies = append(applies, req)
			case strings.HasPrefix(req, "GET "):
				reads = append(reads, req)
			}
		}
		// The cache keeps objects compacted: the drift the dry-run found
		// is described from the object read whole, once.
		if len(reads) != 1 || !strings.Contains(reads[0], "/cm-100") {
			t.Errorf("reads after a restart: %v, want exactly one, of cm-100", reads)
		}
		if len(dryRuns) != 1 || !strings.Contains(dryRuns[0], "/cm-100") {
			t.Errorf("dry-runs after a restart: %v, want exactly one, of cm-100", dryRuns)
		}
		if len(applies) != 1 || !strings.Contains(applies[0], "/cm-100") {
			t.Errorf("applies after a restart: %v, want exactly one, healing cm-100", applies)
		}
		if err := admin(t).Get(ctx, client.ObjectKey{Namespace: app.Namespace, Name: "cm-100"}, cm); err != nil {
			t.Fatal(err)
		}
		if cm.Data["value"] != "one" {
			t.Errorf("cm-100 holds %q after the tick, want it healed to %q", cm.Data["value"], "one")
		}
	})
}
