package ssa

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	fluxssa "github.com/fluxcd/pkg/ssa"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/plumb-dev/plumb/localcluster"
	"github.com/plumb-dev/plumb/source/manifest"
)

// cluster is the package's local control plane, started once in TestMain.
var cluster *localcluster.Cluster

func TestMain(m *testing.M) {
	os.Exit(localcluster.RunTests(m, localcluster.Options{Mode: localcluster.ModeAPI}, func(c *localcluster.Cluster) { cluster = c }))
}

func newClient(t *testing.T) client.Client {
	t.Helper()
	c, err := client.New(cluster.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// objects parses YAML, replacing NS with the test's namespace name.
func objects(t *testing.T, ns, yaml string) []*unstructured.Unstructured {
	t.Helper()
	parsed, err := manifest.Parse("test.yaml", []byte(strings.ReplaceAll(yaml, "NS", ns)))
	if err != nil {
		t.Fatal(err)
	}
	var out []*unstructured.Unstructured
	for _, o := range parsed {
		out = append(out, o.Unstructured)
	}
	return out
}

func uniqueName(t *testing.T) string {
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(name) > 50 {
		name = name[:50]
	}
	return strings.Trim(name, "-")
}

func get(t *testing.T, c client.Client, apiVersion, kind, ns, name string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(apiVersion)
	u.SetKind(kind)
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, u); err != nil {
		t.Fatalf("get %s %s/%s: %v", kind, ns, name, err)
	}
	return u
}

func actions(cs *fluxssa.ChangeSet) map[string]string {
	out := map[string]string{}
	for _, e := range cs.Entries {
		out[e.Subject] = string(e.Action)
	}
	return out
}

const stagedSet = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.NS.example.com}
spec:
  group: NS.example.com
  names: {kind: Widget, plural: widgets, singular: widget, listKind: WidgetList}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {size: {type: integer}}}
