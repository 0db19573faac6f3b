// Package ssa is the Apply phase: it server-side applies objects with field
// manager "plumb" through github.com/fluxcd/pkg/ssa (staged: CRDs,
// ClusterRoles and Namespaces first, waited for), stamps plumb's ownership
// metadata on them, and prunes objects that left Git. It does not decide
// when to apply: the tick hands it what changed.
package ssa

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/fluxcd/cli-utils/pkg/kstatus/polling"
	fluxssa "github.com/fluxcd/pkg/ssa"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/informers/compact"
	"github.com/plumb-dev/plumb/internal/diff"
	"github.com/plumb-dev/plumb/internal/shard"
)

// Owner is the App that owns objects.
type Owner struct {
	Name      string
	Namespace string
}

// Labels are the ownership labels of an owner.
func (o Owner) Labels() map[string]string {
	return map[string]string{plumbv1.LabelAppName: o.Name, plumbv1.LabelAppNamespace: o.Namespace}
}

// Slot is the value of the owner's slot label (plumbv1.LabelSlot): the
// owner's shard slot, which a sharded replica's informers select on.
func (o Owner) Slot() string {
	return strconv.Itoa(shard.SlotOf(o.Namespace, o.Name))
}

// Owns reports whether an object carries the owner's labels.
func (o Owner) Owns(obj *unstructured.Unstructured) bool {
	name, _, _ := unstructured.NestedString(obj.Object, "metadata", "labels", plumbv1.LabelAppName)
	namespace, _, _ := unstructured.NestedString(obj.Object, "metadata", "labels", plumbv1.LabelAppNamespace)
	return name == o.Name && namespace == o.Namespace
}

// OwnsLive is Owns for a cached live object.
func (o Owner) OwnsLive(obj *compact.Object) bool {
	return obj.Label(plumbv1.LabelAppName) == o.Name && obj.Label(plumbv1.LabelAppNamespace) == o.Namespace
}

// Manager applies and prunes objects.
type Manager struct {
	client    client.Client
	resources *fluxssa.ResourceManager
}

// NewManager applies with c (whose RESTMapper also serves kstatus waits).
func NewManager(c client.Client) *Manager {
	poller := polling.NewStatusPoller(c, c.RESTMapper(), polling.Options{})
	rm := fluxssa.NewResourceManager(c, poller, fluxssa.Owner{Field: plumbv1.FieldManager, Group: "plumb.dev"})
	rm.SetConcurrency(4)
	return &Manager{client: c, resources: rm}
}

// StampContent sets the owner's labels (and slot label) on obj and the content hash
// annotation (the digest of the content, see diff.Hash), and returns the
// hash; SetRevision sets the revision annotation beside it. known, when not "", is the hash of
// this very content (labels included) computed before; it is not computed
// again.
func StampContent(obj *unstructured.Unstructured, owner Owner, known string) (string, error) {
	setMetadataString(obj, "labels", plumbv1.LabelAppName, owner.Name)
	setMetadataString(obj, "labels", plumbv1.LabelAppNamespace, owner.Namespace)
	setMetadataString(obj, "labels", plumbv1.LabelSlot, owner.Slot())
	hash := known
	if hash == "" {
		var err error
		if hash, err = diff.Hash(obj); err != nil {
			return "", err
		}
	}
	setAnnotation(obj, plumbv1.AnnotationContentHash, hash)
	return hash, nil
}

// SetRevision sets the revision annotation: the revision that last changed
// the object's content.
func SetRevision(obj *unstructured.Unstructured, revision string) {
	setAnnotation(obj, plumbv1.AnnotationRevision, revision)
}

func setAnnotation(obj *unstructured.Unstructured, name, value string) {
	setMetadataString(obj, "annotations", name, value)
}

