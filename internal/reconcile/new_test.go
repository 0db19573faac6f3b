package reconcile

import (
	"strings"
	"testing"
)

// New refuses a Reconciler that lacks a part the tick needs, and names
// every part it lacks.
func TestNewNamesWhatItLacks(t *testing.T) {
	_, err := New(Deps{})
	if err == nil {
		t.Fatal("New made a Reconciler of no parts")
	}
	for _, part := range []string{"Applier", "Client", "Credentials", "Events", "Mapper", "NewObserver", "Reader"} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("the error %q does not name the missing %s", err, part)
		}
	}
}
