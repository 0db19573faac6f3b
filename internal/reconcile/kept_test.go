package reconcile

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/queue"
)

func TestANamespaceThePruneGuardKeepsIsNamedWithWhyAndPrunedOnceAnnotated(t *testing.T) {
	ctx := context.Background()
	c := admin(t)
	nsName := fmt.Sprintf("kept-%d-%d", time.Now().UnixNano()%1e9, repos.Add(1))
	w, repo := newRepo(t, map[string]string{
		"deploy/ns.yaml": "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: " + nsName + "\n",
		"deploy/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: stays\n",
	})
	app := newApp(t, repo, nil)
	key := client.ObjectKeyFromObject(app)
	h := newHarness(t)
	ready(t, h.tick(t, key, queue.WakeTimer))
	h.recorded()

	// The Namespace leaves Git: the guard keeps it.
	pushed(t, w, map[string]string{"deploy/ns.yaml": ""})
	got := h.tick(t, key, queue.WakeTimer)
	ready(t, got)
	ns := &corev1.Namespace{}
	if err := c.Get(ctx, client.ObjectKey{Name: nsName}, ns); err != nil || ns.DeletionTimestamp != nil {
		t.Fatalf("the guarded Namespace was deleted: %v %v", err, ns.DeletionTimestamp)
	}
	if ns.Labels[plumbv1.LabelAppName] != app.Name {
		t.Errorf("the kept Namespace's labels = %v, want the App's still", ns.Labels)
	}
	wantKept := []plumbv1.KeptObject{{
		ObjectRef: plumbv1.ObjectRef{Version: "v1", Kind: "Namespace", Name: nsName},
		Reason:    "Namespace",
		Message:   "a Namespace is pruned only when annotated plumb.dev/prune: enabled (deleting it deletes everything in it)",
	}}
	if diff := cmp.Diff(wantKept, got.Status.Kept); diff != "" {
		t.Errorf("status.kept (-want +got):\n%s", diff)
	}
	if !inventoryHas(got, "Namespace", nsName) {
		t.Errorf("the kept Namespace left the inventory: %+v", got.Status.Inventory)
	}
	events := h.recorded()
	if n := countContaining(events, "Normal NotPruned", "Namespace/"+nsName, "plumb.dev/prune: enabled"); n != 1 {
		t.Errorf("NotPruned Events naming the Namespace and the annotation = %d, want 1; all: %q", n, events)
	}

	// An unchanged tick neither asks the API server about it nor says it again.
	h.counter.Reset()
	got = h.tick(t, key, queue.WakeTimer)
	ready(t, got)
	if reqs := h.counter.Matching("/namespaces/" + nsName + "?"); len(reqs) != 0 {
		t.Errorf("an unchanged tick asked about the kept Namespace: %v", reqs)
	}
	if events := h.recorded(); countContaining(events, "NotPruned") != 0 {
		t.Errorf("an unchanged tick repeated the NotPruned Event: %q", events)
	}
	if diff := cmp.Diff(wantKept, got.Status.Kept); diff != "" {
		t.Errorf("status.kept after an unchanged tick (-want +got):\n%s", diff)
	}

	// Annotated as the message says, the next tick prunes it.
	ns.Annotations = map[string]string{plumbv1.AnnotationPrune: "enabled"}
	if err := c.Update(ctx, ns); err != nil {
		t.Fatal(err)
	}
	waitCached(t, h, ns)
	got = h.tick(t, key, queue.WakeEvent)
	ready(t, got)
	if err := c.Get(ctx, client.ObjectKey{Name: nsName}, ns); err == nil && ns.DeletionTimestamp == nil {
		t.Error("the Namespace annotated plumb.dev/prune: enabled was not pruned")
	}
	if len(got.Status.Kept) != 0 || inventoryHas(got, "Namespace", nsName) {
		t.Errorf("after the prune: kept %+v, inventory %+v", got.Status.Kept, got.Status.Inventory)
	}
}

func TestAnObjectAnnotatedPruneDisabledIsKeptUntilTheAnnotationGoes(t *testing.T) {
	ctx := context.Background()
	c := admin(t)
	w, repo := newRepo(t, map[string]string{
		"deploy/cm.yaml":   "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: precious\n  annotations:\n    plumb.dev/prune: disabled\n",
		"deploy/keep.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: keep\n",
	})
	app := newApp(t, repo, nil)
	key := client.ObjectKeyFromObject(app)
	h := newHarness(t)
	ready(t, h.tick(t, key, queue.WakeTimer))
	pushed(t, w, map[string]string{"deploy/cm.yaml": ""})
	got := h.tick(t, key, queue.WakeTimer)
	ready(t, got)
	if len(got.Status.Kept) != 1 || got.Status.Kept[0].Name != "precious" || got.Status.Kept[0].Reason != "PruneDisabled" {
		t.Fatalf("status.kept = %+v, want the ConfigMap annotated disabled", got.Status.Kept)
	}
	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: app.Namespace, Name: "precious"}, cm); err != nil {
		t.Fatal(err)
	}
	delete(cm.Annotations, plumbv1.AnnotationPrune)
	if err := c.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	waitCached(t, h, cm)
	got = h.tick(t, key, queue.WakeEvent)
	ready(t, got)
	waitGone(t, c, cm)
	if len(got.Status.Kept) != 0 {
		t.Errorf("status.kept = %+v after the prune", got.Status.Kept)
	}
}

func inventoryHas(app *plumbv1.App, kind, name string) bool {
	if app.Status.Inventory == nil {
		return false
	}
	for _, ref := range app.Status.Inventory.Entries {
		if ref.Kind == kind && ref.Name == name {
			return true
		}
	}
	return false
}

// countContaining counts the strings that contain every part.
func countContaining(list []string, parts ...string) int {
	n := 0
	for _, s := range list {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(s, p)
		}
		if all {
			n++
		}
	}
	return n
}

func TestADeletedAppsKeptNamespaceLosesItsLabels(t *testing.T) {
	ctx := context.Background()
	c := admin(t)
	nsName := fmt.Sprintf("kept-%d-%d", time.Now().UnixNano()%1e9, repos.Add(1))
	_, repo := newRepo(t, map[string]string{
		"deploy/ns.yaml": "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: " + nsName + "\n",
		"deploy/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: goes\n",
	})
	app := newApp(t, repo, nil)
	key := client.ObjectKeyFromObject(app)
	h := newHarness(t)
	ready(t, h.tick(t, key, queue.WakeTimer))
	events := deleteAndFinalize(t, h, app)
	if n := countContaining(events, "Normal NotPruned", "Namespace/"+nsName, "plumb.dev/prune: enabled", "without the App's labels"); n != 1 {
		t.Errorf("NotPruned Events naming the kept Namespace = %d, want 1; all: %q", n, events)
	}
	ns := &corev1.Namespace{}
	if err := c.Get(ctx, client.ObjectKey{Name: nsName}, ns); err != nil || ns.DeletionTimestamp != nil {
		t.Fatalf("the guarded Namespace was deleted with the App: %v", err)
	}
	for _, label := range []string{plumbv1.LabelAppName, plumbv1.LabelAppNamespace, plumbv1.LabelSlot} {
		if _, claimed := ns.Labels[label]; claimed {
			t.Errorf("the kept Namespace still has label %s of the deleted App: %v", label, ns.Labels)
		}
	}
	waitGone(t, c, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: app.Namespace, Name: "goes"}})
}
