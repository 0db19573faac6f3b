// Package ssa is the Apply phase: it server-side applies objects with field
// manager "plumb" through github.com/fluxcd/pkg/ssa (staged: CRDs,
// ClusterRoles and Namespaces first, waited for), stamps plumb's ownership
// metadata on them, and prunes objects that left Git. It does not decide
// when to apply: the tick hands it what changed.
package ssa

import (
	"context"
	"fmt"
	"time"

	"github.com/fluxcd/cli-utils/pkg/kstatus/polling"
	fluxssa "github.com/fluxcd/pkg/ssa"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Ownership metadata on every object plumb applies (see design.md).
const (
	// FieldManager is the identity the API server records in managedFields.
	FieldManager = "plumb"
	// LabelAppName and LabelAppNamespace name the App that owns an object;
	// informers filter on them and prune checks them before every delete.
	LabelAppName      = "plumb.dev/app-name"
	LabelAppNamespace = "plumb.dev/app-namespace"
	// AnnotationRevision is the source revision that last changed the
	// object's content (not rewritten when a commit leaves it unchanged).
	AnnotationRevision = "plumb.dev/revision"
	// AnnotationPrune set to "disabled" keeps an object when it leaves Git;
	// set to "enabled" it lets a Namespace or CRD be pruned.
	AnnotationPrune = "plumb.dev/prune"
	// AnnotationForce set to "enabled" lets plumb delete and recreate the
	// object when Git changes one of its immutable fields.
	AnnotationForce = "plumb.dev/force"
)

// Owner is the App that owns objects.
type Owner struct {
	Name      string
	Namespace string
}

// Labels are the ownership labels of an owner.
func (o Owner) Labels() map[string]string {
	return map[string]string{LabelAppName: o.Name, LabelAppNamespace: o.Namespace}
}

// Owns reports whether an object carries the owner's labels.
func (o Owner) Owns(obj *unstructured.Unstructured) bool {
	labels := obj.GetLabels()
	return labels[LabelAppName] == o.Name && labels[LabelAppNamespace] == o.Namespace
}

// Manager applies and prunes objects.
type Manager struct {
	client    client.Client
	resources *fluxssa.ResourceManager
}

// NewManager applies with c (whose RESTMapper also serves kstatus waits).
func NewManager(c client.Client) *Manager {
	poller := polling.NewStatusPoller(c, c.RESTMapper(), polling.Options{})
	rm := fluxssa.NewResourceManager(c, poller, fluxssa.Owner{Field: FieldManager, Group: "plumb.dev"})
	rm.SetConcurrency(4)
	return &Manager{client: c, resources: rm}
}

// Stamp sets the owner's labels on obj, and the revision annotation to
// revision (the caller passes the object's current revision when its content
// did not change, so the annotation only moves with real changes).
func Stamp(obj *unstructured.Unstructured, owner Owner, revision string) {
	labels := obj.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	for k, v := range owner.Labels() {
		labels[k] = v
	}
	obj.SetLabels(labels)
	if revision != "" {
		annotations := obj.GetAnnotations()
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations[AnnotationRevision] = revision
		obj.SetAnnotations(annotations)
	}
}

// ApplyOptions tune Apply.
type ApplyOptions struct {
	// Force recreates any object whose immutable fields changed; without it
	// only objects annotated plumb.dev/force: enabled are recreated.
	Force bool
	// WaitTimeout bounds the wait for CRDs and Namespaces to be ready.
	WaitTimeout time.Duration
}

// Apply server-side applies objects in stages and returns what changed.
// Objects the API server already agrees with are left alone (no write).
func (m *Manager) Apply(ctx context.Context, objects []*unstructured.Unstructured, opts ApplyOptions) (*fluxssa.ChangeSet, error) {
	applyOpts := fluxssa.DefaultApplyOptions()
	applyOpts.Force = opts.Force
	applyOpts.ForceSelector = map[string]string{AnnotationForce: "enabled"}
	applyOpts.WaitInterval = 500 * time.Millisecond
	if opts.WaitTimeout > 0 {
		applyOpts.WaitTimeout = opts.WaitTimeout
	}
	return m.resources.ApplyAllStaged(ctx, objects, applyOpts)
}

// Diff asks the API server (server-side dry-run) whether obj differs from
// the live object, and returns the action an apply would take.
func (m *Manager) Diff(ctx context.Context, obj *unstructured.Unstructured) (fluxssa.Action, error) {
	entry, _, _, err := m.resources.Diff(ctx, obj, fluxssa.DefaultDiffOptions())
	if err != nil {
		return fluxssa.UnknownAction, err
	}
	return entry.Action, nil
}

// Prune deletes stale objects (the last inventory minus the desired set)
// that still carry the owner's labels. It never deletes an object annotated
// plumb.dev/prune: disabled, nor a Namespace or a CRD unless it is annotated
// plumb.dev/prune: enabled. Skipped objects are reported as skipped.
func (m *Manager) Prune(ctx context.Context, stale []*unstructured.Unstructured, owner Owner) (*fluxssa.ChangeSet, error) {
	changes := fluxssa.NewChangeSet()
	var deletable []*unstructured.Unstructured
	for _, obj := range stale {
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(obj.GroupVersionKind())
		err := m.client.Get(ctx, client.ObjectKeyFromObject(obj), live)
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
	opts.Exclusions = map[string]string{AnnotationPrune: "disabled"}
	deleted, err := m.resources.DeleteAll(ctx, deletable, opts)
	if deleted != nil {
		changes.Append(deleted.Entries)
	}
	return changes, err
}

// prunable applies the annotation rules of Prune.
func prunable(obj *unstructured.Unstructured) bool {
	switch obj.GetAnnotations()[AnnotationPrune] {
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
