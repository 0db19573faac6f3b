package reconcile

import (
	"encoding/json"
	"testing"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
)

func TestSameButTimes(t *testing.T) {
	status := func(applied string, at time.Time) plumbv1.AppStatus {
		when := metav1.NewTime(at)
		return plumbv1.AppStatus{
			LastTickTime:          &when,
			LastAppliedRevision:   "main@sha1:abc",
			Inventory:             &plumbv1.Inventory{Entries: []plumbv1.InventoryEntry{{ObjectRef: plumbv1.ObjectRef{Version: "v1", Kind: "ConfigMap", Namespace: "a", Name: "x"}, AppliedFields: applied}}},
			Phases:                plumbv1.PhasesStatus{Read: plumbv1.PhaseStatus{LastSuccessTime: &when}},
			LastAttemptedRevision: "main@sha1:abc",
		}
	}
	now := time.Now()
	if !sameButTimes(status("d1", now), status("d1", now.Add(time.Minute))) {
		t.Error("statuses differing only in times are not the same")
	}
	if sameButTimes(status("d1", now), status("d2", now)) {
		t.Error("statuses whose inventories differ in one entry's applied fields are the same")
	}
	noInventory := status("d1", now)
	noInventory.Inventory = nil
	if sameButTimes(noInventory, status("d1", now)) || sameButTimes(status("d1", now), noInventory) {
		t.Error("a status without inventory is the same as one with")
	}
	other := status("d1", now)
	other.LastAppliedRevision = "main@sha1:def"
	if sameButTimes(other, status("d1", now)) {
		t.Error("statuses of different revisions are the same")
	}
}

// TestAHeartbeatPatchCarriesTheTimesAlone: merged into the status the App
// had (as the API server merges it), the heartbeat's patch gives exactly
// the status whose times moved, and it names the resourceVersion it applies
// to.
func TestAHeartbeatPatchCarriesTheTimesAlone(t *testing.T) {
	at := func(d time.Duration) *metav1.Time {
		when := metav1.NewTime(time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC).Add(d))
		return &when
	}
	before := plumbv1.App{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "n", ResourceVersion: "42"},
		Status: plumbv1.AppStatus{
			LastTickTime: at(0), LastSuccessfulTickTime: at(0), LastAppliedRevision: "main@sha1:abc",
			Inventory: &plumbv1.Inventory{Entries: []plumbv1.InventoryEntry{{ObjectRef: plumbv1.ObjectRef{Version: "v1", Kind: "ConfigMap", Name: "x"}}}},
			Phases: plumbv1.PhasesStatus{Read: plumbv1.PhaseStatus{LastSuccessTime: at(0)}, Apply: plumbv1.PhaseStatus{LastSuccessTime: at(0)},
				Diff: plumbv1.PhaseStatus{Reason: "DiffFailed", LastError: "earlier"}},
			Drift: &plumbv1.DriftSummary{Count: 1, LastDetectedTime: at(0)},
		}}
	after := *before.DeepCopy()
	after.Status.LastTickTime, after.Status.LastSuccessfulTickTime = at(time.Minute), at(time.Minute)
	after.Status.Phases.Read.LastSuccessTime, after.Status.Phases.Observe.LastSuccessTime = at(time.Minute), at(time.Minute)
	after.Status.Phases.Apply.LastSuccessTime = nil
	after.Status.Drift.LastDetectedTime = at(time.Minute)
	if !sameButTimes(before.Status, after.Status) {
		t.Fatal("the fixture differs in more than times")
	}
	patch, err := heartbeatPatch(before.ResourceVersion, after.Status)
	if err != nil {
		t.Fatal(err)
	}
	original, err := json.Marshal(before)
	if err != nil {
		t.Fatal(err)
	}
	merged, err := jsonpatch.MergePatch(original, patch)
	if err != nil {
		t.Fatal(err)
	}
	var got plumbv1.App
	if err := json.Unmarshal(merged, &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(after.Status, got.Status); diff != "" {
		t.Errorf("the status after the heartbeat (-want +got):\n%s", diff)
	}
	var fields map[string]map[string]any
	if err := json.Unmarshal(patch, &fields); err != nil || fields["metadata"]["resourceVersion"] != "42" {
		t.Errorf("the patch %s does not name resourceVersion 42 (%v)", patch, err)
	}
	if _, ok := fields["status"]["inventory"]; ok || len(patch) > 512 {
		t.Errorf("the patch carries more than times (%d bytes): %s", len(patch), patch)
	}
}
