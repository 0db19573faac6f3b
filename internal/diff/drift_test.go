package diff

import (
	"context"
	"encoding/json"
	"os/exec"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/plumb-dev/plumb/informers/compact"
	"github.com/plumb-dev/plumb/internal/source/manifest"
	"github.com/plumb-dev/plumb/internal/testenv"
)

const (
	settingsYAML = `apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  labels: {app: web, team: shop}
data:
  color: blue
`
	secretYAML = `apiVersion: v1
kind: Secret
metadata:
  name: credentials
stringData:
  password: correct-horse-battery-staple
`
)

// autoscaledDeployment is the shared web Deployment without replicas: an
// autoscaler owns them.
func autoscaledDeployment(t *testing.T) string {
	t.Helper()
	web := testenv.Fixture(t, "web-deployment.yaml")
	without := strings.Replace(web, "  replicas: 2\n", "", 1)
	if without == web {
		t.Fatal("web-deployment.yaml no longer sets replicas: 2")
	}
	return without
}

func parse(t *testing.T, yaml string) *unstructured.Unstructured {
	t.Helper()
	objs, err := manifest.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	Normalize(objs[0].Unstructured)
	return objs[0].Unstructured
}

// applied applies yaml as plumb and returns the desired object and its record.
func applied(t *testing.T, c client.Client, ns, yaml string) (*unstructured.Unstructured, Record) {
	t.Helper()
	desired := parse(t, yaml)
	live := apply(t, c, ns, desired)
	rec, err := RecordOf(desired, live)
	if err != nil {
		t.Fatal(err)
	}
	return desired, rec
}

func typed(t *testing.T, u *unstructured.Unstructured, into any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, into); err != nil {
		t.Fatal(err)
	}
}

