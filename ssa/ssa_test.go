package ssa

import (
	"context"
	"fmt"
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

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/informers/compact"
	"github.com/plumb-dev/plumb/internal/source/manifest"
	"github.com/plumb-dev/plumb/internal/testenv"
)

// cluster is the package's local control plane, started once in TestMain.
var cluster *testenv.Cluster

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.Needs{Cluster: testenv.ModeAPI}, func(e *testenv.Env) { cluster = e.Cluster })
}

func newClient(t *testing.T) client.Client {
	t.Helper()
	return cluster.Client(t)
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

// countingClient is a client whose requests are recorded.
func countingClient(t *testing.T) (client.Client, func() []string) {
	t.Helper()
	log := &testenv.RequestLog{}
	c, err := client.New(log.Wrap(cluster.Config), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c, log.Take
}

// stamp stamps obj as the Diff phase does: the owner's labels, the content
// hash, and the revision.
func stamp(obj *unstructured.Unstructured, owner Owner, revision string) error {
	if _, err := StampContent(obj, owner, ""); err != nil {
		return err
	}
	SetRevision(obj, revision)
	return nil
}

// stamped parses objects and stamps them for owner at revision.
func stamped(t *testing.T, ns, yaml string, owner Owner, revision string) []*unstructured.Unstructured {
	t.Helper()
	objs := objects(t, ns, yaml)
	for _, o := range objs {
		if err := stamp(o, owner, revision); err != nil {
			t.Fatal(err)
		}
	}
	return objs
}

func directly(t *testing.T, m *Manager, objs []*unstructured.Unstructured, opts DirectOptions) ([]Applied, *fluxssa.ChangeSet, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts.Wait = fluxssa.WaitOptions{Interval: 100 * time.Millisecond, Timeout: 20 * time.Second}
	return m.ApplyDirect(ctx, objs, opts)
}

func TestApplyDirectStagesStampsAndMakesOneRequestPerObject(t *testing.T) {
	c, requests := countingClient(t)
	m := NewManager(c)
	ns := uniqueName(t)
	owner := Owner{Name: "shop", Namespace: "apps"}
	revision := "main@sha1:" + strings.Repeat("1", 40)
	objs := stamped(t, ns, stagedSet, owner, revision)
	requests() // the mapper's discovery, before the first apply
	applied, cs, err := directly(t, m, objs, DirectOptions{})
	if err != nil {
		t.Fatalf("ApplyDirect: %v", err)
	}
	sent := requests()
	if len(applied) != len(objs) {
		t.Fatalf("%d applied, want %d", len(applied), len(objs))
	}
	for _, a := range applied {
		if !a.Created || len(a.Live.GetManagedFields()) == 0 || a.Live.GetResourceVersion() == "" {
			t.Errorf("%s: created=%v managedFields=%d resourceVersion=%q", a.Live.GetName(), a.Created, len(a.Live.GetManagedFields()), a.Live.GetResourceVersion())
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
	var patches []string
	for _, r := range sent {
		switch {
		case strings.HasPrefix(r, "PATCH "):
			patches = append(patches, r)
		case strings.Contains(r, "/widgets/") || strings.Contains(r, "/configmaps/"):
			t.Errorf("a request beside the apply for an object of the last stage: %s", r)
		}
	}
	if len(patches) != len(objs) {
		t.Errorf("%d applies for %d objects, want one each: %v", len(patches), len(objs), patches)
	}
	for _, live := range []*unstructured.Unstructured{
		get(t, c, "v1", "ConfigMap", ns, "settings"),
		get(t, c, ns+".example.com/v1", "Widget", ns, "w"),
		get(t, c, "v1", "Namespace", "", ns),
	} {
		if !owner.Owns(live) {
			t.Errorf("%s lacks the ownership labels: %v", live.GetName(), live.GetLabels())
		}
		if got := live.GetAnnotations()[plumbv1.AnnotationRevision]; got != revision {
			t.Errorf("%s revision annotation = %q", live.GetName(), got)
		}
		if got := live.GetAnnotations()[plumbv1.AnnotationContentHash]; len(got) != 64 {
			t.Errorf("%s content hash annotation = %q", live.GetName(), got)
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
		if _, _, err := directly(t, m, stamped(t, ns, stagedSet, owner, revision), DirectOptions{Exists: func(*unstructured.Unstructured) bool { return true }}); err != nil {
			t.Fatal(err)
		}
		if after := get(t, c, "v1", "ConfigMap", ns, "settings").GetResourceVersion(); after != before {
			t.Errorf("resourceVersion moved from %s to %s without a change", before, after)
		}
	})
}

func TestDryRunSaysWhetherAnApplyWouldChangeTheObject(t *testing.T) {
	c := newClient(t)
	m := NewManager(c)
	ns := uniqueName(t)
	owner := Owner{Name: "diff", Namespace: "apps"}
	objs := stamped(t, ns, "apiVersion: v1\nkind: Namespace\nmetadata: {name: NS}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: NS}\ndata: {k: v}\n", owner, "r1")
	if _, _, err := directly(t, m, objs, DirectOptions{}); err != nil {
		t.Fatal(err)
	}
	live, err := compact.Of(get(t, c, "v1", "ConfigMap", ns, "a"))
	if err != nil {
		t.Fatal(err)
	}
	cm := objs[1].DeepCopy()
	if differs, dryRun, err := m.DryRun(context.Background(), cm, live); err != nil || differs || dryRun == nil {
		t.Errorf("DryRun of the applied object = %v, %v; want no difference and the dry-run object", differs, err)
	}
	cm.Object["data"] = map[string]any{"k": "changed"}
	if differs, _, err := m.DryRun(context.Background(), cm, live); err != nil || !differs {
		t.Errorf("DryRun of a changed object = %v, %v; want a difference", differs, err)
	}
	relabelled := objs[1].DeepCopy()
	relabelled.SetLabels(map[string]string{plumbv1.LabelAppName: "diff", plumbv1.LabelAppNamespace: "apps", "tier": "web"})
	if differs, _, err := m.DryRun(context.Background(), relabelled, live); err != nil || !differs {
		t.Errorf("DryRun of an object with a new label = %v, %v; want a difference", differs, err)
	}
	if got := get(t, c, "v1", "ConfigMap", ns, "a").Object["data"]; !cmp.Equal(got, map[string]any{"k": "v"}) {
		t.Errorf("DryRun wrote to the cluster: data = %v", got)
	}
	cm.SetName("new")
	if differs, _, err := m.DryRun(context.Background(), cm, nil); err != nil || !differs {
		t.Errorf("DryRun of a new object = %v, %v; want a difference", differs, err)
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
---
apiVersion: v1
kind: ConfigMap
metadata: {name: recorded-at-an-old-version, namespace: NS}
`)
	for _, o := range objs {
		if err := stamp(o, owner, "r1"); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	if _, _, err := directly(t, m, objs, DirectOptions{}); err != nil {
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

	// The inventory recorded one at a version the server no longer serves.
	objs[len(objs)-1].SetAPIVersion("v1beta1")
	unserved := &unstructured.Unstructured{}
	unserved.SetAPIVersion("gone.example.com/v1")
	unserved.SetKind("Gizmo")
	unserved.SetNamespace(ns)
	unserved.SetName("g")
	cs, kept, err := m.Prune(ctx, append(objs, unserved), owner)
	if err != nil {
		t.Fatalf("Prune: %v", err)
	}
	want := map[string]string{
		"ConfigMap/" + ns + "/stale":                      "deleted",
		"ConfigMap/" + ns + "/recorded-at-an-old-version": "deleted",
		"ConfigMap/" + ns + "/keep-me":                    string(KeptAction),
		"ConfigMap/" + ns + "/adopted-by-someone":         "skipped",
		"Namespace/" + ns:                                 string(KeptAction),
		"Gizmo.gone.example.com/" + ns + "/g":             string(UnservedAction),
	}
	if diff := cmp.Diff(want, actions(cs)); diff != "" {
		t.Errorf("prune change set (-want +got):\n%s", diff)
	}
	guards := map[string]string{}
	for _, k := range kept {
		guards[describe(k.Object)] = k.Guard.Reason
	}
	wantGuards := map[string]string{"ConfigMap/" + ns + "/keep-me": "PruneDisabled", "Namespace/" + ns: "Namespace"}
	if diff := cmp.Diff(wantGuards, guards); diff != "" {
		t.Errorf("kept objects and their guards (-want +got):\n%s", diff)
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
	apply := func(value string, annotate bool, opts DirectOptions) error {
		objs := objects(t, ns, strings.ReplaceAll(set, "VALUE", value))
		for _, o := range objs {
			if annotate && o.GetKind() == "ConfigMap" {
				o.SetAnnotations(map[string]string{plumbv1.AnnotationForce: "enabled"})
			}
			if err := stamp(o, owner, "r-"+value); err != nil {
				t.Fatal(err)
			}
		}
		_, _, err := directly(t, m, objs, opts)
		return err
	}
	if err := apply("one", false, DirectOptions{}); err != nil {
		t.Fatal(err)
	}
	err := apply("two", false, DirectOptions{})
	if err == nil || !strings.Contains(err.Error(), "field is immutable") || !strings.Contains(err.Error(), "frozen") {
		t.Fatalf("changing an immutable field: %v, want the API server's message naming the object", err)
	}
	if got := get(t, c, "v1", "ConfigMap", ns, "frozen").Object["data"]; !cmp.Equal(got, map[string]any{"k": "one"}) {
		t.Errorf("after the refused change: data = %v", got)
	}
	if err := apply("two", true, DirectOptions{}); err != nil {
		t.Fatalf("with plumb.dev/force: enabled: %v", err)
	}
	if got := get(t, c, "v1", "ConfigMap", ns, "frozen").Object["data"]; !cmp.Equal(got, map[string]any{"k": "two"}) {
		t.Errorf("after the forced change: data = %v", got)
	}
	if err := apply("three", false, DirectOptions{Force: true}); err != nil {
		t.Fatalf("with DirectOptions.Force: %v", err)
	}
}

func TestThePruneGuardKeepsNamespacesAndCRDsUnlessEnabledAndAnythingDisabled(t *testing.T) {
	obj := func(apiVersion, kind, prune string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion(apiVersion)
		u.SetKind(kind)
		u.SetName("x")
		if prune != "" {
			u.SetAnnotations(map[string]string{plumbv1.AnnotationPrune: prune})
		}
		return u
	}
	for _, tc := range []struct {
		obj    *unstructured.Unstructured
		reason string // "" when it may be pruned
	}{
		{obj("v1", "ConfigMap", ""), ""},
		{obj("v1", "ConfigMap", "disabled"), "PruneDisabled"},
		{obj("v1", "Namespace", ""), "Namespace"},
		{obj("v1", "Namespace", "enabled"), ""},
		{obj("apiextensions.k8s.io/v1", "CustomResourceDefinition", ""), "CustomResourceDefinition"},
		{obj("apiextensions.k8s.io/v1", "CustomResourceDefinition", "enabled"), ""},
		{obj("apiextensions.k8s.io/v1", "CustomResourceDefinition", "disabled"), "PruneDisabled"},
		{obj("example.com/v1", "Namespace", ""), ""}, // not the core Namespace
	} {
		guard, kept := PruneGuard(tc.obj)
		if kept != (tc.reason != "") || guard.Reason != tc.reason {
			t.Errorf("%s %s annotated %q: kept %v (%q), want reason %q", tc.obj.GetAPIVersion(), tc.obj.GetKind(),
				tc.obj.GetAnnotations()[plumbv1.AnnotationPrune], kept, guard.Reason, tc.reason)
		}
		if kept && !strings.Contains(guard.Message, plumbv1.AnnotationPrune) {
			t.Errorf("%s: the message %q does not name the annotation", tc.obj.GetKind(), guard.Message)
		}
	}
}

// TestApplyDirectReportsExactlyWhatItAppliedWhenOneFails applies 20
// ConfigMaps, the sixth of which the API server refuses: the error names
// it, every object before it is applied, and what ApplyDirect reports as
// applied, in order, is exactly what exists — the inventory depends on it.
func TestApplyDirectReportsExactlyWhatItAppliedWhenOneFails(t *testing.T) {
	c, _ := countingClient(t)
	m := NewManager(c)
	ns := uniqueName(t)
	owner := Owner{Name: "shop", Namespace: "apps"}
	var docs []string
	docs = append(docs, "apiVersion: v1\nkind: Namespace\nmetadata: {name: NS}\n")
	for i := range 20 {
		name := fmt.Sprintf("cm-%02d", i)
		if i == 5 {
			name = "Not_A_Valid_Name"
		}
		docs = append(docs, fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: %s, namespace: NS}\ndata: {i: \"%d\"}\n", name, i))
	}
	objs := stamped(t, ns, strings.Join(docs, "---\n"), owner, "r1")
	applied, _, err := directly(t, m, objs, DirectOptions{})
	if err == nil || !strings.Contains(err.Error(), "Not_A_Valid_Name") {
		t.Fatalf("error %v, want the refusal of Not_A_Valid_Name", err)
	}
	reported := map[string]bool{}
	last := -1
	for _, a := range applied {
		if a.Live == nil || a.Live.GetResourceVersion() == "" {
			t.Fatalf("%s reported applied without the server's answer", a.Desired.GetName())
		}
		if a.Desired.GetKind() != "ConfigMap" {
			continue
		}
		var i int
		if _, err := fmt.Sscanf(a.Desired.GetName(), "cm-%02d", &i); err != nil {
			t.Fatal(err)
		}
		if i <= last {
			t.Errorf("applied out of order: cm-%02d after cm-%02d", i, last)
		}
		last = i
		reported[a.Desired.GetName()] = true
	}
	for i := range 20 {
		if i == 5 {
			continue
		}
		name := fmt.Sprintf("cm-%02d", i)
		cm := &unstructured.Unstructured{}
		cm.SetAPIVersion("v1")
		cm.SetKind("ConfigMap")
		exists := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, cm) == nil
		if exists != reported[name] {
			t.Errorf("%s: exists %v, reported applied %v", name, exists, reported[name])
		}
		if i < 5 && !exists {
			t.Errorf("%s, before the refused object, was not applied", name)
		}
	}
}
