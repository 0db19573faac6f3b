package v1alpha1

import "testing"

func TestUnlistedCountsWhatAListLeavesOut(t *testing.T) {
	var (
		noDrift  *DriftSummary
		noHealth *HealthStatus
		noChange *ChangeSet
	)
	for name, c := range map[string]struct{ got, want int }{
		"drift, two of five listed":        {(&DriftSummary{Count: 5, Objects: make([]DriftedObject, 2)}).Unlisted(), 3},
		"drift, all listed":                {(&DriftSummary{Count: 2, Objects: make([]DriftedObject, 2)}).Unlisted(), 0},
		"drift, none":                      {noDrift.Unlisted(), 0},
		"health, counted and listed":       {(&HealthStatus{Current: 9, InProgress: 2, Failed: 1, Terminating: 1, NotFound: 1, Unknown: 1, Unhealthy: make([]UnhealthyObject, 4)}).Unlisted(), 2},
		"health, not current":              {(&HealthStatus{Current: 9, InProgress: 2, Failed: 1, Terminating: 1, NotFound: 1, Unknown: 1}).NotCurrent(), 6},
		"health, none":                     {noHealth.Unlisted(), 0},
		"change set, changed":              {(&ChangeSet{Created: 1, Configured: 2, Deleted: 3}).Changed(), 6},
		"change set, one listed":           {(&ChangeSet{Created: 1, Configured: 2, Deleted: 3, Entries: make([]ChangeSetEntry, 1)}).Unlisted(), 5},
		"change set, more listed than set": {(&ChangeSet{Created: 1, Entries: make([]ChangeSetEntry, 2)}).Unlisted(), 0},
		"change set, none":                 {noChange.Unlisted(), 0},
	} {
		if c.got != c.want {
			t.Errorf("%s: got %d, want %d", name, c.got, c.want)
		}
	}
}
