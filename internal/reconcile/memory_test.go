package reconcile

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

func TestAFieldChangeSeenAgainIsNotCountedAgain(t *testing.T) {
	var m memory
	key, id := types.NamespacedName{Namespace: "ns", Name: "app"}, objectID{Kind: "ConfigMap", Namespace: "ns", Name: "a"}
	now := time.Unix(1_000_000, 0)
	for i := range 5 { // a heal that fails, retried five times: plumb has not written the object since
		if n := m.fieldDrifted(key, id, ".data.k", "editor", "100", now.Add(time.Duration(i)*time.Second)); n != 1 {
			t.Fatalf("retry %d: %d changes counted, want 1", i, n)
		}
	}
	if n := m.fieldDrifted(key, id, ".data.k", "editor", "101", now.Add(10*time.Second)); n != 2 {
		t.Errorf("a new change counted as %d, want 2", n)
	}
	if n := m.fieldDrifted(key, id, ".data.k", "editor", "102", now.Add(conflictWindow+11*time.Second)); n != 1 {
		t.Errorf("after the window: %d changes counted, want 1", n)
	}
}

func TestTheFieldsRememberedPerObjectAreBounded(t *testing.T) {
	var m memory
	key, id := types.NamespacedName{Namespace: "ns", Name: "app"}, objectID{Kind: "ConfigMap", Namespace: "ns", Name: "a"}
	now := time.Unix(1_000_000, 0)
	for i := range 10 * maxFieldKeys { // a new manager name for every change, all at one moment
		m.fieldDrifted(key, id, ".data.k", fmt.Sprintf("manager-%d", i), fmt.Sprint(i), now)
	}
	if n := len(m.app(key).conflicts.fieldDrifts[id]); n > maxFieldKeys {
		t.Errorf("%d fields and managers remembered for one object, want at most %d", n, maxFieldKeys)
	}
}

func TestANewTermForgetsEpisodesAndConflictsNotRecords(t *testing.T) {
	var m memory
	key, id := types.NamespacedName{Namespace: "ns", Name: "app"}, objectID{Kind: "ConfigMap", Namespace: "ns", Name: "a"}
	m.drifted(key, id)
	m.fieldDrifted(key, id, ".data.k", "editor", "1", time.Now())
	m.wrote(key, id, "7")
	m.newTerm()
	if !m.drifted(key, id) {
		t.Error("a drift episode from before the term is still open: its next DriftDetected Event would be held back")
	}
	if n := len(m.app(key).conflicts.fieldDrifts[id]); n != 0 {
		t.Errorf("%d field changes from before the term are remembered", n)
	}
	if rv := m.writtenRV(key, id); rv != "7" {
		t.Errorf("plumb's own last write was forgotten (%q)", rv)
	}
}
