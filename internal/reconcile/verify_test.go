package reconcile

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/informers/compact"
	"github.com/plumb-dev/plumb/internal/diff"
)

// fetchingObserver serves Fetch from one live object, as the API server
// would for a drifted object, and counts the reads (the cache itself is
// the compacted object the test hands the compare).
type fetchingObserver struct {
	Observer
	live    *unstructured.Unstructured
	err     error // what a read fails with
	fetches int
}

func (f *fetchingObserver) Fetch(_ context.Context, _ schema.GroupVersionKind, _, _ string) (*compact.Object, error) {
	f.fetches++
	if f.err != nil {
		return nil, f.err
	}
	return compact.Whole(f.live)
}

// cachedAs compacts a live object as the informer cache keeps it.
func cachedAs(t *testing.T, u *unstructured.Unstructured) *compact.Object {
	t.Helper()
	o, err := compact.Of(u)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// liveConfigMap is a ConfigMap as the informer cache holds it: data a and
// b, at resourceVersion rv, with managers owning the data fields given (a
// field another manager owns holds its own value, as after a real change).
func liveConfigMap(t *testing.T, rv string, owners map[string][]string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "cm", "namespace": "ns", "resourceVersion": rv},
		"data":     map[string]any{"a": "1", "b": "2"},
	}}
	var entries []metav1.ManagedFieldsEntry
	for manager, fields := range owners {
		if manager != plumbv1.FieldManager {
			for _, f := range fields {
				u.Object["data"].(map[string]any)[f] = "set-by-" + manager // another manager's value
			}
		}
		raw := `{"f:data":{`
		for i, f := range fields {
			if i > 0 {
				raw += ","
			}
			raw += fmt.Sprintf(`"f:%s":{}`, f)
		}
		raw += "}}"
		op := metav1.ManagedFieldsOperationUpdate
		if manager == plumbv1.FieldManager {
			op = metav1.ManagedFieldsOperationApply
		}
		entries = append(entries, metav1.ManagedFieldsEntry{Manager: manager, Operation: op, APIVersion: "v1",
			FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(raw)}})
	}
	u.SetManagedFields(entries)
	return u
}

// compareFixture is an App (generation 1) and a desired ConfigMap with its
// hash, as the Diff phase has them.
func compareFixture(t *testing.T) (types.NamespacedName, *plumbv1.App, *unstructured.Unstructured, string) {
	t.Helper()
	key := types.NamespacedName{Namespace: "ns", Name: "app"}
	app := &plumbv1.App{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Generation: 1}}
	desired := liveConfigMap(t, "", nil)
	desired.SetManagedFields(nil)
	unstructured.RemoveNestedField(desired.Object, "metadata", "resourceVersion")
	hash, err := diff.Hash(desired)
	if err != nil {
		t.Fatal(err)
	}
	return key, app, desired, hash
}

