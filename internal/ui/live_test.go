package ui

import (
	"errors"
	"net/http"
	"testing"
)

// TestTheHubBoundsAndDropsStreams: a viewer's and the dashboard's limits;
// a stream that falls behind is closed (its page reconnects) while the
// others go on; closing the hub ends every stream and refuses new ones.
func TestTheHubBoundsAndDropsStreams(t *testing.T) {
	var h hub
	refusal := func(err error) int {
		var httpErr *HTTPError
		if errors.As(err, &httpErr) {
			return httpErr.Status
		}
		return 0
	}
	a1, err := h.join("alice", 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.join("alice", 3, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := h.join("alice", 3, 2); refusal(err) != http.StatusTooManyRequests {
		t.Errorf("alice's third stream: %v, want 429 (2 per viewer)", err)
	}
	b, err := h.join("bob", 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.join("carol", 3, 2); refusal(err) != http.StatusTooManyRequests {
		t.Errorf("a fourth stream: %v, want 429 (3 in all)", err)
	}
	h.leave(a1)
	if _, err := h.join("carol", 3, 2); err != nil {
		t.Errorf("a stream after one left: %v", err)
	}

	// bob reads; nobody else does: their streams fall behind and close.
	row := &appRow{Namespace: "shop", Name: "web"}
	for i := 0; i < streamBuffer+1; i++ {
		h.publish(change{row: row})
		if i < streamBuffer {
			<-b.changes
		}
	}
	<-b.changes
	h.mu.Lock()
	var dropped, open int
	for s := range h.streams {
		if s.dropped {
			dropped++
		} else {
			open++
		}
	}
	h.mu.Unlock()
	if dropped != 2 || open != 1 {
		t.Errorf("%d streams dropped and %d open, want the 2 that did not read dropped and bob's open", dropped, open)
	}
	h.close()
	if _, ok := <-b.changes; ok {
		t.Error("bob's stream is open after the hub closed")
	}
	if _, err := h.join("dave", 3, 2); refusal(err) != http.StatusServiceUnavailable {
		t.Errorf("a stream after close: %v, want 503", err)
	}
	for s := range h.streams {
		h.leave(s) // no double close
	}
}
