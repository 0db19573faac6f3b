package syncrequest

import (
	"testing"
	"time"
)

func TestAnswers(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 500_000_000, time.UTC)
	request := RequestValue(at)
	for _, tc := range []struct {
		name    string
		handled string
		want    bool
	}{
		{"the same request", request, true},
		{"a later request (a webhook's)", RequestValue(at.Add(time.Millisecond)), true},
		{"a later one whose text sorts first (no trailing zeros)", RequestValue(at.Add(500 * time.Millisecond)), true},
		{"an earlier request", RequestValue(at.Add(-time.Millisecond)), false},
		{"none yet", "", false},
		{"a value by hand that is no time", "now", false},
	} {
		if got := Answers(tc.handled, request); got != tc.want {
			t.Errorf("%s: Answers(%q, %q) = %v, want %v", tc.name, tc.handled, request, got, tc.want)
		}
	}
}
