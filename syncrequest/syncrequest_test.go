package syncrequest

import (
	"testing"
	"time"
)

func TestAnswers(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	request := RequestValue(at) // a whole second: "…00Z"
	previous := RequestValue(at.Add(-time.Minute))
	for _, tc := range []struct {
		name     string
		handled  string
		previous string
		want     bool
	}{
		{"the same request", request, previous, true},
		{"a later request (a webhook's)", RequestValue(at.Add(time.Millisecond)), previous, true},
		{"a later one whose text sorts first (\"…00.1Z\" < \"…00Z\")", RequestValue(at.Add(100 * time.Millisecond)), previous, true},
		{"an earlier request", RequestValue(at.Add(-time.Millisecond)), previous, false},
		{"the one handled before ours, stamped later by a clock ahead", RequestValue(at.Add(time.Second)), RequestValue(at.Add(time.Second)), false},
		{"none yet", "", "", false},
		{"a value by hand that is no time", "now", previous, false},
	} {
		if got := Answers(tc.handled, request, tc.previous); got != tc.want {
			t.Errorf("%s: Answers(%q, %q, %q) = %v, want %v", tc.name, tc.handled, request, tc.previous, got, tc.want)
		}
	}
}
