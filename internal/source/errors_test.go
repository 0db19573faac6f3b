package source

import (
	"fmt"
	"testing"

	"github.com/plumb-dev/plumb/internal/source/git"
)

// A remote that sends more than the transfer limits fails the Read with
// LimitExceeded, and is tried again at the next tick (a transfer, not the
// revision's content).
func TestATransferOverTheLimitIsLimitExceededAndRetried(t *testing.T) {
	err := classify("", fmt.Errorf("fetching branch main from https://git.example.com/x.git: %w: the pack is larger than 1 bytes", git.ErrTooLarge))
	if ReasonOf(err) != ReasonLimitExceeded || lasting(err) {
		t.Errorf("%v: reason %s, lasting %v; want LimitExceeded, not lasting", err, ReasonOf(err), lasting(err))
	}
}
