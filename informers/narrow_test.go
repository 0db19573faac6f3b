package informers

import (
	"context"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/informers/compact"
)

// inSlot is owned with the slot label.
func inSlot(ns, name string, app types.NamespacedName, slot int) *corev1.ConfigMap {
	cm := owned(ns, name, app)
	cm.Labels[plumbv1.LabelSlot] = strconv.Itoa(slot)
	return cm
}

func TestNarrowKeepsTheObjectsOfTheSlotsGiven(t *testing.T) {
	ctx := context.Background()
	c := newClient(t)
	ns := namespace(t, c)
	for _, cm := range []*corev1.ConfigMap{inSlot(ns, "one", appA, 1), inSlot(ns, "two", appB, 2), owned(ns, "unlabelled", appA)} {
		if err := c.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
	}
	cache, ev := newCacheWith(t, cluster.Config, Options{Sharded: true})
	if !cache.Partial() {
		t.Error("a sharded cache is not partial")
	}
	kinds := []schema.GroupVersionKind{configMapKind}
	if err := cache.Ensure(appA, kinds); err != nil {
		t.Fatal(err)
	}
	if err := cache.WaitForSync(ctx, kinds, nil); err != nil {
		t.Fatal(err)
	}
	cached := func(name string) bool {
		t.Helper()
		got, err := cache.Get(configMapKind, ns, name)
		if err != nil {
			t.Fatal(err)
		}
		return got != nil
	}
	narrowTo := func(slots ...int) {
		t.Helper()
		select {
		case <-cache.Narrow(slots):
		case <-time.After(time.Minute):
			t.Fatalf("Narrow(%v) did not end", slots)
		}
	}
	// counts are the cache's objects in the namespace: other tests'
	// objects of these slots may be cached too.
	held := func() []string {
		var names []string
		for _, name := range []string{"one", "two", "unlabelled"} {
			if cached(name) {
				names = append(names, name)
			}
		}
		return names
	}
	if got := held(); len(got) != 0 {
		t.Fatalf("before Narrow the sharded cache holds %v, want nothing", got)
	}

	narrowTo(1)
	if got := held(); len(got) != 1 || got[0] != "one" {
		t.Fatalf("with slot 1 the cache holds %v, want [one]", got)
	}
	// The objects of a slot taken are no events: the caller enqueues the
	// slot's Apps.
	if n := ev.count(appA); n != 0 {
		t.Errorf("taking slot 1 reported App a %d times, want 0", n)
	}

	t.Run("taking a slot more keeps serving the objects held while the new informers list", func(t *testing.T) {
		synced := cache.Narrow([]int{1, 2})
		deadline := time.Now().Add(time.Minute)
		for done := false; !done; {
			select {
			case <-synced:
				done = true
			default:
				if !cached("one") {
					t.Fatal("object one was missing from the cache while it took slot 2")
				}
				if time.Now().After(deadline) {
					t.Fatal("Narrow did not end")
				}
				time.Sleep(time.Millisecond)
			}
		}
		if got := held(); len(got) != 2 || got[0] != "one" || got[1] != "two" {
			t.Fatalf("with slots 1 and 2 the cache holds %v, want [one two]", got)
		}
		if a, b := ev.count(appA), ev.count(appB); a != 0 || b != 0 {
			t.Errorf("objects held before, or of the slot taken, were reported: App a %d, App b %d times; want 0", a, b)
		}
	})

	t.Run("after the takeover, changes are events", func(t *testing.T) {
		one := &corev1.ConfigMap{}
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "one"}, one); err != nil {
			t.Fatal(err)
		}
		one.Data = map[string]string{"changed": "yes"}
		if err := c.Update(ctx, one); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the update's event", func() bool { return ev.count(appA) == 1 })
	})

	t.Run("releasing a slot drops its objects, with no event", func(t *testing.T) {
		narrowTo(2)
		if got := held(); len(got) != 1 || got[0] != "two" {
			t.Fatalf("with slot 2 the cache holds %v, want [two]", got)
		}
		if a := ev.count(appA); a != 1 {
			t.Errorf("App a reported %d times, want 1 (the update)", a)
		}
		narrowTo()
		if got := held(); len(got) != 0 {
			t.Fatalf("with no slot the cache holds %v", got)
		}
	})

	t.Run("an informer started after Narrow selects the slots held", func(t *testing.T) {
		narrowTo(2)
		secretKind := schema.GroupVersionKind{Version: "v1", Kind: "Secret"}
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s",
			Labels: map[string]string{plumbv1.LabelAppName: appB.Name, plumbv1.LabelAppNamespace: appB.Namespace, plumbv1.LabelSlot: "3"}}}
		if err := c.Create(ctx, secret); err != nil {
			t.Fatal(err)
		}
		if err := cache.Ensure(appB, []schema.GroupVersionKind{secretKind}); err != nil {
			t.Fatal(err)
		}
		if err := cache.WaitForSync(ctx, []schema.GroupVersionKind{secretKind}, nil); err != nil {
			t.Fatal(err)
		}
		if got, _ := cache.Get(secretKind, ns, "s"); got != nil {
			t.Error("an object of slot 3 is cached while the cache holds slot 2")
		}
		narrowTo(2, 3)
		if got, _ := cache.Get(secretKind, ns, "s"); got == nil {
			t.Error("the object of slot 3 is not cached after taking slot 3")
		}
		cache.Release(appB)
	})
}

