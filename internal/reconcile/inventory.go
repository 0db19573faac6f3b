package reconcile

import (
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/informers/compact"
)

// objectID identifies an object across versions of its kind.
type objectID struct {
	Group, Kind, Namespace, Name string
}

// idOf is an object's ID. It reads the fields directly (every phase asks it
// of every object, every tick): apiVersion's group is what precedes "/".
func idOf(u *unstructured.Unstructured) objectID {
	apiVersion, _ := u.Object["apiVersion"].(string)
	group, _, found := strings.Cut(apiVersion, "/")
	if !found {
		group = "" // the core group: "v1"
	}
	kind, _ := u.Object["kind"].(string)
	metadata, _ := u.Object["metadata"].(map[string]any)
	namespace, _ := metadata["namespace"].(string)
	name, _ := metadata["name"].(string)
	return objectID{Group: group, Kind: kind, Namespace: namespace, Name: name}
}

// idOfLive is a cached live object's ID.
func idOfLive(o *compact.Object) objectID {
	gvk := o.GroupVersionKind()
	return objectID{Group: gvk.Group, Kind: gvk.Kind, Namespace: o.GetNamespace(), Name: o.GetName()}
}

func idOfRef(r plumbv1.ObjectRef) objectID {
	return objectID{Group: r.Group, Kind: r.Kind, Namespace: r.Namespace, Name: r.Name}
}

func (id objectID) String() string {
	return plumbv1.ObjectRef{Group: id.Group, Kind: id.Kind, Namespace: id.Namespace, Name: id.Name}.String()
}

func refOf(u *unstructured.Unstructured) plumbv1.ObjectRef {
	gvk := u.GroupVersionKind()
	return plumbv1.ObjectRef{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind, Namespace: u.GetNamespace(), Name: u.GetName()}
}

func refsOf(objs []*unstructured.Unstructured) []plumbv1.ObjectRef {
	out := make([]plumbv1.ObjectRef, 0, len(objs))
	for _, o := range objs {
		out = append(out, refOf(o))
	}
	return out
}

// mergeRefs is the union of an inventory and refs, by ID.
func mergeRefs(inv *plumbv1.Inventory, refs []plumbv1.ObjectRef) []plumbv1.ObjectRef {
	seen := map[objectID]bool{}
	var out []plumbv1.ObjectRef
	add := func(r plumbv1.ObjectRef) {
		id := idOfRef(r)
		if !seen[id] {
			seen[id] = true
			out = append(out, r)
		}
	}
	if inv != nil {
		for _, e := range inv.Entries {
			add(e.ObjectRef)
		}
	}
	for _, r := range refs {
		add(r)
	}
	return out
}

// setInventory stores refs in a stable order, each with the digest of the
// fields plumb owned after its last write of it (appliedFields; "" when
// none is known).
func setInventory(app *plumbv1.App, refs []plumbv1.ObjectRef, appliedFields func(objectID) string, wave func(objectID) int32) {
	entries := make([]plumbv1.InventoryEntry, len(refs))
	keys := make(map[objectID]string, len(refs))
	for i, ref := range refs {
		id := idOfRef(ref)
		entries[i] = plumbv1.InventoryEntry{ObjectRef: ref, AppliedFields: appliedFields(id), Wave: wave(id)}
		keys[id] = ref.Group + "/" + ref.Kind + "/" + ref.Namespace + "/" + ref.Name
	}
	sort.Slice(entries, func(i, j int) bool {
		return keys[idOfRef(entries[i].ObjectRef)] < keys[idOfRef(entries[j].ObjectRef)]
	})
	app.Status.Inventory = &plumbv1.Inventory{Entries: entries}
}

// appliedFieldsOf is the digest of the fields plumb owned after its last
// write of each object of the App, from the inventory (after a restart,
// the only memory of it).
func appliedFieldsOf(inv *plumbv1.Inventory) map[objectID]string {
	out := map[objectID]string{}
	if inv == nil {
		return out
	}
	for _, e := range inv.Entries {
		if e.AppliedFields != "" {
			out[idOfRef(e.ObjectRef)] = e.AppliedFields
		}
	}
	return out
}

func inventoryLen(app *plumbv1.App) int {
	if app.Status.Inventory == nil {
		return 0
	}
	return len(app.Status.Inventory.Entries)
}

func inInventory(app *plumbv1.App, obj *unstructured.Unstructured) bool {
	if app.Status.Inventory == nil {
		return false
	}
	id := idOf(obj)
	for _, e := range app.Status.Inventory.Entries {
		if idOfRef(e.ObjectRef) == id {
			return true
		}
	}
	return false
}
