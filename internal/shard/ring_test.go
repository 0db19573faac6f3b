package shard

import (
	"fmt"
	"math"
	"slices"
	"testing"
)

func members(n int) []string {
	out := make([]string, n)
	for i := range n {
		out[i] = fmt.Sprintf("plumb-%d", i)
	}
	return out
}

func loads(a Assignment) map[string]int {
	out := map[string]int{}
	for _, m := range a {
		out[m]++
	}
	return out
}

func moved(a, b Assignment) int {
	n := 0
	for s := range Slots {
		if a[s] != b[s] {
			n++
		}
	}
	return n
}

// Every slot is placed, on a member, within the bound; the placement is
// the same whatever order the members are listed in.
func TestPlaceIsBoundedAndDeterministic(t *testing.T) {
	for n := 1; n <= 9; n++ {
		ms := members(n)
		a := Place(ms, 0.25)
		capacity := int(math.Ceil(1.25 * Slots / float64(n)))
		for m, l := range loads(a) {
			if !slices.Contains(ms, m) {
				t.Fatalf("%d members: slots placed on %q", n, m)
			}
			if l > capacity {
				t.Errorf("%d members: %s holds %d slots, more than %d", n, m, l, capacity)
			}
		}
		reversed := slices.Clone(ms)
		slices.Reverse(reversed)
		if Place(append(reversed, ms[0]), 0.25) != a {
			t.Errorf("%d members: the placement depends on their order", n)
		}
	}
	if Place(nil, 0.25) != (Assignment{}) {
		t.Error("no member: slots placed")
	}
}

// A member that joins takes about its share, and few other slots move; a
// member that leaves gives up its own, and few others move.
func TestAJoinOrALeaveMovesFewSlots(t *testing.T) {
	for n := 1; n <= 8; n++ {
		before, after := Place(members(n), 0.25), Place(members(n+1), 0.25)
		share := float64(Slots) / float64(n+1)
		got := moved(before, after)
		t.Logf("%d → %d members: %d slots moved (%.1f%%), the joiner's share %.1f (%.1f%%)", n, n+1, got, 100*float64(got)/Slots, share, 100*share/Slots)
		if float64(got) > share+0.1*Slots {
			t.Errorf("%d → %d members: %d slots moved, more than the joiner's share %.1f + 10%% of the slots", n, n+1, got, share)
		}
		gone := Place(members(n + 1)[1:], 0.25) // plumb-0 leaves
		left := float64(loads(after)["plumb-0"])
		got = moved(after, gone)
		t.Logf("%d → %d members: %d slots moved, the leaver held %.0f", n+1, n, got, left)
		if float64(got) > left+0.1*Slots {
			t.Errorf("%d → %d members: %d slots moved, more than the leaver's %.0f + 10%% of the slots", n+1, n, got, left)
		}
	}
}

// Apps spread over the slots evenly enough: 10,000 Apps in 256 slots.
func TestAppsSpreadOverTheSlots(t *testing.T) {
	var counts [Slots]int
	for i := range 10000 {
		counts[SlotOf(fmt.Sprintf("team-%d", i%50), fmt.Sprintf("app-%d", i))]++
	}
	lo, hi := slices.Min(counts[:]), slices.Max(counts[:])
	if lo < 10 || hi > 80 {
		t.Errorf("Apps per slot range %d–%d for a mean of %.0f", lo, hi, 10000.0/Slots)
	}
}
