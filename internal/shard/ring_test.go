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
		a := Place(ms, DefaultEpsilon)
		capacity := int(math.Ceil((1 + DefaultEpsilon) * Slots / float64(n)))
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
		if Place(append(reversed, ms[0]), DefaultEpsilon) != a {
			t.Errorf("%d members: the placement depends on their order", n)
		}
	}
	if Place(nil, DefaultEpsilon) != (Assignment{}) {
		t.Error("no member: slots placed")
	}
}

// A member that joins takes about its share, and only a few other slots
// move (at most 8 of 256: what the bound on the others' load costs); a
// member that leaves gives up its own, and as few others move. Measured
// for members named as a StatefulSet's pods and as single letters.
func TestAJoinOrALeaveMovesFewSlots(t *testing.T) {
	const extraBound = 8
	for _, names := range [][]string{members(9), {"a", "b", "c", "d", "e", "f", "g", "h", "i"}} {
		for n := 1; n < len(names); n++ {
			before, after := Place(names[:n], DefaultEpsilon), Place(names[:n+1], DefaultEpsilon)
			joiner := loads(after)[names[n]]
			got := moved(before, after)
			t.Logf("%s…: %d → %d members: %d slots moved (%.1f%%), the joiner's %d, its share %.1f", names[0], n, n+1, got, 100*float64(got)/Slots, joiner, float64(Slots)/float64(n+1))
			if got-joiner > extraBound {
				t.Errorf("%d → %d members: %d slots moved besides the joiner's %d", n, n+1, got-joiner, joiner)
			}
			gone := Place(names[1:n+1], DefaultEpsilon) // the first leaves
			left := loads(after)[names[0]]
			if got := moved(after, gone); got-left > extraBound {
				t.Errorf("%d → %d members: %d slots moved besides the leaver's %d", n+1, n, got-left, left)
			}
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
