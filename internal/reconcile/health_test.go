package reconcile

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/informers/compact"
	"github.com/plumb-dev/plumb/internal/health"
	"github.com/plumb-dev/plumb/queue"
)

// staleObjectObserver serves one object as it was (a cache that has not seen
// plumb's write of it yet).
type staleObjectObserver struct {
	Observer
	stale *compact.Object
}

func (o staleObjectObserver) Get(gvk schema.GroupVersionKind, namespace, name string) (*compact.Object, error) {
	if gvk == o.stale.GroupVersionKind() && namespace == o.stale.GetNamespace() && name == o.stale.GetName() {
		return o.stale, nil
	}
	return o.Observer.Get(gvk, namespace, name)
}

// healthWidgetGVK is a custom kind with a status subresource whose controller
// the tests play: they write its status as an operator would.
var healthWidgetGVK = schema.GroupVersionKind{Group: "health.plumb.dev", Version: "v1", Kind: "Widget"}

const healthWidgetCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.health.plumb.dev}
spec:
  group: health.plumb.dev
  names: {kind: Widget, plural: widgets}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`

var healthWidgetOnce sync.Once

// installWidgets creates the Widget CRD once and waits until it is served.
func installWidgets(t *testing.T, h *harness) {
	t.Helper()
	healthWidgetOnce.Do(func() {
		crd := &unstructured.Unstructured{}
		if err := yamlInto(healthWidgetCRD, &crd.Object); err != nil {
			t.Fatal(err)
		}
		if err := admin(t).Create(context.Background(), crd); err != nil {
			t.Fatal(err)
		}
	})
	waitServed(t, h, healthWidgetGVK)
}

func healthWidgetYAML(size string) string {
	return "apiVersion: health.plumb.dev/v1\nkind: Widget\nmetadata:\n  name: w\nspec:\n  size: " + size + "\n"
}

// setWidgetStatus writes the Widget's status through its subresource, as
// its operator would.
func setWidgetStatus(t *testing.T, ns string, status map[string]any) {
	t.Helper()
	w := &unstructured.Unstructured{}
	w.SetGroupVersionKind(healthWidgetGVK)
	if err := admin(t).Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "w"}, w); err != nil {
		t.Fatal(err)
	}
	w.Object["status"] = status
	if err := admin(t).Status().Update(context.Background(), w); err != nil {
		t.Fatal(err)
	}
}

// getWidget reads the Widget w of ns.
func getWidget(t *testing.T, ns string) *unstructured.Unstructured {
	t.Helper()
	w := &unstructured.Unstructured{}
	w.SetGroupVersionKind(healthWidgetGVK)
	if err := admin(t).Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "w"}, w); err != nil {
		t.Fatal(err)
	}
	return w
}

// readyCondition is a condition list with one Ready condition.
func readyCondition(status, reason, message string) []any {
	return []any{map[string]any{"type": "Ready", "status": status, "reason": reason, "message": message,
		"lastTransitionTime": "2026-12-01T00:00:00Z"}}
}

func condition(t *testing.T, app *plumbv1.App, condType string) metav1.Condition {
	t.Helper()
	c := apimeta.FindStatusCondition(app.Status.Conditions, condType)
	if c == nil {
		t.Fatalf("no %s condition in %+v", condType, app.Status.Conditions)
	}
	return *c
}

// wantCondition fails unless the App's condition has this status and
// reason and its message contains each of parts.
func wantCondition(t *testing.T, app *plumbv1.App, condType string, status metav1.ConditionStatus, reason string, parts ...string) {
	t.Helper()
	c := condition(t, app, condType)
	if c.Status != status || c.Reason != reason {
		t.Fatalf("%s=%s %s (%s), want %s %s", condType, c.Status, c.Reason, c.Message, status, reason)
	}
	for _, p := range parts {
		if !strings.Contains(c.Message, p) {
			t.Errorf("%s message %q does not contain %q", condType, c.Message, p)
		}
	}
}

// waitHealthEvents waits until the informers reported n health events.
func waitHealthEvents(t *testing.T, h *harness, n int64) {
	t.Helper()
	eventually(t, func() bool { return h.healthEvents.Load() >= n })
	if got := h.healthEvents.Load(); got != n {
		t.Fatalf("%d health events, want %d", got, n)
	}
}

// onlyStatusWrite fails unless requests are exactly one write of the App's
// status.
func onlyStatusWrite(t *testing.T, requests []string, key types.NamespacedName) {
	t.Helper()
	want := "PATCH /apis/plumb.dev/v1alpha1/namespaces/" + key.Namespace + "/apps/" + key.Name + "/status?"
	if len(requests) != 1 || requests[0] != want {
		t.Fatalf("requests %q, want only %q", requests, want)
	}
}

func gitRequests(repo string) int {
	n := 0
	for _, c := range gitServer.RequestCounts(repo) {
		n += c
	}
	return n
}

func TestAStatusChangeOfAnObjectReassessesHealthWithoutGitOrAPIRequests(t *testing.T) {
	_, repo := newRepo(t, map[string]string{"deploy/widget.yaml": healthWidgetYAML("1")})
	key := client.ObjectKeyFromObject(newApp(t, repo, nil))
	h := newHarness(t)
	installWidgets(t, h)

	app := h.tick(t, key, queue.WakeTimer)
	t.Run("an object without status conventions is Current once applied: Ready", func(t *testing.T) {
		wantCondition(t, app, plumbv1.ConditionReady, metav1.ConditionTrue, plumbv1.ReasonSucceeded)
		wantCondition(t, app, plumbv1.ConditionHealthy, metav1.ConditionTrue, plumbv1.ReasonHealthy, "all 1 objects are Current")
		if got := app.Status.Health; got == nil || got.Current != 1 || got.WaitingSince != nil {
			t.Fatalf("status.health %+v, want 1 Current and no wait", got)
		}
	})

	t.Run("its operator reports it not ready: the App is Progressing, and only its status is written", func(t *testing.T) {
		enqueued := h.enqueued.Load()
		setWidgetStatus(t, key.Namespace, map[string]any{"conditions": readyCondition("False", "Warming", "warming up")})
		waitHealthEvents(t, h, 1)
		// Asked for through EnqueueAfter, so that a rollout's many status
		// writes never use up the event budget that drift ticks need.
		if got := h.enqueued.Load() - enqueued; got != 0 {
			t.Errorf("health events called Enqueue %d times, want none", got)
		}
		if after := time.Duration(h.after.Load()); after != healthEventDelay {
			t.Errorf("a health event asked for a tick in %s, want %s", after, healthEventDelay)
		}
		h.counter.Reset()
		before := gitRequests(repo)
		app := h.tick(t, key, queue.WakeEvent)
		onlyStatusWrite(t, h.counter.Take(), key)
		if got := gitRequests(repo) - before; got != 0 {
			t.Errorf("%d Git requests, want none", got)
		}
		wantCondition(t, app, plumbv1.ConditionReady, metav1.ConditionUnknown, plumbv1.ReasonProgressing,
			"waiting for 1 of 1 objects to become healthy", "Widget.health.plumb.dev/"+key.Namespace+"/w InProgress (warming up)")
		wantCondition(t, app, plumbv1.ConditionHealthy, metav1.ConditionUnknown, plumbv1.ReasonProgressing)
		wantCondition(t, app, plumbv1.ConditionReconciling, metav1.ConditionTrue, plumbv1.ReasonProgressing)
		if got := app.Status.Health; got.InProgress != 1 || got.WaitingSince == nil || len(got.Unhealthy) != 1 || got.Unhealthy[0].Message != "warming up" {
			t.Errorf("status.health %+v", got)
		}
		if after := time.Duration(h.after.Load()); after < plumbv1.DefaultHealthTimeout || after > plumbv1.DefaultHealthTimeout+time.Second {
			t.Errorf("the tick at the health timeout was asked for in %s, want %s after the wait began (rounded up to the second)", after, plumbv1.DefaultHealthTimeout)
		}
	})

	t.Run("a status change that leaves health as it is is no event; Ready again is", func(t *testing.T) {
		setWidgetStatus(t, key.Namespace, map[string]any{"note": "still warming", "conditions": readyCondition("False", "Warming", "warming up")})
		setWidgetStatus(t, key.Namespace, map[string]any{"conditions": readyCondition("True", "Warm", "ready")})
		waitHealthEvents(t, h, 2) // the note's change was handled before the second: no event
		h.counter.Reset()
		app := h.tick(t, key, queue.WakeEvent)
		onlyStatusWrite(t, h.counter.Take(), key)
		wantCondition(t, app, plumbv1.ConditionReady, metav1.ConditionTrue, plumbv1.ReasonSucceeded)
		wantCondition(t, app, plumbv1.ConditionHealthy, metav1.ConditionTrue, plumbv1.ReasonHealthy)
		if got := app.Status.Health; got.Current != 1 || got.WaitingSince != nil || len(got.Unhealthy) != 0 {
			t.Errorf("status.health %+v, want 1 Current", got)
		}
	})

	t.Run("a re-assessment is no tick; a health mark with a drift mark makes a whole one", func(t *testing.T) {
		before := getApp(t, key)
		h.r.HealthChanged(key)
		h.counter.Reset()
		outcome, err := h.r.Tick(context.Background(), key, queue.WakeEvent)
		if err != nil || outcome.Next != queue.Keep {
			t.Errorf("a re-assessment returned %+v, %v; want queue.Keep (the retry or timer stays as it was)", outcome, err)
		}
		if got := h.counter.Take(); len(got) != 0 {
			t.Errorf("requests %q: a re-assessment that changes nothing writes nothing, not even a heartbeat", got)
		}
		if after := getApp(t, key); after.ResourceVersion != before.ResourceVersion {
			t.Errorf("the App was written")
		}
		// Both marks: the drift wins, and the tick is a whole one (its
		// times move, Diff included).
		h.r.HealthChanged(key)
		h.r.ObjectChanged(key)
		started := time.Now()
		if _, err := h.r.Tick(context.Background(), key, queue.WakeEvent); err != nil {
			t.Fatal(err)
		}
		if last, ok := h.r.LastSuccess(key); !ok || last.Before(started) {
			t.Errorf("the tick with a drift mark did not run the phases (last success %s, the tick began %s)", last, started)
		}
	})
}

func TestHealthTimeoutFailureAndWaitFalse(t *testing.T) {
	w, repo := newRepo(t, map[string]string{"deploy/widget.yaml": healthWidgetYAML("1")})
	key := client.ObjectKeyFromObject(newApp(t, repo, func(a *plumbv1.App) { a.Spec.HealthTimeout = &metav1.Duration{Duration: time.Minute} }))
	h := newHarness(t)
	installWidgets(t, h)
	clock := clocktesting.NewFakePassiveClock(time.Now())
	h.r.Clock = clock
	ready(t, h.tick(t, key, queue.WakeTimer))
	setWidgetStatus(t, key.Namespace, map[string]any{"observedGeneration": int64(1), "conditions": readyCondition("True", "Warm", "ready")})
	waitHealthEvents(t, h, 1) // its message changed: "Resource is Ready"

	t.Run("an apply that changes an object starts a wait, from the apply's own answer", func(t *testing.T) {
		pushed(t, w, map[string]string{"deploy/widget.yaml": healthWidgetYAML("2")})
		// A new generation that its operator has not observed yet:
		// InProgress, whatever the cache holds of the version before — here
		// a cache that lags, and still serves the Current version before.
		before, err := h.r.Observer.Get(healthWidgetGVK, key.Namespace, "w")
		if err != nil || before == nil || before.Health().Status != health.Current {
			t.Fatalf("the cached Widget %v (%v), want it Current", before, err)
		}
		observer := h.r.Observer
		h.useObserver(staleObjectObserver{Observer: observer, stale: before})
		app := h.tick(t, key, queue.WakeTimer)
		h.useObserver(observer)
		wantCondition(t, app, plumbv1.ConditionReady, metav1.ConditionUnknown, plumbv1.ReasonProgressing, "Widget.health.plumb.dev/"+key.Namespace+"/w InProgress")
		if got := app.Status.Health.WaitingSince; got == nil || got.Time.Before(clock.Now()) || got.Time.Sub(clock.Now()) >= time.Second {
			t.Errorf("waiting since %v, want the apply's time %s rounded up to the second", got, clock.Now())
		}
		if after := time.Duration(h.after.Load()); after < time.Minute || after > time.Minute+time.Second {
			t.Errorf("the tick at the health timeout was asked for in %s, want 1m after the wait began (rounded up to the second)", after)
		}
	})

	t.Run("a heal during the wait does not restart it", func(t *testing.T) {
		began := getApp(t, key).Status.Health.WaitingSince
		clock.SetTime(clock.Now().Add(10 * time.Second))
		w := &unstructured.Unstructured{}
		w.SetGroupVersionKind(healthWidgetGVK)
		if err := admin(t).Get(context.Background(), types.NamespacedName{Namespace: key.Namespace, Name: "w"}, w); err != nil {
			t.Fatal(err)
		}
		if err := unstructured.SetNestedField(w.Object, int64(7), "spec", "size"); err != nil {
			t.Fatal(err)
		}
		if err := admin(t).Update(context.Background(), w, client.FieldOwner("kubectl-edit")); err != nil {
			t.Fatal(err)
		}
		waitCached(t, h, w)
		app := h.tick(t, key, queue.WakeEvent) // the drift event's tick: it heals
		if got, _, _ := unstructured.NestedFieldNoCopy(getWidget(t, key.Namespace).Object, "spec", "size"); got != int64(2) {
			t.Fatalf("spec.size %v after the heal, want Git's 2", got)
		}
		wantCondition(t, app, plumbv1.ConditionReady, metav1.ConditionUnknown, plumbv1.ReasonProgressing)
		if got := app.Status.Health.WaitingSince; got == nil || !got.Equal(began) {
			t.Errorf("waiting since %v after the heal, want %v (the wait goes on)", got, began)
		}
	})

	t.Run("still in progress when the timeout passes: HealthCheckFailed naming the object", func(t *testing.T) {
		clock.SetTime(clock.Now().Add(51 * time.Second))
		h.recorded()
		h.counter.Reset()
		app := h.tick(t, key, queue.WakeEvent) // the tick EnqueueAfter asked for
		onlyStatusWrite(t, h.counter.Take(), key)
		wantCondition(t, app, plumbv1.ConditionReady, metav1.ConditionFalse, plumbv1.ReasonHealthCheckFailed,
			"1 of 1 objects not healthy after 1m0s", "Widget.health.plumb.dev/"+key.Namespace+"/w InProgress")
		wantCondition(t, app, plumbv1.ConditionHealthy, metav1.ConditionFalse, plumbv1.ReasonHealthCheckFailed)
		events := strings.Join(h.recorded(), "\n")
		if !strings.Contains(events, "Warning HealthCheckFailed revision main@sha1:") || !strings.Contains(events, "/w InProgress") {
			t.Errorf("Events %q, want a HealthCheckFailed naming the Widget", events)
		}
	})

	t.Run("healthy again: Ready", func(t *testing.T) {
		setWidgetStatus(t, key.Namespace, map[string]any{"observedGeneration": getWidget(t, key.Namespace).GetGeneration(), "conditions": readyCondition("True", "Warm", "ready")})
		waitHealthEvents(t, h, 2)
		ready(t, h.tick(t, key, queue.WakeEvent))
	})

	t.Run("an object that failed fails the check at once", func(t *testing.T) {
		setWidgetStatus(t, key.Namespace, map[string]any{"observedGeneration": getWidget(t, key.Namespace).GetGeneration(),
			"conditions": []any{map[string]any{"type": "Stalled", "status": "True", "reason": "OutOfParts", "message": "no parts left",
				"lastTransitionTime": "2026-12-01T00:00:00Z"}}})
		waitHealthEvents(t, h, 3)
		app := h.tick(t, key, queue.WakeEvent)
		wantCondition(t, app, plumbv1.ConditionReady, metav1.ConditionFalse, plumbv1.ReasonHealthCheckFailed,
			"1 of 1 objects failed", "Widget.health.plumb.dev/"+key.Namespace+"/w Failed (no parts left)")
		if got := app.Status.Health; got.Failed != 1 {
			t.Errorf("status.health %+v, want 1 Failed", got)
		}
	})

	t.Run("wait false: Ready once applied, health still reported", func(t *testing.T) {
		updateApp(t, h, key, noWait)
		app := h.tick(t, key, queue.WakeEvent) // the spec changed: a whole tick
		wantCondition(t, app, plumbv1.ConditionReady, metav1.ConditionTrue, plumbv1.ReasonSucceeded)
		wantCondition(t, app, plumbv1.ConditionHealthy, metav1.ConditionFalse, plumbv1.ReasonHealthCheckFailed, "no parts left")
	})
}
