package diff

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
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
		if err := c.Patch(ctx, obj, client.Apply, client.FieldOwner(plumbv1.FieldManager), client.ForceOwnership); err != nil {
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

// kubectlApply server-side applies obj as field manager plumb with
// kubectl, a client independent of plumb's, and returns the object after.
func kubectlApply(t *testing.T, c client.Client, obj *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	data, err := json.Marshal(obj.Object)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "object.json")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(cluster.Binaries.Path("kubectl"), "--kubeconfig", cluster.KubeconfigPath,
		"apply", "--server-side", "--field-manager", plumbv1.FieldManager, "--force-conflicts", "-f", file).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
	return get(t, c, obj)
}

// withoutVersionAndTimes is an object without its resourceVersion and the
// times in managedFields (a Job's no-op apply still moves its
// resourceVersion, though nothing else changes).
func withoutVersionAndTimes(u *unstructured.Unstructured) map[string]any {
	c := u.DeepCopy()
	c.SetResourceVersion("")
	fields := c.GetManagedFields()
	for i := range fields {
		fields[i].Time = nil
	}
	c.SetManagedFields(fields)
	return c.Object
}

// TestTheOracleCorpusIsUnchangedAfterApply applies objects written the way
// people write them (defaults omitted, quantities like 500m and 0.5Gi,
// int-or-string ports), keeps the Record the tick would keep from the apply
// answer, then applies each again with kubectl as an independent oracle:
// the API server must change nothing in the object, and the
// cache diff of the Record against the object kubectl left must say
// unchanged, field by field too.
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
		if fields, err := rec.Fields(); err != nil || (fields.Empty() && len(desired.Object) > 3) {
			t.Errorf("%s %s: plumb owns no fields after applying it", desired.GetKind(), desired.GetName())
		}
		records[desired] = rec
	}
	for _, desired := range objs {
		t.Run(desired.GetKind()+"/"+desired.GetName(), func(t *testing.T) {
			before := get(t, c, desired)
			live := kubectlApply(t, c, desired)
			if diff := cmp.Diff(withoutVersionAndTimes(before), withoutVersionAndTimes(live)); diff != "" {
				t.Errorf("applying the same content again changed the object: it was not converged (-before +after):\n%s", diff)
			}
			rec := records[desired]
			got, err := compareBoth(t, desired, live, &rec, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got.Kind != Unchanged {
				t.Errorf("cache diff = %s %v, want unchanged", got.Kind, got.Changes)
			}
			if changes := FieldChanges(desired, live); len(changes) != 0 {
				t.Errorf("field-by-field comparison with the live object finds differences: %s", Describe(changes))
			}
		})
	}
}
