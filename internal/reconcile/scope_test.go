package reconcile

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/queue"
)

var clusterScopedCRD = crdYAML("scope.plumb.dev", "Gadget", "gadgets", "Cluster")

func TestAClusterScopedCustomResourceWhoseCRDComesAlongIsNeverPruned(t *testing.T) {
	_, repo := newRepo(t, map[string]string{
		"deploy/crd.yaml":    clusterScopedCRD,
		"deploy/gadget.yaml": "apiVersion: scope.plumb.dev/v1\nkind: Gadget\nmetadata:\n  name: big-one\nsize: 3\n",
	})
	app := newApp(t, repo, nil)
	key := client.ObjectKeyFromObject(app)
	h := newHarness(t)
	for i := range 3 {
		got := h.tick(t, key, queue.WakeTimer)
		ready(t, got)
		if deletes := h.counter.Matching("DELETE "); len(deletes) != 0 {
			t.Fatalf("tick %d deleted %v", i+1, deletes)
		}
		var refs []string
		for _, ref := range got.Status.Inventory.Entries {
			refs = append(refs, ref.Kind+"/"+ref.Namespace+"/"+ref.Name)
		}
		if diff := cmp.Diff([]string{"CustomResourceDefinition//gadgets.scope.plumb.dev", "Gadget//big-one"}, refs); diff != "" {
			t.Errorf("tick %d: inventory (-want +got):\n%s", i+1, diff)
		}
	}
	gadget := &unstructured.Unstructured{}
	gadget.SetGroupVersionKind(schema.GroupVersionKind{Group: "scope.plumb.dev", Version: "v1", Kind: "Gadget"})
	if err := admin(t).Get(context.Background(), client.ObjectKey{Name: "big-one"}, gadget); err != nil {
		t.Fatalf("the Gadget is gone: %v", err)
	}

	t.Run("an inventory that recorded it under a namespace does not prune it either", func(t *testing.T) {
		c := admin(t)
		got := &plumbv1.App{}
		if err := c.Get(context.Background(), key, got); err != nil {
			t.Fatal(err)
		}
		for i, ref := range got.Status.Inventory.Entries {
			if ref.Kind == "Gadget" {
				got.Status.Inventory.Entries[i].Namespace = got.Namespace // as plumb recorded it before the fix
			}
		}
		if err := c.Status().Update(context.Background(), got); err != nil {
			t.Fatal(err)
		}
		h.counter.Reset()
		ready(t, h.tick(t, key, queue.WakeTimer))
		if deletes := h.counter.Matching("DELETE "); len(deletes) != 0 {
			t.Fatalf("the tick deleted %v", deletes)
		}
	})
}

func TestDeletingAnAppWhoseKindsAreNoLongerServedFinishes(t *testing.T) {
	ctx := context.Background()
	c := admin(t)
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yamlInto(strings.ReplaceAll(strings.ReplaceAll(clusterScopedCRD, "gadget", "doohickey"), "Gadget", "Doohickey"), crd); err != nil {
		t.Fatal(err)
	}
	crd.Spec.Scope = apiextensionsv1.NamespaceScoped
	if err := c.Create(ctx, crd); err != nil {
		t.Fatal(err)
	}
	_, repo := newRepo(t, map[string]string{
		"deploy/d.yaml":  "apiVersion: scope.plumb.dev/v1\nkind: Doohickey\nmetadata:\n  name: d\n",
		"deploy/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: kept\n",
	})
	app := newApp(t, repo, nil)
	key := client.ObjectKeyFromObject(app)
	h := newHarness(t)
	waitServed(t, h, schema.GroupVersionKind{Group: "scope.plumb.dev", Version: "v1", Kind: "Doohickey"})
	ready(t, h.tick(t, key, queue.WakeTimer))

	// The CRD goes (its custom resources with it), then the App is deleted;
	// a restarted controller no longer knows the kind.
	if err := c.Delete(ctx, crd); err != nil {
		t.Fatal(err)
	}
	waitGone(t, c, crd)
	if err := c.Delete(ctx, app); err != nil {
		t.Fatal(err)
	}
	restarted := newHarness(t)
	if _, err := restarted.r.Tick(ctx, key, queue.WakeTimer); err != nil {
		t.Fatalf("the deleted App's tick failed: %v", err)
	}
	if err := c.Get(ctx, key, &plumbv1.App{}); err == nil {
		t.Fatal("the App is still there: its finalizer was not removed")
	}
	var said bool
	for _, e := range restarted.recorded() {
		said = said || (strings.Contains(e, "KindNotServed") && strings.Contains(e, "Doohickey"))
	}
	if !said {
		t.Error("no KindNotServed Event names the Doohickey that could not be pruned")
	}
}