// setMetadataString sets one label or annotation (field names the map)
// in place: unlike SetLabels and SetAnnotations it copies no map, which on
// every object of every tick adds up.
func setMetadataString(obj *unstructured.Unstructured, field, name, value string) {
	if obj.Object == nil {
		obj.Object = map[string]any{}
	}
	metadata, ok := obj.Object["metadata"].(map[string]any)
	if !ok {
		metadata = map[string]any{}
		obj.Object["metadata"] = metadata
	}
	values, ok := metadata[field].(map[string]any)
	if !ok {
		values = map[string]any{}
		metadata[field] = values
	}
	values[name] = value
}

// UnservedAction marks, in Prune's change set, an object whose kind the API
// server no longer serves (its CRD was removed): nothing is left to delete.
const UnservedAction fluxssa.Action = "unserved"

// KeptAction marks, in Prune's change set, an object that the prune guard
// keeps (see PruneGuard).
const KeptAction fluxssa.Action = "kept"

// Guard says why the prune guard keeps an object and what would let plumb
// prune it.
type Guard struct {
	// Reason is PruneDisabled, Namespace or CustomResourceDefinition.
	Reason string
	// Message says what would let plumb prune the object.
	Message string
}

// Kept is a stale object (as Prune was given it) that the guard kept.
type Kept struct {
	Object *unstructured.Unstructured
	Guard  Guard
}

// PruneGuard reports whether the prune guard keeps obj (a live object),
// judged by its kind and its plumb.dev/prune annotation: an object
// annotated disabled is kept, and so are a Namespace and a CRD unless
// annotated enabled (deleting them deletes what is in them, or every
// object of their kind).
func PruneGuard(obj *unstructured.Unstructured) (Guard, bool) {
	annotations := obj.GetAnnotations()
	return pruneGuard(obj.GroupVersionKind(), annotations[plumbv1.AnnotationPrune], annotations[plumbv1.AnnotationHelmResourcePolicy])
}

// PruneGuardLive is PruneGuard for a cached live object.
func PruneGuardLive(obj *compact.Object) (Guard, bool) {
	return pruneGuard(obj.GroupVersionKind(), obj.Annotation(plumbv1.AnnotationPrune), obj.Annotation(plumbv1.AnnotationHelmResourcePolicy))
}

func pruneGuard(gvk schema.GroupVersionKind, annotation, helmPolicy string) (Guard, bool) {
	if strings.EqualFold(strings.TrimSpace(helmPolicy), "keep") && annotation != "enabled" { // as Helm reads it
		return Guard{Reason: "ResourcePolicyKeep", Message: "annotated " + plumbv1.AnnotationHelmResourcePolicy + ": keep, which Helm never deletes; remove the annotation (or annotate " +
			plumbv1.AnnotationPrune + ": enabled) to let plumb prune it"}, true
	}
	switch annotation {
	case "disabled":
		return Guard{Reason: "PruneDisabled", Message: "annotated " + plumbv1.AnnotationPrune + ": disabled; remove the annotation to let plumb prune it"}, true
	case "enabled":
		return Guard{}, false
	}
	switch {
	case gvk.Group == "" && gvk.Kind == "Namespace":
		return Guard{Reason: "Namespace", Message: "a Namespace is pruned only when annotated " + plumbv1.AnnotationPrune +
			": enabled (deleting it deletes everything in it)"}, true
	case gvk.Group == "apiextensions.k8s.io" && gvk.Kind == "CustomResourceDefinition":
		return Guard{Reason: "CustomResourceDefinition", Message: "a CustomResourceDefinition is pruned only when annotated " +
			plumbv1.AnnotationPrune + ": enabled (deleting it deletes every object of its kind)"}, true
	}
	return Guard{}, false
}

