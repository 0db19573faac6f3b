package reconcile

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/informers/compact"
	"github.com/plumb-dev/plumb/internal/diff"
	"github.com/plumb-dev/plumb/internal/shard"
	"github.com/plumb-dev/plumb/queue"
)

// narrow gives h's sharded cache the objects of slots, and waits until its
// informers hold them.
func narrow(t *testing.T, h *harness, slots ...int) {
	t.Helper()
	select {
	case <-h.observer.Narrow(slots):
	case <-time.After(2 * time.Minute):
		t.Fatalf("the cache did not take slots %v over", slots)
	}
}

// nameInAnotherSlot is a name whose App in namespace ns lies in another
// slot than App ns/name.
func nameInAnotherSlot(ns, name string) string {
	for i := 0; ; i++ {
		other := fmt.Sprintf("b%d", i)
		if shard.SlotOf(ns, other) != shard.SlotOf(ns, name) {
			return other
		}
	}
}

// A sharded replica's cache holds only the objects of its slots. What it
// lacks may still exist: an object of an App of another slot, or one an
// older plumb applied without the slot label. The tick reads it from the
// API server rather than take it for absent.
func TestAShardedReplicaReadsWhatItsCacheLacks(t *testing.T) {
	ctx := context.Background()
	c := admin(t)
	shared := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: shared\n  namespace: %s\ndata:\n  owner: %s\n"
	ns := newApp(t, "unused", nil).Namespace // only for its namespace
	nameB := nameInAnotherSlot(ns, "a")
	_, repoA := newRepo(t, map[string]string{"deploy/cm.yaml": fmt.Sprintf(shared, ns, "a")})
	_, repoB := newRepo(t, map[string]string{"deploy/cm.yaml": fmt.Sprintf(shared, ns, "b"),
		"deploy/other.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: only-b\n"})
	appA := app(t, c, ns, "a", repoA)
	appB := app(t, c, ns, nameB, repoB)
	slotA, slotB := shard.SlotOf(ns, "a"), shard.SlotOf(ns, nameB)
	h := newShardedHarness(t)
	if !h.observer.Partial() {
		t.Fatal("a sharded cache does not say it is partial")
	}
	configMap := schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	sharedKey := types.NamespacedName{Namespace: ns, Name: "shared"}

	narrow(t, h, slotA)
	ready(t, h.tick(t, appA, queue.WakeTimer))
	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx, sharedKey, cm); err != nil {
		t.Fatal(err)
	}
	if got := cm.Labels[plumbv1.LabelSlot]; got != strconv.Itoa(slotA) {
		t.Fatalf("the applied object's %s label = %q, want %d", plumbv1.LabelSlot, got, slotA)
	}
	waitCached(t, h, cm)

	t.Run("an App of another slot does not take an object it cannot see in its cache", func(t *testing.T) {
		narrow(t, h, slotB) // this replica now holds App b's slot only: App a's objects leave its cache
		if got, err := h.observer.Get(configMap, ns, "shared"); got != nil || err != nil {
			t.Fatalf("Get of App a's object after its slot left = %v, %v; want nil", got, err)
		}
		got := h.tick(t, appB, queue.WakeTimer)
		message := failed(t, got, PhaseApply, plumbv1.ReasonApplyFailed, "Conflict")
		if !strings.Contains(message, "ConfigMap/"+ns+"/shared belongs to App "+ns+"/a") {
			t.Errorf("App %s's Ready message %q does not name the owner", nameB, message)
		}
		live := &corev1.ConfigMap{}
		if err := c.Get(ctx, sharedKey, live); err != nil {
			t.Fatal(err)
		}
		if live.Data["owner"] != "a" || live.Labels[plumbv1.LabelAppName] != "a" {
			t.Errorf("App %s changed App a's object: data %v, labels %v", nameB, live.Data, live.Labels)
		}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "only-b"}, &corev1.ConfigMap{}); err == nil {
			t.Error("an App applied part of its objects despite the conflict")
		}
	})

	t.Run("an object without the slot label is read, labelled and then cached", func(t *testing.T) {
		narrow(t, h, slotA)
		if err := c.Get(ctx, sharedKey, cm); err != nil {
			t.Fatal(err)
		}
		uid := cm.UID
		patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"`+plumbv1.LabelSlot+`":null}}}`))
		if err := c.Patch(ctx, cm, patch, client.FieldOwner("an-older-plumb")); err != nil {
			t.Fatal(err)
		}
		eventually(t, func() bool { got, _ := h.observer.Get(configMap, ns, "shared"); return got == nil })

		ready(t, h.tick(t, appA, queue.WakeTimer))
		if err := c.Get(ctx, sharedKey, cm); err != nil {
			t.Fatal(err)
		}
		if cm.UID != uid || cm.Labels[plumbv1.LabelSlot] != strconv.Itoa(slotA) || cm.Data["owner"] != "a" {
			t.Fatalf("after the tick: uid %s (was %s), labels %v, data %v; want the same object, labelled with slot %d",
				cm.UID, uid, cm.Labels, cm.Data, slotA)
		}
		waitCached(t, h, cm)
		ready(t, h.tick(t, appA, queue.WakeTimer)) // settles the status
		h.counter.Reset()
		ready(t, h.tick(t, appA, queue.WakeEvent))
		if got := h.counter.Matching(""); len(got) != 0 {
			t.Errorf("an unchanged tick of a sharded replica made %d API requests, want 0: %v", len(got), got)
		}
	})
}

// An object that a plumb from before the slot label applied (its labels,
// hash, revision and plumb's fields without the label) gains the label at
// the next tick, quietly: no drift, its revision kept, and an ordered App's
// sync not started again (its hook is not run again).
func TestAnObjectAppliedBeforeTheSlotLabelGainsItQuietly(t *testing.T) {
	ctx := context.Background()
	c := admin(t)
	w, repo := newRepo(t, map[string]string{
		"deploy/presync.yaml":  hookConfigMap("schema", "PreSync"),
		"deploy/settings.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  color: blue\n",
	})
	app := newApp(t, repo, noWait)
	key := client.ObjectKeyFromObject(app)
	slot := shard.SlotOf(key.Namespace, key.Name)
	first := newShardedHarness(t)
	narrow(t, first, slot)
	ready(t, first.tick(t, key, queue.WakeTimer))
	got := first.tick(t, key, queue.WakeTimer)
	ready(t, got)
	if got.Status.Sync == nil || got.Status.Sync.Phase != plumbv1.SyncPhaseSucceeded {
		t.Fatalf("status.sync = %+v, want the sync succeeded", got.Status.Sync)
	}
	syncStarted := got.Status.Sync.StartedAt
	settingsKey := types.NamespacedName{Namespace: key.Namespace, Name: "settings"}
	hook := &corev1.ConfigMap{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: "schema"}, hook); err != nil {
		t.Fatal(err)
	}

	// What an older plumb would have left: the same apply by field manager
	// plumb, without the slot label, and its inventory entry.
	live := &corev1.ConfigMap{}
	if err := c.Get(ctx, settingsKey, live); err != nil {
		t.Fatal(err)
	}
	revision := live.Annotations[plumbv1.AnnotationRevision]
	labels := map[string]any{}
	for k, v := range live.Labels {
		if k != plumbv1.LabelSlot {
			labels[k] = v
		}
	}
	annotations := map[string]any{}
	for k, v := range live.Annotations {
		annotations[k] = v
	}
	old := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "settings", "namespace": key.Namespace, "labels": labels, "annotations": annotations},
		"data":     map[string]any{"color": "blue"}}}
	oldHash, err := diff.Hash(old) // the content hash the older plumb computed, without the label
	if err != nil {
		t.Fatal(err)
	}
	annotations[plumbv1.AnnotationContentHash] = oldHash
	if err := c.Patch(ctx, old, client.Apply, client.FieldOwner(plumbv1.FieldManager), client.ForceOwnership); err != nil {
		t.Fatal(err)
	}
	if _, ok := old.GetLabels()[plumbv1.LabelSlot]; ok {
		t.Fatal("the older plumb's apply kept the slot label")
	}
	compacted, err := compact.Of(old)
	if err != nil {
		t.Fatal(err)
	}
	record, err := diff.RecordFromLive(annotations[plumbv1.AnnotationContentHash].(string), compacted)
	if err != nil {
		t.Fatal(err)
	}
	stored := &plumbv1.App{}
	if err := c.Get(ctx, key, stored); err != nil {
		t.Fatal(err)
	}
	for i, e := range stored.Status.Inventory.Entries {
		if e.Kind == "ConfigMap" && e.Name == "settings" {
			stored.Status.Inventory.Entries[i].AppliedFields = record.FieldsDigest()
		}
	}
	if err := c.Status().Update(ctx, stored); err != nil {
		t.Fatal(err)
	}

	// A commit outside the App's path: a new revision, the same content.
	pushed(t, w, map[string]string{"README.md": "docs\n"})
	upgraded := newShardedHarness(t) // a new process: it remembers nothing
	narrow(t, upgraded, slot)
	got = upgraded.tick(t, key, queue.WakeTimer)
	ready(t, got)
	if err := c.Get(ctx, settingsKey, live); err != nil {
		t.Fatal(err)
	}
	if live.Labels[plumbv1.LabelSlot] != strconv.Itoa(slot) || live.Annotations[plumbv1.AnnotationRevision] != revision {
		t.Errorf("after the tick: labels %v, revision %q; want the slot label %d and the revision %q kept",
			live.Labels, live.Annotations[plumbv1.AnnotationRevision], slot, revision)
	}
	if got.Status.Sync == nil || !got.Status.Sync.StartedAt.Equal(&syncStarted) {
		t.Errorf("status.sync = %+v, want the sync started at %v, not a new one", got.Status.Sync, syncStarted)
	}
	again := &corev1.ConfigMap{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: "schema"}, again); err != nil || again.UID != hook.UID {
		t.Errorf("the PreSync hook was run again (uid %s, was %s): %v", again.UID, hook.UID, err)
	}
	for _, e := range upgraded.recorded() {
		if strings.Contains(e, "Drift") || strings.Contains(e, plumbv1.ReasonApplied) {
			t.Errorf("gaining the slot label was reported as a drift or a change: %s", e)
		}
	}
	if cs := got.Status.LastChangeSet; cs != nil && cs.Revision == got.Status.LastAppliedRevision {
		t.Errorf("gaining the slot label was recorded as the revision's change set: %+v", cs)
	}
	waitCached(t, upgraded, live)
	ready(t, upgraded.tick(t, key, queue.WakeTimer))
	upgraded.counter.Reset()
	ready(t, upgraded.tick(t, key, queue.WakeEvent))
	if got := upgraded.counter.Matching(""); len(got) != 0 {
		t.Errorf("the tick after made %d API requests, want 0: %v", len(got), got)
	}
}
