package reconcile

import (
	"context"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/yaml"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/queue"
)

func yamlInto(s string, into any) error { return yaml.Unmarshal([]byte(s), into) }

// waitServed waits until the harness's RESTMapper knows gvk.
func waitServed(t *testing.T, h *harness, gvk schema.GroupVersionKind) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		_, err := h.r.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if meta.IsNoMatchError(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		t.Fatalf("%s is not served: %v", gvk, err)
	}
}

// waitGone waits until obj no longer exists.
func waitGone(t *testing.T, c client.Client, obj client.Object) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj)
		return client.IgnoreNotFound(err) == nil && err != nil, nil
	})
	if err != nil {
		t.Fatalf("%s is still there: %v", obj.GetName(), err)
	}
}

// app creates an App named name in ns tracking main/deploy of repo, with
// the credentials Secret "git" (newApp made it in ns).
func app(t *testing.T, c client.Client, ns, name, repo string) types.NamespacedName {
	t.Helper()
	a := &plumbv1.App{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: plumbv1.AppSpec{
		Source: plumbv1.Source{URL: gitServer.HTTPURL(repo), Ref: plumbv1.GitRef{Branch: "main"}, Path: "deploy",
			SecretRef: &plumbv1.LocalObjectReference{Name: "git"}},
	}}
	if err := c.Create(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	return client.ObjectKeyFromObject(a)
}

// waitCached waits until the harness's informer has obj at its
// resourceVersion.
func waitCached(t *testing.T, h *harness, obj client.Object) {
	t.Helper()
	gvk, err := apiutil.GVKForObject(obj, clientgoscheme.Scheme)
	if err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		got, _ := h.r.Observer.Get(gvk, obj.GetNamespace(), obj.GetName())
		return got != nil && got.GetResourceVersion() == obj.GetResourceVersion(), nil
	})
	if err != nil {
		t.Fatalf("the cache does not have %s at %s", obj.GetName(), obj.GetResourceVersion())
	}
}

// eventually polls cond until it holds, for at most a minute.
func eventually(t *testing.T, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatal("the condition did not hold within a minute")
	}
}

// crdYAML is a CustomResourceDefinition of group, kind and plural with one
// served version, v1, that keeps unknown fields.
func crdYAML(group, kind, plural, scope string) string {
	return fmt.Sprintf(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: %[3]s.%[1]s
spec:
  group: %[1]s
  names: {kind: %[2]s, plural: %[3]s}
  scope: %[4]s
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
`, group, kind, plural, scope)
}

// configMapYAML is a ConfigMap named name, without data.
func configMapYAML(name string) string {
	return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\n"
}

// deleteAndFinalize deletes the App and ticks until its finalizer let it
// go; it returns the Events recorded meanwhile.
func deleteAndFinalize(t *testing.T, h *harness, app *plumbv1.App) []string {
	t.Helper()
	ctx := context.Background()
	c := admin(t)
	if err := c.Delete(ctx, app); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(app)
	h.recorded()
	var events []string
	eventually(t, func() bool { // once the App cache has seen the deletion
		_, _ = h.r.Tick(ctx, key, queue.WakeTimer)
		events = append(events, h.recorded()...)
		return apierrors.IsNotFound(c.Get(ctx, key, &plumbv1.App{}))
	})
	return events
}
