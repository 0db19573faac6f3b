package reconcile

import (
	"testing"
	"time"

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