---
apiVersion: v1
kind: Namespace
metadata: {name: NS}
---
apiVersion: NS.example.com/v1
kind: Widget
metadata: {name: w, namespace: NS}
spec: {size: 3}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: NS}
data: {color: blue}
`

func TestApplyStagesDefinitionsAndStampsOwnership(t *testing.T) {
	c := newClient(t)
	m := NewManager(c)
	ns := uniqueName(t)
	owner := Owner{Name: "shop", Namespace: "apps"}
	objs := objects(t, ns, stagedSet)
	for _, o := range objs {
		Stamp(o, owner, "main@sha1:"+strings.Repeat("1", 40))
	}
	cs, err := m.Apply(context.Background(), objs, ApplyOptions{})
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	want := map[string]string{
		"CustomResourceDefinition/widgets." + ns + ".example.com": "created",
		"Namespace/" + ns:               "created",
		"Widget/" + ns + "/w":           "created",
		"ConfigMap/" + ns + "/settings": "created",
	}
	if diff := cmp.Diff(want, actions(cs)); diff != "" {
		t.Errorf("change set (-want +got):\n%s", diff)
	}
	for _, live := range []*unstructured.Unstructured{
		get(t, c, "v1", "ConfigMap", ns, "settings"),
		get(t, c, ns+".example.com/v1", "Widget", ns, "w"),
		get(t, c, "v1", "Namespace", "", ns),
	} {
		if !owner.Owns(live) {
			t.Errorf("%s lacks the ownership labels: %v", live.GetName(), live.GetLabels())
		}
		if got := live.GetAnnotations()[AnnotationRevision]; got != "main@sha1:"+strings.Repeat("1", 40) {
			t.Errorf("%s revision annotation = %q", live.GetName(), got)
		}
		managers := []string{}
		for _, f := range live.GetManagedFields() {
			managers = append(managers, f.Manager+"/"+string(f.Operation))
		}
		if !slices.Contains(managers, "plumb/Apply") {
			t.Errorf("%s managed by %v, want plumb/Apply", live.GetName(), managers)
		}
	}

	t.Run("re-applying unchanged objects writes nothing", func(t *testing.T) {
		before := get(t, c, "v1", "ConfigMap", ns, "settings").GetResourceVersion()
		objs := objects(t, ns, stagedSet)
		for _, o := range objs {
			Stamp(o, owner, "main@sha1:"+strings.Repeat("1", 40))
		}
		cs, err := m.Apply(context.Background(), objs, ApplyOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for subject, action := range actions(cs) {
			if action != "unchanged" {
				t.Errorf("%s: %s, want unchanged", subject, action)
			}
		}
		if after := get(t, c, "v1", "ConfigMap", ns, "settings").GetResourceVersion(); after != before {
			t.Errorf("resourceVersion moved from %s to %s without a change", before, after)
		}
	})
}

func TestDiffSaysWhatAnApplyWouldDo(t *testing.T) {
	c := newClient(t)
	m := NewManager(c)
	ns := uniqueName(t)
	owner := Owner{Name: "diff", Namespace: "apps"}
	objs := objects(t, ns, "apiVersion: v1\nkind: Namespace\nmetadata: {name: NS}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: NS}\ndata: {k: v}\n")
	for _, o := range objs {
		Stamp(o, owner, "r1")
	}
	if _, err := m.Apply(context.Background(), objs, ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	cm := objs[1].DeepCopy()
	if action, err := m.Diff(context.Background(), cm); err != nil || action != fluxssa.UnchangedAction {
		t.Errorf("Diff of the applied object = %s, %v; want unchanged", action, err)
	}
	cm.Object["data"] = map[string]any{"k": "changed"}
	if action, err := m.Diff(context.Background(), cm); err != nil || action != fluxssa.ConfiguredAction {
		t.Errorf("Diff of a changed object = %s, %v; want configured", action, err)
	}
	if got := get(t, c, "v1", "ConfigMap", ns, "a").Object["data"]; !cmp.Equal(got, map[string]any{"k": "v"}) {
		t.Errorf("Diff wrote to the cluster: data = %v", got)
	}
	cm.SetName("new")
	if action, err := m.Diff(context.Background(), cm); err != nil || action != fluxssa.CreatedAction {
		t.Errorf("Diff of a new object = %s, %v; want created", action, err)
	}
}

func TestPruneDeletesOnlyWhatPlumbOwnsAndMayDelete(t *testing.T) {
	c := newClient(t)
	m := NewManager(c)
	ns := uniqueName(t)
	owner := Owner{Name: "prune", Namespace: "apps"}
	objs := objects(t, ns, `
apiVersion: v1
kind: Namespace
metadata: {name: NS}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: stale, namespace: NS}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: keep-me, namespace: NS, annotations: {plumb.dev/prune: disabled}}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: adopted-by-someone, namespace: NS}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: already-gone, namespace: NS}
`)
	for _, o := range objs {
		Stamp(o, owner, "r1")
	}
	ctx := context.Background()
	if _, err := m.Apply(ctx, objs, ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	// Someone removes plumb's labels from one object and deletes another.
	adopted := get(t, c, "v1", "ConfigMap", ns, "adopted-by-someone")
	adopted.SetLabels(map[string]string{"team": "other"})
	if err := c.Update(ctx, adopted); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "already-gone"}}); err != nil {
		t.Fatal(err)
	}

	cs, err := m.Prune(ctx, objs, owner)
	if err != nil {
		t.Fatalf("Prune: %v", err)
	}
	want := map[string]string{
		"ConfigMap/" + ns + "/stale":              "deleted",
		"ConfigMap/" + ns + "/keep-me":            "skipped",
		"ConfigMap/" + ns + "/adopted-by-someone": "skipped",
		"Namespace/" + ns:                         "skipped",
	}
	if diff := cmp.Diff(want, actions(cs)); diff != "" {
		t.Errorf("prune change set (-want +got):\n%s", diff)
	}
	for _, name := range []string{"keep-me", "adopted-by-someone"} {
		get(t, c, "v1", "ConfigMap", ns, name)
	}
	get(t, c, "v1", "Namespace", "", ns)
	stale := &corev1.ConfigMap{}
	err = c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "stale"}, stale)
	if err == nil && stale.DeletionTimestamp == nil {
		t.Errorf("the stale ConfigMap still exists")
	} else if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

func TestImmutableFieldChanges(t *testing.T) {
	c := newClient(t)
	m := NewManager(c)
	ns := uniqueName(t)
	owner := Owner{Name: "immutable", Namespace: "apps"}
	const set = `
