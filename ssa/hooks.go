package ssa

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
)

// A hook of an ordered sync is created, read until it ends, and deleted
// by its delete policy; it is never inventoried, diffed or pruned.

// CreateHook creates a hook and returns it as the API server has it (one
// with only a generateName gets its name from the API server). It is
// created, never applied over: an object of its name that appeared since
// the sync looked (AlreadyExists) is not taken over, and the sync looks
// again.
func (m *Manager) CreateHook(ctx context.Context, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	hook := obj.DeepCopy()
	hook.SetManagedFields(nil)
	hook.SetResourceVersion("")
	if err := m.client.Create(ctx, hook, client.FieldOwner(plumbv1.FieldManager)); err != nil {
		name := hook.GetName()
		if name == "" {
			name = hook.GetGenerateName() + "*"
		}
		return nil, fmt.Errorf("creating hook %s %s/%s: %w", hook.GetKind(), hook.GetNamespace(), name, err)
	}
	return hook, nil
}

// GetHook reads a hook whole from the API server; nil when it is gone.
func (m *Manager) GetHook(ctx context.Context, gvk schema.GroupVersionKind, namespace, name string) (*unstructured.Unstructured, error) {
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(gvk)
	err := m.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, live)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading hook %s %s/%s: %w", gvk.Kind, namespace, name, err)
	}
	return live, nil
}

// DeleteHook deletes a hook, and what it made (a Job's Pods) in the
// background; one already gone is no error.
func (m *Manager) DeleteHook(ctx context.Context, gvk schema.GroupVersionKind, namespace, name string) error {
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(gvk)
	obj.SetNamespace(namespace)
	obj.SetName(name)
	err := m.client.Delete(ctx, obj, client.PropagationPolicy(metav1.DeletePropagationBackground))
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting hook %s %s/%s: %w", gvk.Kind, namespace, name, err)
	}
	return nil
}
