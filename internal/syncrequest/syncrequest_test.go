package syncrequest

import (
	"testing"
	"time"
)

// TestAnswers: a sync request is answered by its own tick, or by the tick
// of the request that replaced it in the App's annotation, whatever the
// clocks that stamped them said (the CLI's machine, the dashboard's, each
// replica's).
func TestAnswers(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	request := RequestValue(at)
	behind := RequestValue(at.Add(-time.Hour)) // stamped by a clock an hour behind ours
	ahead := RequestValue(at.Add(time.Hour))   // by a clock an hour ahead
	for _, tc := range []struct {
		name               string
		handled, requested string
		want               bool
	}{
		{"our request, handled", request, request, true},
		{"ours, not handled yet; the one before, stamped by a clock ahead", ahead, request, false},
		{"ours, not handled yet; the one before, stamped by a clock behind", behind, request, false},
		{"a webhook's request replaced ours and was handled, stamped by a clock behind", behind, behind, true},
		{"a webhook's request replaced ours and was handled, stamped by a clock ahead", ahead, ahead, true},
		{"a request replaced ours and is not handled yet (the one before was)", behind, ahead, false},
		{"our request handled, then another written", request, ahead, true},
		{"none yet", "", request, false},
		{"the annotation removed, nothing handled", "", "", false},
	} {
		if got := Answers(tc.handled, request, tc.requested); got != tc.want {
			t.Errorf("%s: Answers(%q, %q, %q) = %v, want %v", tc.name, tc.handled, request, tc.requested, got, tc.want)
		}
	}
}