// A Narrow that a later one overtakes before its informers took over ends
// only when the later one's have: until then, the cache serves neither's
// slots, and the Apps of its slots must not be enqueued.
func TestANarrowOvertakenEndsWithTheLaterOne(t *testing.T) {
	ctx := context.Background()
	c := newClient(t)
	ns := namespace(t, c)
	for _, cm := range []*corev1.ConfigMap{inSlot(ns, "four", appA, 4), inSlot(ns, "five", appB, 5)} {
		if err := c.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
	}
	cache, ev := newCacheWith(t, cluster.Config, Options{Sharded: true})
	if err := cache.Ensure(appA, []schema.GroupVersionKind{configMapKind}); err != nil {
		t.Fatal(err)
	}
	first := cache.Narrow([]int{4})
	second := cache.Narrow([]int{4, 5})
	for i, done := range []<-chan struct{}{first, second} {
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Fatalf("Narrow %d did not end", i+1)
		}
		for _, name := range []string{"four", "five"} {
			if got, err := cache.Get(configMapKind, ns, name); got == nil || err != nil {
				t.Errorf("after Narrow %d ended, %s is not cached (%v)", i+1, name, err)
			}
		}
	}
	if a, b := ev.count(appA), ev.count(appB); a != 0 || b != 0 {
		t.Errorf("objects of slots taken were reported: App a %d, App b %d times; want 0", a, b)
	}
}

func TestNarrowDoesNothingToAnUnshardedCache(t *testing.T) {
	cache, _ := newCache(t, cluster.Config)
	if cache.Partial() {
		t.Error("an unsharded cache says it is partial")
	}
	select {
	case <-cache.Narrow([]int{1}):
	default:
		t.Error("Narrow of an unsharded cache did not end at once")
	}
}

// A takeover reports, as events, the objects the replaced informer holds
// that its successor selects but lacks: deleted before the successor
// listed, while the replaced one had not handled the deletion yet (that
// event would be lost with it). Objects the successor does not select, or
// holds, are no events.
func TestATakeoverReportsWhatVanishedMeanwhile(t *testing.T) {
	store := func(objects ...*corev1.ConfigMap) cache.SharedIndexInformer {
		t.Helper()
		informer := cache.NewSharedIndexInformer(&cache.ListWatch{}, &unstructured.Unstructured{}, 0, cache.Indexers{})
		for _, cm := range objects {
			u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(cm)
			if err != nil {
				t.Fatal(err)
			}
			o, err := compact.Of(&unstructured.Unstructured{Object: u})
			if err != nil {
				t.Fatal(err)
			}
			if err := informer.GetStore().Add(o); err != nil {
				t.Fatal(err)
			}
		}
		return informer
	}
	kept, gone, released := inSlot("ns", "kept", appA, 1), inSlot("ns", "gone", appA, 1), inSlot("ns", "released", appB, 2)
	old := &typeInformer{informers: map[string]cache.SharedIndexInformer{"": store(kept, gone, released)}, selection: map[string]bool{"1": true, "2": true}}
	next := &typeInformer{informers: map[string]cache.SharedIndexInformer{"": store(kept)}, selection: map[string]bool{"1": true}}
	var names []string
	for _, obj := range vanished(old, next) {
		names = append(names, obj.(*compact.Object).GetName())
	}
	if len(names) != 1 || names[0] != "gone" {
		t.Errorf("vanished = %v, want [gone]: deleted meanwhile, of a slot both select", names)
	}
}
