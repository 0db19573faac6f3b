// Package ssa is the Apply phase: it server-side applies objects with field
// manager "plumb" through github.com/fluxcd/pkg/ssa (staged: CRDs,
// ClusterRoles and Namespaces first, waited for), stamps plumb's ownership
// metadata on them, and prunes objects that left Git. It does not decide
// when to apply: the tick hands it what changed.
package ssa

import (
	"context"
	"fmt"

	"github.com/fluxcd/cli-utils/pkg/kstatus/polling"
	fluxssa "github.com/fluxcd/pkg/ssa"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/diff"
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

// Owns reports whether an object carries the owner's labels.
func (o Owner) Owns(obj *unstructured.Unstructured) bool {
	labels := obj.GetLabels()
	return labels[plumbv1.LabelAppName] == o.Name && labels[plumbv1.LabelAppNamespace] == o.Namespace
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

// Stamp sets the owner's labels on obj, the revision annotation to revision
// (the caller passes the object's current revision when its content did not
// change, so the annotation only moves with real changes), and the content
// hash annotation to the digest of the content (see diff.Hash).
func Stamp(obj *unstructured.Unstructured, owner Owner, revision string) error {
	labels := obj.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	for k, v := range owner.Labels() {
		labels[k] = v
	}
	obj.SetLabels(labels)
	hash, err := diff.Hash(obj)
	if err != nil {
		return err
	}
	annotations := obj.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	if revision != "" {
		annotations[plumbv1.AnnotationRevision] = revision
	}
	annotations[plumbv1.AnnotationContentHash] = hash
	obj.SetAnnotations(annotations)
	return nil
}

// UnservedAction marks, in Prune's change set, an object whose kind the API
// server no longer serves (its CRD was removed): nothing is left to delete.
const UnservedAction fluxssa.Action = "unserved"

// Prune deletes stale objects (the last inventory minus the desired set)
// that still carry the owner's labels. It never deletes an object annotated
// plumb.dev/prune: disabled, nor a Namespace or a CRD unless it is annotated
// plumb.dev/prune: enabled. Skipped objects are reported as skipped, objects
// of kinds the server no longer serves as UnservedAction.
func (m *Manager) Prune(ctx context.Context, stale []*unstructured.Unstructured, owner Owner) (*fluxssa.ChangeSet, error) {
	changes := fluxssa.NewChangeSet()
	var deletable []*unstructured.Unstructured
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
			return changes, fmt.Errorf("reading %s before pruning it: %w", describe(obj), err)
		}
		if err != nil {
			continue // already gone
		}
		if !owner.Owns(live) || !prunable(live) {
			changes.Add(fluxssa.ChangeSetEntry{Subject: describe(obj), Action: fluxssa.SkippedAction})
			continue
		}
		deletable = append(deletable, live)
	}
	if len(deletable) == 0 {
		return changes, nil
	}
	opts := fluxssa.DefaultDeleteOptions()
	// Checked again by the library right before each delete.
	opts.Inclusions = owner.Labels()
	opts.Exclusions = map[string]string{plumbv1.AnnotationPrune: "disabled"}
	deleted, err := m.resources.DeleteAll(ctx, deletable, opts)
	if deleted != nil {
		changes.Append(deleted.Entries)
	}
	return changes, err
}

// prunable applies the annotation rules of Prune.
func prunable(obj *unstructured.Unstructured) bool {
	switch obj.GetAnnotations()[plumbv1.AnnotationPrune] {
	case "disabled":
		return false
	case "enabled":
		return true
	}
	gvk := obj.GroupVersionKind()
	isNamespace := gvk.Group == "" && gvk.Kind == "Namespace"
	isCRD := gvk.Group == "apiextensions.k8s.io" && gvk.Kind == "CustomResourceDefinition"
	return !isNamespace && !isCRD
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
