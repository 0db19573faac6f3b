package chart_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// testClients talk to the package's control plane as its admin.
type testClients struct {
	dyn    dynamic.Interface
	kube   kubernetes.Interface
	mapper meta.ResettableRESTMapper
}

func newTestClientsFor(cfg *rest.Config) (*testClients, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	disco, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &testClients{dyn: dyn, kube: kube, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disco))}, nil
}

func (c *testClients) ensureNamespace(t *testing.T, name string) {
	t.Helper()
	_, err := c.kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// resource is where an object of u's kind lives.
func (c *testClients) resource(u *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := u.GroupVersionKind()
	mapping, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, fmt.Errorf("mapping %s: %w", gvk, err)
	}
	if mapping.Scope.Name() == meta.RESTScopeNameRoot {
		return c.dyn.Resource(mapping.Resource), nil
	}
	return c.dyn.Resource(mapping.Resource).Namespace(u.GetNamespace()), nil
}

// apply server-side applies u (only as a dry run when dryRun), refusing
// unknown and duplicate fields.
func (c *testClients) apply(ctx context.Context, u *unstructured.Unstructured, dryRun bool) error {
	r, err := c.resource(u)
	if err != nil {
		return err
	}
	data, err := json.Marshal(u.Object)
	if err != nil {
		return err
	}
	opts := metav1.PatchOptions{FieldManager: "chart-test", Force: ptr(true), FieldValidation: "Strict"}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	_, err = r.Patch(ctx, u.GetName(), types.ApplyPatchType, data, opts)
	return err
}

func (c *testClients) dryRun(ctx context.Context, u *unstructured.Unstructured) error {
	return c.apply(ctx, u, true)
}

// waitForKinds waits until the API server serves these kinds of group.
func (c *testClients) waitForKinds(ctx context.Context, group string, kinds ...string) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		c.mapper.Reset()
		for _, kind := range kinds {
			if _, err := c.mapper.RESTMapping(schema.GroupKind{Group: group, Kind: kind}); err != nil {
				return false, nil
			}
		}
		return true, nil
	})
}

func ptr[T any](v T) *T { return &v }

// sweepLabelled lists the namespaced objects of namespace matching
// selector, of every listable kind.
func (c *testClients) sweepLabelled(t *testing.T, namespace, selector string) []string {
	t.Helper()
	return c.list(t, namespace, selector, true)
}

// sweep lists what is left: every object of every listable kind in
// namespace (Events aside, which age out by themselves), and every
// cluster-scoped object matching selector.
func (c *testClients) sweep(t *testing.T, namespace, selector string) []string {
	t.Helper()
	return c.list(t, namespace, selector, false)
}

// list lists every listable kind: in namespace (matching selector only
// when namespacedSelector), and cluster-scoped ones matching selector.
func (c *testClients) list(t *testing.T, namespace, selector string, namespacedSelector bool) []string {
	t.Helper()
	ctx := context.Background()
	disco, err := discovery.NewDiscoveryClientForConfig(cluster.Config)
	if err != nil {
		t.Fatal(err)
	}
	lists, err := disco.ServerPreferredResources()
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, list := range lists {
		gv, _ := schema.ParseGroupVersion(list.GroupVersion)
		for _, r := range list.APIResources {
			if !slices.Contains(r.Verbs, "list") || r.Name == "events" {
				continue
			}
			resource := c.dyn.Resource(gv.WithResource(r.Name))
			var items *unstructured.UnstructuredList
			if r.Namespaced {
				opts := metav1.ListOptions{}
				if namespacedSelector {
					opts.LabelSelector = selector
				}
				items, err = resource.Namespace(namespace).List(ctx, opts)
			} else {
				items, err = resource.List(ctx, metav1.ListOptions{LabelSelector: selector})
			}
			if err != nil {
				t.Fatalf("listing %s: %v", r.Name, err)
			}
			for _, item := range items.Items {
				left = append(left, r.Name+" "+item.GetNamespace()+"/"+item.GetName())
			}
		}
	}
	return left
}
