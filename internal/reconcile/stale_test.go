package reconcile

import (
	"context"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/informers/compact"
	"github.com/plumb-dev/plumb/queue"
)

// staleApps is an App cache that has fallen behind: it serves the App as
// it was when frozen, until thawed.
type staleApps struct {
	client.Client
	mu     sync.Mutex
	frozen *plumbv1.App
}

func (s *staleApps) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	s.mu.Lock()
	frozen := s.frozen
	s.mu.Unlock()
	if app, ok := obj.(*plumbv1.App); ok && frozen != nil {
		frozen.DeepCopyInto(app)
		return nil
	}
	return s.Client.Get(ctx, key, obj, opts...)
}

func (s *staleApps) freeze(app *plumbv1.App) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.frozen = app.DeepCopy()
}

func TestATickAfterItsOwnStatusWriteDoesNotStartFromAStaleApp(t *testing.T) {
	ctx := context.Background()
	c := admin(t)
	cm := configMapYAML
	w, repo := newRepo(t, map[string]string{"deploy/keep.yaml": cm("keep")})
	app := newApp(t, repo, nil)
	key := client.ObjectKeyFromObject(app)
	h := newHarness(t)
	ready(t, h.tick(t, key, queue.WakeTimer))
	stale := &staleApps{Client: h.r.Client}
	h.r.Client = stale
	before := &plumbv1.App{}
	if err := c.Get(ctx, key, before); err != nil {
		t.Fatal(err)
	}
	stale.freeze(before) // the cache stops here

	// One tick creates an object; Git removes it again before the cache
	// has seen that tick's status (whose inventory lists the object).
	pushed(t, w, map[string]string{"deploy/brief.yaml": cm("brief")})
	ready(t, h.tick(t, key, queue.WakeTimer))
	pushed(t, w, map[string]string{"deploy/brief.yaml": ""})
	after := h.tick(t, key, queue.WakeTimer)
	ready(t, after)
	if err := c.Get(ctx, client.ObjectKey{Namespace: app.Namespace, Name: "brief"}, &corev1.ConfigMap{}); err == nil {
		t.Error("the object that left Git was never pruned: the tick started from the stale App")
	}
	for _, ref := range after.Status.Inventory.Entries {
		if ref.Name == "brief" {
			t.Errorf("the inventory still lists %+v", ref)
		}
	}
}

func TestAStatusWrittenOverAStaleCopyKeepsNoStaleField(t *testing.T) {
	ctx := context.Background()
	c := admin(t)
	_, repo := newRepo(t, map[string]string{"deploy/a.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n"})
	app := newApp(t, repo, nil)
	key := client.ObjectKeyFromObject(app)
	h := newHarness(t)
	ready(t, h.tick(t, key, queue.WakeTimer))
	current := &plumbv1.App{}
	if err := c.Get(ctx, key, current); err != nil {
		t.Fatal(err)
	}
	// A restarted controller whose cache still has this copy …
	restarted := newHarness(t)
	stale := &staleApps{Client: restarted.r.Client}
	stale.freeze(current)
	restarted.r.Client = stale
	// … while the App's status meanwhile says Drifted=True (as an earlier
	// tick left it).
	apimeta.SetStatusCondition(&current.Status.Conditions, metav1.Condition{Type: plumbv1.ConditionDrifted, Status: metav1.ConditionTrue,
		Reason: "DriftDetected", Message: "changed outside Git"})
	if err := c.Status().Update(ctx, current); err != nil {
		t.Fatal(err)
	}
	after := restarted.tick(t, key, queue.WakeTimer)
	ready(t, after)
	if cond := apimeta.FindStatusCondition(after.Status.Conditions, plumbv1.ConditionDrifted); cond == nil || cond.Status != metav1.ConditionFalse {
		t.Errorf("Drifted = %+v after a tick that found no drift, want False", cond)
	}
}

// laggingObserver is an informer cache that has not yet seen an object
// plumb just created, until the tick waits for it to catch up.
type laggingObserver struct {
	Observer
	mu      sync.Mutex
	hidden  string
	waited  bool
	waitsOn []string
}

func (l *laggingObserver) Get(gvk schema.GroupVersionKind, namespace, name string) (*compact.Object, error) {
	l.mu.Lock()
	hide := name == l.hidden && !l.waited
	l.mu.Unlock()
	if hide {
		return nil, nil
	}
	return l.Observer.Get(gvk, namespace, name)
}

func (l *laggingObserver) WaitForResourceVersion(ctx context.Context, gvk schema.GroupVersionKind, namespace, rv string) error {
	err := l.Observer.WaitForResourceVersion(ctx, gvk, namespace, rv)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.waited = true
	l.waitsOn = append(l.waitsOn, gvk.Kind+"@"+rv)
	return err
}

func TestALaggingCacheIsWaitedForNotTakenForADeletion(t *testing.T) {
	w, repo := newRepo(t, map[string]string{"deploy/a.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n"})
	app := newApp(t, repo, nil)
	key := client.ObjectKeyFromObject(app)
	h := newHarness(t)
	ready(t, h.tick(t, key, queue.WakeTimer))
	lagging := &laggingObserver{Observer: h.r.Observer, hidden: "fresh"}
	h.useObserver(lagging)
	pushed(t, w, map[string]string{"deploy/fresh.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: fresh\n"})
	ready(t, h.tick(t, key, queue.WakeTimer)) // creates it
	h.recorded()
	h.counter.Reset()
	ready(t, h.tick(t, key, queue.WakeEvent)) // its own add event, say
	if len(lagging.waitsOn) == 0 {
		t.Error("the tick did not wait for the cache to catch up with its last write")
	}
	for _, e := range h.recorded() {
		if strings.Contains(e, "DriftDetected") {
			t.Errorf("a lagging cache was taken for drift: %s", e)
		}
	}
	if writes := h.counter.Matching("PATCH "); len(writes) != 0 {
		t.Errorf("the tick wrote %v, want nothing", writes)
	}
}