apiVersion: v1
kind: Namespace
metadata: {name: NS}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: frozen, namespace: NS}
immutable: true
data: {k: VALUE}
`
	apply := func(value string, annotate bool, opts ApplyOptions) error {
		objs := objects(t, ns, strings.ReplaceAll(set, "VALUE", value))
		for _, o := range objs {
			Stamp(o, owner, "r-"+value)
			if annotate && o.GetKind() == "ConfigMap" {
				o.SetAnnotations(map[string]string{AnnotationForce: "enabled", AnnotationRevision: "r-" + value})
			}
		}
		_, err := m.Apply(context.Background(), objs, opts)
		return err
	}
	if err := apply("one", false, ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	err := apply("two", false, ApplyOptions{})
	if err == nil || !strings.Contains(err.Error(), "field is immutable") || !strings.Contains(err.Error(), "frozen") {
		t.Fatalf("changing an immutable field: %v, want the API server's message naming the object", err)
	}
	if got := get(t, c, "v1", "ConfigMap", ns, "frozen").Object["data"]; !cmp.Equal(got, map[string]any{"k": "one"}) {
		t.Errorf("after the refused change: data = %v", got)
	}
	if err := apply("two", true, ApplyOptions{}); err != nil {
		t.Fatalf("with plumb.dev/force: enabled: %v", err)
	}
	if got := get(t, c, "v1", "ConfigMap", ns, "frozen").Object["data"]; !cmp.Equal(got, map[string]any{"k": "two"}) {
		t.Errorf("after the forced change: data = %v", got)
	}
	if err := apply("three", false, ApplyOptions{Force: true}); err != nil {
		t.Fatalf("with ApplyOptions.Force: %v", err)
	}
}

func TestApplyDirectStagesAndWaitsWithOneRequestPerObject(t *testing.T) {
	c := newClient(t)
	m := NewManager(c)
	ns := uniqueName(t)
	owner := Owner{Name: "direct", Namespace: "apps"}
	objs := objects(t, ns, stagedSet)
	for _, o := range objs {
		Stamp(o, owner, "r1")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	applied, cs, err := m.ApplyDirect(ctx, objs, DirectOptions{Wait: fluxssa.WaitOptions{Interval: 100 * time.Millisecond, Timeout: 15 * time.Second}})
	if err != nil {
		t.Fatalf("ApplyDirect: %v", err)
	}
	if len(applied) != len(objs) {
		t.Fatalf("%d applied, want %d", len(applied), len(objs))
	}
	for _, a := range applied {
		if !a.Created || len(a.Live.GetManagedFields()) == 0 {
			t.Errorf("%s: created=%v managedFields=%d", a.Live.GetName(), a.Created, len(a.Live.GetManagedFields()))
		}
	}
	if diff := cmp.Diff(map[string]string{
		"CustomResourceDefinition/widgets." + ns + ".example.com": "created",
		"Namespace/" + ns:               "created",
		"Widget/" + ns + "/w":           "created",
		"ConfigMap/" + ns + "/settings": "created",
	}, actions(cs)); diff != "" {
		t.Errorf("change set (-want +got):\n%s", diff)
	}
}
