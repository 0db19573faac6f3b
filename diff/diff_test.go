package diff

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	fluxssa "github.com/fluxcd/pkg/ssa"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/plumb-dev/plumb/localcluster"
	"github.com/plumb-dev/plumb/source/manifest"
	"github.com/plumb-dev/plumb/ssa"
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

func newNamespace(t *testing.T, c client.Client) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "diff-"}}
	if err := c.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// corpus reads testdata/oracle, puts namespaced objects in ns and normalises
// them as the tick does.
func corpus(t *testing.T, c client.Client, ns string) []*unstructured.Unstructured {
	t.Helper()
	files, err := filepath.Glob("testdata/oracle/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	var out []*unstructured.Unstructured
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := manifest.Parse(file, []byte(strings.ReplaceAll(string(data), "NS", ns)))
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			out = append(out, o.Unstructured)
		}
	}
	return out
}

// apply server-side applies obj as plumb and returns the API server's answer.
func apply(t *testing.T, c client.Client, ns string, desired *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	obj := desired.DeepCopy()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		namespaced, err := c.IsObjectNamespaced(obj)
		if err != nil {
			return false, nil // a kind whose CRD is still being established
		}
		if namespaced {
			obj.SetNamespace(ns)
			desired.SetNamespace(ns)
		}
		if err := c.Patch(ctx, obj, client.Apply, client.FieldOwner(Manager), client.ForceOwnership); err != nil {
			if meta.IsNoMatchError(err) {
				return false, nil
			}
			return false, err
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("applying %s %s: %v", desired.GetKind(), desired.GetName(), err)
	}
	return obj
}

func get(t *testing.T, c client.Client, like *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(like.GroupVersionKind())
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(like), live); err != nil {
		t.Fatalf("get %s %s: %v", like.GetKind(), like.GetName(), err)
	}
	return live
}

// TestTheOracleCorpusIsUnchangedAfterApply applies objects written the way
// people write them (defaults omitted, quantities like 500m and 0.5Gi,
// int-or-string ports) and checks that the cache diff says unchanged for
// every one, and that a server-side dry-run agrees.
func TestTheOracleCorpusIsUnchangedAfterApply(t *testing.T) {
	c := newClient(t)
	ns := newNamespace(t, c)
	objs := corpus(t, c, ns)
	if len(objs) < 18 {
		t.Fatalf("the corpus has %d objects", len(objs))
	}
	records := map[*unstructured.Unstructured]Record{}
	for _, desired := range objs {
		Normalize(desired)
		applied := apply(t, c, ns, desired)
		rec, err := RecordOf(desired, applied)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Fields.Empty() && len(desired.Object) > 3 {
			t.Errorf("%s %s: plumb owns no fields after applying it", desired.GetKind(), desired.GetName())
		}
		records[desired] = rec
	}
	dryRun := ssa.NewManager(c)
	for _, desired := range objs {
		t.Run(desired.GetKind()+"/"+desired.GetName(), func(t *testing.T) {
			live := get(t, c, desired)
			rec := records[desired]
			got, err := Compare(desired, live, &rec, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got.Kind != Unchanged {
				t.Errorf("cache diff = %s %v, want unchanged", got.Kind, got.Changes)
			}
			if changes := FieldChanges(desired, live); len(changes) != 0 {
				t.Errorf("field-by-field comparison with the live object finds differences: %s", Describe(changes))
			}
			action, err := dryRun.Diff(context.Background(), desired.DeepCopy())
			if err != nil || action != fluxssa.UnchangedAction {
				t.Errorf("server-side dry-run = %s, %v; want unchanged", action, err)
			}
		})
	}
}