func TestDriftIsDetectedAndAttributed(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	ignoreTime := cmpopts.IgnoreFields(Change{}, "Time", "FieldPath")

	t.Run("an update to an applied field", func(t *testing.T) {
		ns := newNamespace(t, c)
		desired, rec := applied(t, c, ns, settingsYAML)
		cm := &corev1.ConfigMap{}
		typed(t, get(t, c, desired), cm)
		cm.Data["color"] = "red"
		if err := c.Update(ctx, cm, client.FieldOwner("kubectl-edit")); err != nil {
			t.Fatal(err)
		}
		got, err := compareBoth(t, desired, get(t, c, desired), &rec, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		want := Result{Kind: Drifted, Changes: []Change{{Path: ".data.color", Before: "blue", After: "red", Manager: "kubectl-edit", Operation: "Update"}}}
		if diff := cmp.Diff(want, got, ignoreTime); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
		if got.Changes[0].Time == nil {
			t.Error("the change has no time")
		}
	})

	t.Run("a scale through the scale subresource", func(t *testing.T) {
		ns := newNamespace(t, c)
		desired, rec := applied(t, c, ns, testenv.Fixture(t, "web-deployment.yaml"))
		deployment := &appsv1.Deployment{}
		typed(t, get(t, c, desired), deployment)
		scale := &autoscalingv1.Scale{Spec: autoscalingv1.ScaleSpec{Replicas: 5}}
		if err := c.SubResource("scale").Update(ctx, deployment, client.WithSubResourceBody(scale), client.FieldOwner("kubectl")); err != nil {
			t.Fatal(err)
		}
		got, err := compareBoth(t, desired, get(t, c, desired), &rec, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		want := Result{Kind: Drifted, Changes: []Change{{Path: ".spec.replicas", Before: "2", After: "5", Manager: "kubectl", Operation: "Update", Subresource: "scale"}}}
		if diff := cmp.Diff(want, got, ignoreTime); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
		if d := Describe(got.Changes); !strings.Contains(d, "by kubectl (Update of scale") {
			t.Errorf("Describe = %q, want the manager and the subresource named", d)
		}
	})

	t.Run("a label removed", func(t *testing.T) {
		ns := newNamespace(t, c)
		desired, rec := applied(t, c, ns, settingsYAML)
		cm := &corev1.ConfigMap{}
		typed(t, get(t, c, desired), cm)
		delete(cm.Labels, "team")
		if err := c.Update(ctx, cm, client.FieldOwner("kubectl-label")); err != nil {
			t.Fatal(err)
		}
		got, err := compareBoth(t, desired, get(t, c, desired), &rec, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		want := Result{Kind: Drifted, Changes: []Change{{Path: ".metadata.labels.team", Before: "shop", After: "", Manager: "unknown", Operation: "removed"}}}
		if diff := cmp.Diff(want, got, ignoreTime); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})

	t.Run("a Secret value changed, masked", func(t *testing.T) {
		ns := newNamespace(t, c)
		desired, rec := applied(t, c, ns, secretYAML)
		secret := &corev1.Secret{}
		typed(t, get(t, c, desired), secret)
		secret.Data["password"] = []byte("hunter2-leaked")
		if err := c.Update(ctx, secret, client.FieldOwner("kubectl-patch")); err != nil {
			t.Fatal(err)
		}
		got, err := compareBoth(t, desired, get(t, c, desired), &rec, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		want := Result{Kind: Drifted, Changes: []Change{{Path: ".data.password", Before: "*** (before)", After: "*** (after)", Manager: "kubectl-patch", Operation: "Update"}}}
		if diff := cmp.Diff(want, got, ignoreTime); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
		text := Describe(got.Changes)
		for _, secretValue := range []string{"hunter2", "correct-horse", "aHVudGVy", "Y29ycmVjdC1ob3Jz"} {
			if strings.Contains(text, secretValue) {
				t.Errorf("the drift description shows a Secret value: %s", text)
			}
		}
	})

	t.Run("an object deleted", func(t *testing.T) {
		ns := newNamespace(t, c)
		desired, rec := applied(t, c, ns, settingsYAML)
		got, err := Compare(desired, nil, &rec, nil, nil)
		if err != nil || got.Kind != Deleted {
			t.Errorf("Compare with no live object and a record = %v, %v; want deleted", got, err)
		}
		if got, _ := Compare(desired, nil, nil, nil, nil); got.Kind != Create {
			t.Errorf("Compare with no live object and no record = %v; want create", got)
		}
	})

	t.Run("server-side apply with force by another manager", func(t *testing.T) {
		ns := newNamespace(t, c)
		desired, rec := applied(t, c, ns, settingsYAML)
		intruder := parse(t, strings.Replace(settingsYAML, "color: blue", "color: green", 1))
		intruder.SetNamespace(ns)
		intruder.SetLabels(nil)
		if err := c.Patch(ctx, intruder, client.Apply, client.FieldOwner("intruder"), client.ForceOwnership); err != nil {
			t.Fatal(err)
		}
		got, err := compareBoth(t, desired, get(t, c, desired), &rec, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		want := Result{Kind: Drifted, Changes: []Change{{Path: ".data.color", Before: "blue", After: "green", Manager: "intruder", Operation: "Apply"}}}
		if diff := cmp.Diff(want, got, ignoreTime); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
}

func TestChangesToFieldsPlumbNeverAppliedAreNotDrift(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()

	t.Run("a status update", func(t *testing.T) {
		ns := newNamespace(t, c)
		desired, rec := applied(t, c, ns, autoscaledDeployment(t))
		d := &appsv1.Deployment{}
		typed(t, get(t, c, desired), d)
		d.Status.ObservedGeneration = 1
		d.Status.Replicas = 1
		if err := c.Status().Update(ctx, d, client.FieldOwner("deployment-controller")); err != nil {
			t.Fatal(err)
		}
		assertUnchanged(t, desired, get(t, c, desired), &rec)
	})

	t.Run("an HPA-style scale of replicas plumb never applied", func(t *testing.T) {
		ns := newNamespace(t, c)
		desired, rec := applied(t, c, ns, autoscaledDeployment(t))
		d := &appsv1.Deployment{}
		typed(t, get(t, c, desired), d)
		replicas := int32(5)
		d.Spec.Replicas = &replicas
		if err := c.Update(ctx, d, client.FieldOwner("horizontal-pod-autoscaler")); err != nil {
			t.Fatal(err)
		}
		assertUnchanged(t, desired, get(t, c, desired), &rec)
	})

	t.Run("a label added by someone else", func(t *testing.T) {
		ns := newNamespace(t, c)
		desired, rec := applied(t, c, ns, settingsYAML)
		cm := &corev1.ConfigMap{}
		typed(t, get(t, c, desired), cm)
		cm.Labels["owner"] = "ops"
		if err := c.Update(ctx, cm, client.FieldOwner("kubectl-label")); err != nil {
			t.Fatal(err)
		}
		assertUnchanged(t, desired, get(t, c, desired), &rec)
	})

	t.Run("Git changed the object", func(t *testing.T) {
		ns := newNamespace(t, c)
		_, rec := applied(t, c, ns, settingsYAML)
		changed := parse(t, strings.Replace(settingsYAML, "color: blue", "color: yellow", 1))
		changed.SetNamespace(ns)
		got, err := compareBoth(t, changed, get(t, c, changed), &rec, nil, nil)
		if err != nil || got.Kind != Update {
			t.Errorf("Compare after a Git change = %v, %v; want update", got, err)
		}
		if got, _ := compareBoth(t, changed, get(t, c, changed), nil, nil, nil); got.Kind != Ambiguous {
			t.Errorf("Compare without a record = %v; want ambiguous", got)
		}
	})
}

func assertUnchanged(t *testing.T, desired, live *unstructured.Unstructured, rec *Record) {
	t.Helper()
	got, err := compareBoth(t, desired, live, rec, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.Kind != Unchanged {
		t.Errorf("Compare = %s %s, want unchanged", got.Kind, Describe(got.Changes))
	}
}

func TestIgnoredFieldsAreNeitherAppliedNorDrift(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	ns := newNamespace(t, c)
	ignore := Ignore{"/spec/replicas", "/metadata/annotations/team~1owner"}
	desired := parse(t, testenv.Fixture(t, "web-deployment.yaml"))
	desired.SetAnnotations(map[string]string{"team/owner": "shop", "keep": "me"})
	ignore.Strip(desired)
	if _, found, _ := unstructured.NestedFieldNoCopy(desired.Object, "spec", "replicas"); found {
		t.Fatal("Strip left spec.replicas in place")
	}
	if got := desired.GetAnnotations(); !cmp.Equal(got, map[string]string{"keep": "me"}) {
		t.Fatalf("annotations after Strip = %v", got)
	}
	live := apply(t, c, ns, desired)
	rec, err := RecordOf(desired, live)
	if err != nil {
		t.Fatal(err)
	}
	d := &appsv1.Deployment{}
	typed(t, get(t, c, desired), d)
	replicas := int32(7)
	d.Spec.Replicas = &replicas
	if err := c.Update(ctx, d, client.FieldOwner("horizontal-pod-autoscaler")); err != nil {
		t.Fatal(err)
	}
	got, err := compareBoth(t, desired, get(t, c, desired), &rec, ignore, nil)
	if err != nil || got.Kind != Unchanged {
		t.Errorf("Compare after a scale of an ignored field = %v, %v; want unchanged", got, err)
	}
}

func TestAnIgnoredFieldPlumbOwnedIsNotDriftWhenTakenOver(t *testing.T) {
	c := newClient(t)
	ns := newNamespace(t, c)
	desired, rec := applied(t, c, ns, testenv.Fixture(t, "web-deployment.yaml"))
	d := &appsv1.Deployment{}
	typed(t, get(t, c, desired), d)
	replicas := int32(7)
	d.Spec.Replicas = &replicas
	if err := c.Update(context.Background(), d, client.FieldOwner("horizontal-pod-autoscaler")); err != nil {
		t.Fatal(err)
	}
	live := get(t, c, desired)
	if got, _ := compareBoth(t, desired, live, &rec, nil, nil); got.Kind != Drifted {
		t.Errorf("without the rule: %s, want drifted", got.Kind)
	}
	if got, _ := compareBoth(t, desired, live, &rec, Ignore{"/spec/replicas"}, nil); got.Kind != Unchanged {
		t.Errorf("with /spec/replicas ignored: %s %s, want unchanged", got.Kind, Describe(got.Changes))
	}
}

func TestAnEnvVarAddedToAContainerFromGitIsDriftAndCanBeRemoved(t *testing.T) {
	c := newClient(t)
	ns := newNamespace(t, c)
	withEnv := strings.Replace(autoscaledDeployment(t), "        image: nginx:1.27\n", "        image: nginx:1.27\n        env:\n        - {name: MODE, value: production}\n", 1)
	desired, rec := applied(t, c, ns, withEnv)
	out, err := exec.Command(cluster.Binaries.Path("kubectl"), "--kubeconfig", cluster.KubeconfigPath, "-n", ns,
		"set", "env", "deployment/web", "DEBUG=1").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl set env: %v\n%s", err, out)
	}
	live := get(t, c, desired)
	got, err := compareBoth(t, desired, live, &rec, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []Change{{Path: `.spec.template.spec.containers[name="web"].env[name="DEBUG"]`, After: `{"name":"DEBUG","value":"1"}`,
		Manager: "kubectl-set", Operation: "Update"}}
	if diff := cmp.Diff(want, got.Changes, cmpopts.IgnoreFields(Change{}, "Time", "FieldPath")); got.Kind != Drifted || diff != "" {
		t.Fatalf("Compare = %s (-want +got):\n%s", got.Kind, diff)
	}
	// The removal the heal sends: one JSON patch, guarded by the items' keys.
	patch, err := json.Marshal(got.Additions)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Patch(context.Background(), live, client.RawPatch(types.JSONPatchType, patch)); err != nil {
		t.Fatalf("applying %s: %v", patch, err)
	}
	if got, _ := compareBoth(t, desired, get(t, c, desired), &rec, nil, nil); got.Kind != Unchanged {
		t.Errorf("after removing the addition: %s %s", got.Kind, Describe(got.Changes))
	}
}

// compareBoth compares desired with live as the Diff phase does: first
// compacted, as the cache keeps it, then (when that finds a drift it cannot
// describe) whole. The compacted verdict must agree with the whole one:
// Unchanged where it is Unchanged, an Incomplete drift where it is Drifted.
func compareBoth(t *testing.T, desired, live *unstructured.Unstructured, rec *Record, ignore Ignore, left *fieldpath.Set) (Result, error) {
	t.Helper()
	whole, err := compact.Whole(live)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Compare(desired, whole, rec, ignore, left)
	if err != nil {
		return got, err
	}
	compacted, err := compact.Of(live)
	if err != nil {
		t.Fatal(err)
	}
	fromCache, err := Compare(desired, compacted, rec, ignore, left)
	if err != nil {
		t.Fatalf("comparing with the compacted object: %v", err)
	}
	want := Result{Kind: got.Kind}
	if got.Kind == Drifted {
		want.Incomplete = true
	}
	if fromCache.Kind != want.Kind || fromCache.Incomplete != want.Incomplete {
		t.Errorf("compacted: %s (incomplete %v), whole: %s", fromCache.Kind, fromCache.Incomplete, got.Kind)
	}
	// Without the object whole, the same fields and managers, no values.
	pathsOf := func(changes []Change) []string {
		var out []string
		for _, c := range changes {
			out = append(out, c.Path+" by "+c.Manager)
		}
		sort.Strings(out)
		return out
	}
	if diff := cmp.Diff(pathsOf(got.Changes), pathsOf(fromCache.Changes)); diff != "" {
		t.Errorf("changes seen on the compacted object (-whole +compacted):\n%s", diff)
	}
	for _, c := range fromCache.Changes {
		if c.After != NotRead && !strings.HasPrefix(c.After, "***") {
			t.Errorf("%s: the compacted object shows a live value %q", c.Path, c.After)
		}
	}
	return got, nil
}

// A field that another manager took over and set back to what Git says is
// no drift, though plumb no longer owns it: the result says so (Reclaim),
// so that a healing tick takes it back quietly. The compacted cache, which
// holds no values, cannot tell, and calls for the object whole.
func TestAFieldSetBackToGitsValueIsNoDrift(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	ns := newNamespace(t, c)
	desired, rec := applied(t, c, ns, settingsYAML)
	for _, color := range []string{"red", "blue"} {
		cm := &corev1.ConfigMap{}
		typed(t, get(t, c, desired), cm)
		cm.Data["color"] = color
		if err := c.Update(ctx, cm, client.FieldOwner("kubectl-edit")); err != nil {
			t.Fatal(err)
		}
	}
	live := get(t, c, desired)
	if owner := OwnerOf(mustWhole(t, live), fieldpath.MakePathOrDie("data", "color")); owner != "kubectl-edit" {
		t.Fatalf(".data.color is owned by %q, want kubectl-edit (the test needs plumb to have lost it)", owner)
	}
	got, err := Compare(desired, mustWhole(t, live), &rec, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.Kind != Unchanged || !got.Reclaim {
		t.Errorf("Compare = %s (reclaim %v) %s, want unchanged with reclaim", got.Kind, got.Reclaim, Describe(got.Changes))
	}
	compacted, err := compact.Of(live)
	if err != nil {
		t.Fatal(err)
	}
	if fromCache, _ := Compare(desired, compacted, &rec, nil, nil); fromCache.Kind != Drifted || !fromCache.Incomplete {
		t.Errorf("from the cache: %s (incomplete %v), want drifted and incomplete", fromCache.Kind, fromCache.Incomplete)
	}
	// A value that differs is still drift.
	cm := &corev1.ConfigMap{}
	typed(t, live, cm)
	cm.Data["color"] = "green"
	if err := c.Update(ctx, cm, client.FieldOwner("kubectl-edit")); err != nil {
		t.Fatal(err)
	}
	if got, _ := Compare(desired, mustWhole(t, get(t, c, desired)), &rec, nil, nil); got.Kind != Drifted || got.Reclaim {
		t.Errorf("after a real change: %s (reclaim %v), want drifted", got.Kind, got.Reclaim)
	}
}

func mustWhole(t *testing.T, live *unstructured.Unstructured) *compact.Object {
	t.Helper()
	whole, err := compact.Whole(live)
	if err != nil {
		t.Fatal(err)
	}
	return whole
}