// Prune deletes stale objects (the last inventory minus the desired set)
// that still carry the owner's labels and that PruneGuard does not keep.
// Kept objects are reported as KeptAction and returned with their guard;
// objects that no longer carry the owner's labels as skipped; objects of
// kinds the server no longer serves as UnservedAction.
func (m *Manager) Prune(ctx context.Context, stale []*unstructured.Unstructured, owner Owner) (*fluxssa.ChangeSet, []Kept, error) {
	changes := fluxssa.NewChangeSet()
	var deletable []*unstructured.Unstructured
	var kept []Kept
	for _, obj := range stale {
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(obj.GroupVersionKind())
		err := m.client.Get(ctx, client.ObjectKeyFromObject(obj), live)
		if meta.IsNoMatchError(err) {
			// The version recorded may be gone while the kind is served
			// under another one: read it there.
			mapping, mapErr := m.client.RESTMapper().RESTMapping(obj.GroupVersionKind().GroupKind())
			if mapErr != nil {
				changes.Add(fluxssa.ChangeSetEntry{Subject: describe(obj), Action: UnservedAction})
				continue
			}
			live.SetGroupVersionKind(mapping.GroupVersionKind)
			err = m.client.Get(ctx, client.ObjectKeyFromObject(obj), live)
		}
		if client.IgnoreNotFound(err) != nil {
			return changes, kept, fmt.Errorf("reading %s before pruning it: %w", describe(obj), err)
		}
		if err != nil {
			continue // already gone
		}
		if !owner.Owns(live) {
			changes.Add(fluxssa.ChangeSetEntry{Subject: describe(obj), Action: fluxssa.SkippedAction})
			continue
		}
		if guard, keep := PruneGuard(live); keep {
			changes.Add(fluxssa.ChangeSetEntry{Subject: describe(obj), Action: KeptAction})
			kept = append(kept, Kept{Object: obj, Guard: guard})
			continue
		}
		deletable = append(deletable, live)
	}
	if len(deletable) == 0 {
		return changes, kept, nil
	}
	opts := fluxssa.DefaultDeleteOptions()
	// Checked again by the library right before each delete.
	opts.Inclusions = owner.Labels()
	opts.Exclusions = map[string]string{plumbv1.AnnotationPrune: "disabled"}
	deleted, err := m.resources.DeleteAll(ctx, deletable, opts)
	if deleted != nil {
		changes.Append(deleted.Entries)
	}
	return changes, kept, err
}

// Disown removes the owner's labels (and the slot label) from obj (identified by its kind,
// namespace and name), with a JSON patch that tests they are still the
// owner's: no App claims the object any more. A deleted App leaves the
// objects the prune guard keeps so.
func (m *Manager) Disown(ctx context.Context, obj *unstructured.Unstructured, owner Owner) error {
	escape := func(key string) string { return strings.NewReplacer("~", "~0", "/", "~1").Replace(key) }
	var ops []map[string]string
	for _, key := range []string{plumbv1.LabelAppName, plumbv1.LabelAppNamespace} {
		ops = append(ops, map[string]string{"op": "test", "path": "/metadata/labels/" + escape(key), "value": owner.Labels()[key]})
	}
	// The slot label goes too; an object an older plumb applied has none,
	// and a remove of what is missing fails the patch: add, then remove.
	ops = append(ops, map[string]string{"op": "add", "path": "/metadata/labels/" + escape(plumbv1.LabelSlot), "value": ""})
	for _, key := range []string{plumbv1.LabelAppName, plumbv1.LabelAppNamespace, plumbv1.LabelSlot} {
		ops = append(ops, map[string]string{"op": "remove", "path": "/metadata/labels/" + escape(key)})
	}
	patch, err := json.Marshal(ops)
	if err != nil {
		return err
	}
	target := obj.DeepCopy()
	if err := m.client.Patch(ctx, target, client.RawPatch(types.JSONPatchType, patch), client.FieldOwner(plumbv1.FieldManager)); err != nil {
		return fmt.Errorf("%s: removing the App's labels: %w", describe(obj), err)
	}
	return nil
}

func describe(obj *unstructured.Unstructured) string {
	gvk := obj.GroupVersionKind()
	kind := gvk.Kind
	if gvk.Group != "" {
		kind += "." + gvk.Group
	}
	if obj.GetNamespace() == "" {
		return kind + "/" + obj.GetName()
	}
	return kind + "/" + obj.GetNamespace() + "/" + obj.GetName()
}
