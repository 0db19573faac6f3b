package informers

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/informers/compact"
)

// Direct serves the Observe phase without informers, for a process that
// looks once (the CLI's `plumb diff`): Get reads the object from the API
// server and shows it as a Cache would, compacted, and only when it
// carries plumb's ownership label (the label the Cache's informers select
// on), so the Diff phase judges it exactly as the controller's tick would.
// Every Get is one request: it is no cache.
type Direct struct {
	client dynamic.Interface
	mapper meta.RESTMapper
}

// directReadTimeout bounds one Get.
const directReadTimeout = 30 * time.Second

// NewDirect makes a Direct that reads with client.
func NewDirect(client dynamic.Interface, mapper meta.RESTMapper) *Direct {
	return &Direct{client: client, mapper: mapper}
}

// Partial is false: Get reads every object there is.
func (d *Direct) Partial() bool { return false }

// Ensure checks that the API server serves each kind.
func (d *Direct) Ensure(_ types.NamespacedName, gvks []schema.GroupVersionKind) error {
	for _, gvk := range gvks {
		if _, err := d.resource(gvk, ""); err != nil {
			return err
		}
	}
	return nil
}

// WaitForSync returns at once: every read is fresh.
func (d *Direct) WaitForSync(context.Context, []schema.GroupVersionKind, []string) error { return nil }

// WaitForResourceVersion returns at once: every read is fresh.
func (d *Direct) WaitForResourceVersion(context.Context, schema.GroupVersionKind, string, string) error {
	return nil
}

// Get reads one object and returns it compacted, as a Cache would hold
// it: nil when it does not exist or does not carry plumb's ownership
// label.
func (d *Direct) Get(gvk schema.GroupVersionKind, namespace, name string) (*compact.Object, error) {
	// Get has no context (a Cache's answers at once); a read is bounded.
	ctx, cancel := context.WithTimeout(context.Background(), directReadTimeout)
	defer cancel()
	u, err := d.read(ctx, gvk, namespace, name)
	if err != nil || u == nil {
		return nil, err
	}
	if _, owned := u.GetLabels()[plumbv1.LabelAppName]; !owned {
		return nil, nil
	}
	return compact.Of(u)
}

// Fetch reads one object whole (compact.Whole); nil when it does not
// exist, whatever its labels, as Cache.Fetch.
func (d *Direct) Fetch(ctx context.Context, gvk schema.GroupVersionKind, namespace, name string) (*compact.Object, error) {
	u, err := d.read(ctx, gvk, namespace, name)
	if err != nil || u == nil {
		return nil, err
	}
	return compact.Whole(u)
}

// Release does nothing: Direct keeps nothing per App.
func (d *Direct) Release(types.NamespacedName) {}

func (d *Direct) read(ctx context.Context, gvk schema.GroupVersionKind, namespace, name string) (*unstructured.Unstructured, error) {
	resource, err := d.resource(gvk, namespace)
	if err != nil {
		return nil, err
	}
	u, err := resource.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s %s: %w", gvk.Kind, name, err)
	}
	return u, nil
}

func (d *Direct) resource(gvk schema.GroupVersionKind, namespace string) (dynamic.ResourceInterface, error) {
	mapping, err := d.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrUnknownKind, gvk, err)
	}
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace && namespace != "" {
		return d.client.Resource(mapping.Resource).Namespace(namespace), nil
	}
	return d.client.Resource(mapping.Resource), nil
}