// TestAnUnchangedVerdictIsReusedOnlyWhileItsInputsStay checks the shortcut
// of the Diff phase: an object found Unchanged is not compared again while
// its live resourceVersion, its desired hash, its record and the App's
// generation stay the same — and is compared again as soon as one moves.
func TestAnUnchangedVerdictIsReusedOnlyWhileItsInputsStay(t *testing.T) {
	fetcher := &fetchingObserver{}
	r := &Reconciler{Observer: fetcher}
	key, app, desired, hash := compareFixture(t)
	id := idOf(desired)
	plumbOwns := func(fields ...string) diff.Record {
		rec, err := diff.RecordOf(desired, liveConfigMap(t, "1", map[string][]string{plumbv1.FieldManager: fields}))
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	r.memory.remember(key, id, plumbOwns("a", "b"))
	kind := func(live *unstructured.Unstructured) diff.Kind {
		t.Helper()
		fetcher.live = live
		result, _, err := r.differ(app, nil, &Target{Observer: r.Observer}, zap.NewNop()).compare(context.Background(), desired.DeepCopy(), hash, cachedAs(t, live), "", nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		return result.Kind
	}

	if got := kind(liveConfigMap(t, "5", map[string][]string{plumbv1.FieldManager: {"a", "b"}})); got != diff.Unchanged {
		t.Fatalf("first compare: %s, want unchanged", got)
	}
	at5 := liveConfigMap(t, "5", map[string][]string{plumbv1.FieldManager: {"a", "b"}})
	if !r.memory.isVerified(key, id, verification{live: cachedAs(t, at5), hash: hash, generation: 1}) {
		t.Fatal("an Unchanged verdict was not remembered")
	}
	// A new status (a new resourceVersion, nothing a tick looks at) keeps it.
	statusOnly := at5.DeepCopy()
	statusOnly.SetResourceVersion("5s")
	statusOnly.Object["status"] = map[string]any{"observed": "yes"}
	if !r.memory.isVerified(key, id, verification{live: cachedAs(t, statusOnly), hash: hash, generation: 1}) {
		t.Error("a status write ended an Unchanged verdict")
	}
	if fetcher.fetches != 0 {
		t.Errorf("%d reads of an unchanged object, want none", fetcher.fetches)
	}
	// Someone takes field b: the resourceVersion moves, the shortcut must not hide it.
	if got := kind(liveConfigMap(t, "6", map[string][]string{plumbv1.FieldManager: {"a"}, "kubectl-edit": {"b"}})); got != diff.Drifted {
		t.Errorf("after another manager took a field: %s, want drifted", got)
	}
	// The drift is described from the object read whole, once while the
	// cached object changes in nothing a tick looks at (a status write).
	kind(liveConfigMap(t, "6", map[string][]string{plumbv1.FieldManager: {"a"}, "kubectl-edit": {"b"}}))
	drifted := liveConfigMap(t, "6s", map[string][]string{plumbv1.FieldManager: {"a"}, "kubectl-edit": {"b"}})
	drifted.Object["status"] = map[string]any{"observed": "yes"}
	if got := kind(drifted); got != diff.Drifted || fetcher.fetches != 1 {
		t.Errorf("%s after %d reads over three compares of one drifted state, want drifted after 1", got, fetcher.fetches)
	}

	// A new record (here: plumb owns b, which the live object at the
	// verified resourceVersion 7 leaves to someone else) is compared afresh.
	r.memory.remember(key, id, plumbOwns("a"))
	liveAt7 := liveConfigMap(t, "7", map[string][]string{plumbv1.FieldManager: {"a"}, "kubectl-edit": {"b"}})
	if got := kind(liveAt7); got != diff.Unchanged {
		t.Fatalf("with a record of field a only: %s, want unchanged", got)
	}
	r.memory.remember(key, id, plumbOwns("a", "b"))
	if got := kind(liveAt7); got != diff.Drifted {
		t.Errorf("same live object, new record that owns b: %s, want drifted (a verdict outlived its record)", got)
	}

	// Another generation of the App is compared afresh too.
	r.memory.remember(key, id, plumbOwns("a"))
	if got := kind(liveAt7); got != diff.Unchanged {
		t.Fatal(got)
	}
	app.Generation = 2
	kind(liveAt7)
	if !r.memory.isVerified(key, id, verification{live: cachedAs(t, liveAt7), hash: hash, generation: 2}) {
		t.Error("a new generation did not compare the object again")
	}
}

// TestADriftIsHandledWhenItsObjectCannotBeReadWhole: a drift the cache
// shows is still a drift when the read that would describe it fails (it is
// healed by the apply, and described without live values), and an object
// that another App took meanwhile is a conflict, not healed.
func TestADriftIsHandledWhenItsObjectCannotBeReadWhole(t *testing.T) {
	key, app, desired, hash := compareFixture(t)
	id := idOf(desired)
	rec, err := diff.RecordOf(desired, liveConfigMap(t, "1", map[string][]string{plumbv1.FieldManager: {"a", "b"}}))
	if err != nil {
		t.Fatal(err)
	}
	live := liveConfigMap(t, "2", map[string][]string{plumbv1.FieldManager: {"a"}, "kubectl-edit": {"b"}})

	fetcher := &fetchingObserver{err: fmt.Errorf("etcdserver: request timed out")}
	r := &Reconciler{Observer: fetcher, Deps: Deps{Log: zap.NewNop()}}
	r.memory.remember(key, id, rec)
	result, _, err := r.differ(app, nil, &Target{Observer: r.Observer}, zap.NewNop()).compare(context.Background(), desired.DeepCopy(), hash, cachedAs(t, live), "", nil, nil)
	if err != nil || result.Kind != diff.Drifted {
		t.Fatalf("with the read failing: %s, %v; want drifted and no error", result.Kind, err)
	}
	if len(result.Changes) != 1 || result.Changes[0].Path != ".data.b" || result.Changes[0].Manager != "kubectl-edit" || result.Changes[0].After != diff.NotRead {
		t.Errorf("changes = %+v, want .data.b by kubectl-edit, its value not read", result.Changes)
	}

	// Fields others added inside plumb's list items need a patch built from
	// the content: without it the tick fails (retried) rather than claim a
	// heal; and a cancelled tick goes no further.
	for _, tc := range []struct {
		name   string
		cached diff.Result
		cancel bool
	}{
		{"fields added inside plumb's items", diff.Result{Kind: diff.Drifted, Incomplete: true}, false},
		{"a cancelled tick", diff.Result{Kind: diff.Drifted, Incomplete: true, LostOnly: true}, true},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		if tc.cancel {
			cancel()
		}
		_, whole, err := r.differ(app, nil, &Target{Observer: r.Observer}, zap.NewNop()).describe(ctx, desired.DeepCopy(), tc.cached, func(*compact.Object) (diff.Result, error) {
			t.Fatal("compared without a read")
			return diff.Result{}, nil
		})
		cancel()
		var phaseErr *PhaseError
		if !errors.As(err, &phaseErr) || phaseErr.Phase != PhaseDiff || whole != nil {
			t.Errorf("%s, the read failing: %v, want the Diff phase to fail", tc.name, err)
		}
	}

	taken := live.DeepCopy()
	taken.SetLabels(map[string]string{plumbv1.LabelAppName: "other", plumbv1.LabelAppNamespace: "team-b"})
	fetcher.err, fetcher.live = nil, taken
	r = &Reconciler{Observer: fetcher, Deps: Deps{Log: zap.NewNop()}}
	r.memory.remember(key, id, rec)
	_, _, err = r.differ(app, nil, &Target{Observer: r.Observer}, zap.NewNop()).compare(context.Background(), desired.DeepCopy(), hash, cachedAs(t, live), "", nil, nil)
	var phaseErr *PhaseError
	if !errors.As(err, &phaseErr) || phaseErr.Detail != "Conflict" || !strings.Contains(err.Error(), "team-b/other") {
		t.Errorf("an object another App took meanwhile: %v, want a Conflict naming team-b/other", err)
	}
}

// TestARestartedControllerTrustsAnObjectAsItLeftIt checks how the Diff
// phase rebuilds its record after a restart from the inventory's digest of
// the fields plumb owned: only an object that carries the desired content
// hash and whose plumb-owned fields are those of the digest is taken as
// Unchanged without asking the API server; anything else stays Ambiguous
// (one dry-run).
func TestARestartedControllerTrustsAnObjectAsItLeftIt(t *testing.T) {
	_, app, desired, hash := compareFixture(t)
	stamped := func(u *unstructured.Unstructured, contentHash string) *unstructured.Unstructured {
		u.SetAnnotations(map[string]string{plumbv1.AnnotationContentHash: contentHash})
		return u
	}
	asLeft := stamped(liveConfigMap(t, "9", map[string][]string{plumbv1.FieldManager: {"a", "b"}}), hash)
	rec, err := diff.RecordOf(desired, asLeft)
	if err != nil {
		t.Fatal(err)
	}
	digest := rec.FieldsDigest()
	if len(digest) != 16 {
		t.Fatalf("digest %q, want 16 hex digits", digest)
	}
	cases := []struct {
		name          string
		live          *unstructured.Unstructured
		appliedFields string
		want          diff.Kind
	}{
		{"as plumb left it", asLeft, digest, diff.Unchanged},
		{"no digest in the inventory (written by an older plumb)", asLeft, "", diff.Ambiguous},
		{"another manager took a field meanwhile",
			stamped(liveConfigMap(t, "10", map[string][]string{plumbv1.FieldManager: {"a"}, "kubectl-edit": {"b"}}), hash), digest, diff.Ambiguous},
		{"the live object carries other content", stamped(liveConfigMap(t, "9", map[string][]string{plumbv1.FieldManager: {"a", "b"}}), "other"), digest, diff.Ambiguous},
	}
	for _, c := range cases {
		r := &Reconciler{} // a restarted controller: no memory
		result, _, err := r.differ(app, nil, &Target{Observer: r.Observer}, zap.NewNop()).compare(context.Background(), desired.DeepCopy(), hash, cachedAs(t, c.live), c.appliedFields, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if result.Kind != c.want {
			t.Errorf("%s: %s, want %s", c.name, result.Kind, c.want)
		}
	}
}

func TestIDOfMatchesTheObjectsGroupVersionKind(t *testing.T) {
	for _, apiVersion := range []string{"v1", "apps/v1", "rbac.authorization.k8s.io/v1", "example.com/v1beta1", ""} {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion(apiVersion)
		u.SetKind("Thing")
		u.SetNamespace("ns")
		u.SetName("n")
		gvk := u.GroupVersionKind()
		want := objectID{Group: gvk.Group, Kind: gvk.Kind, Namespace: "ns", Name: "n"}
		if got := idOf(u); got != want {
			t.Errorf("apiVersion %q: idOf = %+v, want %+v", apiVersion, got, want)
		}
	}
}

// TestTheInventoryKeepsNoDigestOfAnObjectAppliedWithFieldsLeftToOthers:
// an object applied without a field left to another manager (a conflict)
// must not be trusted as it is after a restart, which forgets the
// conflict: its inventory entry gets no digest, so it is dry-run again.
func TestTheInventoryKeepsNoDigestOfAnObjectAppliedWithFieldsLeftToOthers(t *testing.T) {
	key, _, desired, hash := compareFixture(t)
	desired.SetAnnotations(map[string]string{plumbv1.AnnotationContentHash: hash})
	id := idOf(desired)
	r := &Reconciler{}
	whole, err := diff.RecordFromLive(hash, cachedAs(t, liveConfigMap(t, "3", map[string][]string{plumbv1.FieldManager: {"a", "b"}})))
	if err != nil {
		t.Fatal(err)
	}
	r.memory.remember(key, id, whole)
	if got := r.appliedFields(key, []*unstructured.Unstructured{desired})(id); got != whole.FieldsDigest() {
		t.Errorf("applied as in Git: digest %q, want %q", got, whole.FieldsDigest())
	}
	stripped := desired.DeepCopy()
	unstructured.RemoveNestedField(stripped.Object, "data", "b") // b is left to another manager
	strippedHash, err := diff.Hash(stripped)
	if err != nil {
		t.Fatal(err)
	}
	partial, err := diff.RecordFromLive(strippedHash, cachedAs(t, liveConfigMap(t, "4", map[string][]string{plumbv1.FieldManager: {"a"}, "kubectl-edit": {"b"}})))
	if err != nil {
		t.Fatal(err)
	}
	r.memory.remember(key, id, partial)
	if got := r.appliedFields(key, []*unstructured.Unstructured{desired})(id); got != "" {
		t.Errorf("applied without a field left to another manager: digest %q, want none", got)
	}
}
