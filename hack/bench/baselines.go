package main

import (
	"context"
	"fmt"
	"reflect"

	fluxssa "github.com/fluxcd/pkg/ssa"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/plumb-dev/plumb/internal/source/manifest"
	"github.com/plumb-dev/plumb/internal/testenv"
)

// The baselines are what other tools do per tick, run in the bench's own
// process against the same cluster and the same objects (in a namespace of
// their own, so that their field managers do not touch plumb's objects).
// Each counts its requests client-side.

// desiredObjects parses rendered manifests as every baseline receives them,
// placed in ns.
func desiredObjects(files map[string]string, ns string) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for path, content := range files {
		objs, err := manifest.Parse(path, []byte(content))
		if err != nil {
			return nil, err
		}
		for _, o := range objs {
			u := o.Unstructured.DeepCopy()
			u.SetNamespace(ns)
			out = append(out, u)
		}
	}
	return out, nil
}

// fluxStyle is what Flux's kustomize-controller does in every reconcile:
// fluxcd/pkg/ssa's ApplyAllStaged over every object (a GET and a
// server-side dry-run of each, then an apply of those that differ).
type fluxStyle struct {
	requests *testenv.RequestLog
	manager  *fluxssa.ResourceManager
}

func newFluxStyle(cfg *rest.Config, scheme client.Options) (*fluxStyle, error) {
	log := &testenv.RequestLog{}
	c, err := client.New(log.Wrap(cfg), scheme)
	if err != nil {
		return nil, err
	}
	owner := fluxssa.Owner{Field: "bench-flux-style", Group: "bench.flux-style.dev"}
	return &fluxStyle{requests: log, manager: fluxssa.NewResourceManager(c, nil, owner)}, nil
}

// tick applies every object, as one reconcile does.
func (f *fluxStyle) tick(ctx context.Context, objects []*unstructured.Unstructured) (*fluxssa.ChangeSet, error) {
	copies := make([]*unstructured.Unstructured, len(objects))
	for i, o := range objects {
		copies[i] = o.DeepCopy()
	}
	return f.manager.ApplyAllStaged(ctx, copies, fluxssa.DefaultApplyOptions())
}

// naive is the seed's first description of Observe and Diff: a LIST of
// each kind, a GET of each object, a server-side dry-run of each object,
// and an apply of those whose dry-run differs from the live object.
type naive struct {
	requests *testenv.RequestLog
	client   client.Client
}

func newNaive(cfg *rest.Config, scheme client.Options) (*naive, error) {
	log := &testenv.RequestLog{}
	c, err := client.New(log.Wrap(cfg), scheme)
	if err != nil {
		return nil, err
	}
	return &naive{requests: log, client: c}, nil
}

// tick observes and diffs every object and applies those that differ; it
// returns how many it applied.
func (n *naive) tick(ctx context.Context, objects []*unstructured.Unstructured) (int, error) {
	kinds := map[schema.GroupVersionKind]string{}
	for _, o := range objects {
		kinds[o.GroupVersionKind()] = o.GetNamespace()
	}
	for gvk, ns := range kinds {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := n.client.List(ctx, list, client.InNamespace(ns)); err != nil {
			return 0, err
		}
	}
	applied := 0
	for _, o := range objects {
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(o.GroupVersionKind())
		if err := n.client.Get(ctx, client.ObjectKeyFromObject(o), live); client.IgnoreNotFound(err) != nil {
			return applied, err
		}
		dry := o.DeepCopy()
		if err := n.client.Patch(ctx, dry, client.Apply, client.FieldOwner("bench-naive"), client.ForceOwnership, client.DryRunAll); err != nil {
			return applied, err
		}
		if live.GetResourceVersion() != "" && reflect.DeepEqual(dry.Object["data"], live.Object["data"]) {
			continue
		}
		if err := n.client.Patch(ctx, o.DeepCopy(), client.Apply, client.FieldOwner("bench-naive"), client.ForceOwnership); err != nil {
			return applied, err
		}
		applied++
	}
	return applied, nil
}

// argoStyle keeps what Argo CD's application controller keeps: a cache of
// every object of every watched kind in the cluster (unfiltered informers),
// and diffs from it.
type argoStyle struct {
	requests *testenv.RequestLog
	dyn      dynamic.Interface
	factory  dynamicinformer.DynamicSharedInformerFactory
	stop     chan struct{}
	informer map[schema.GroupVersionResource]cache.SharedIndexInformer
	// namespaced are the informers of one namespace (watchIn), by
	// namespace and resource.
	namespaced map[string]cache.SharedIndexInformer
}

func newArgoStyle(cfg *rest.Config) (*argoStyle, error) {
	log := &testenv.RequestLog{}
	dyn, err := dynamic.NewForConfig(log.Wrap(cfg))
	if err != nil {
		return nil, err
	}
	return &argoStyle{requests: log, dyn: dyn, factory: dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0),
		stop: make(chan struct{}), informer: map[schema.GroupVersionResource]cache.SharedIndexInformer{},
		namespaced: map[string]cache.SharedIndexInformer{}}, nil
}

// watch starts caching every object of the resources, cluster-wide, and
// waits until the caches are full.
func (a *argoStyle) watch(ctx context.Context, resources ...schema.GroupVersionResource) error {
	for _, r := range resources {
		a.informer[r] = a.factory.ForResource(r).Informer()
	}
	a.factory.Start(a.stop)
	for r, synced := range a.factory.WaitForCacheSync(ctx.Done()) {
		if !synced {
			return fmt.Errorf("the cache of %s did not sync", r)
		}
	}
	return nil
}

// watchIn caches every object of a resource in one namespace, as argo_style
// would if that namespace were the cluster, and waits until the cache is
// full.
func (a *argoStyle) watchIn(ctx context.Context, namespace string, resource schema.GroupVersionResource) error {
	informer := dynamicinformer.NewFilteredDynamicInformer(a.dyn, resource, namespace, 0, cache.Indexers{}, nil).Informer()
	a.namespaced[namespace+"/"+resource.String()] = informer
	go informer.Run(a.stop)
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return fmt.Errorf("the cache of %s in %s did not sync", resource, namespace)
	}
	return nil
}

// cached is how many objects the cache of watchIn holds.
func (a *argoStyle) cached(namespace string, resource schema.GroupVersionResource) int {
	informer, ok := a.namespaced[namespace+"/"+resource.String()]
	if !ok {
		return 0
	}
	return len(informer.GetStore().ListKeys())
}

// tick diffs every object against the cache; it returns how many differ.
func (a *argoStyle) tick(resource schema.GroupVersionResource, objects []*unstructured.Unstructured) (int, error) {
	informer, ok := a.informer[resource]
	if !ok {
		return 0, fmt.Errorf("%s is not watched", resource)
	}
	differ := 0
	for _, o := range objects {
		item, exists, err := informer.GetStore().GetByKey(o.GetNamespace() + "/" + o.GetName())
		if err != nil {
			return differ, err
		}
		if !exists || !reflect.DeepEqual(item.(*unstructured.Unstructured).Object["data"], o.Object["data"]) {
			differ++
		}
	}
	return differ, nil
}

func (a *argoStyle) close() {
	close(a.stop)
	a.factory.Shutdown()
}
