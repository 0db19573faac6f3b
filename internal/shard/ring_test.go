package shard

import (
	"fmt"
	"math"
	"math/rand"
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

// podNames are n names as a Deployment's pods have them
// (plumb-<hash>-<5 characters>), from r.
func podNames(r *rand.Rand, n int) []string {
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	out := make([]string, n)
	for i := range out {
		b := make([]byte, 5)
		for j := range b {
			b[j] = alphabet[r.Intn(len(alphabet))]
		}
		out[i] = fmt.Sprintf("plumb-%07x-%s", r.Uint32()&0xfffffff, b)
	}
	return out
}

// A member that joins takes about its share, and only a few other slots
// move (what the bound on the others' load costs: at most 16 of 256 here,
// not a guarantee); a member that leaves gives up its own, and as few
// others move. Measured for members named as a StatefulSet's pods, as
// single letters, and as 300 sets of a Deployment's pods (a fixed seed).
func TestAJoinOrALeaveMovesFewSlots(t *testing.T) {
	const extraBound = 16
	sets := [][]string{members(9), {"a", "b", "c", "d", "e", "f", "g", "h", "i"}}
	r := rand.New(rand.NewSource(1))
	for i := range 300 {
		sets = append(sets, podNames(r, 2+i%5))
	}
	most, fewest := 0, 1.0
	for i, names := range sets {
		for n := 1; n < len(names); n++ {
			before, after := Place(names[:n], DefaultEpsilon), Place(names[:n+1], DefaultEpsilon)
			joiner := loads(after)[names[n]]
			got := moved(before, after)
			if i < 2 {
				t.Logf("%s…: %d → %d members: %d slots moved (%.1f%%), the joiner's %d, its share %.1f", names[0], n, n+1, got, 100*float64(got)/Slots, joiner, float64(Slots)/float64(n+1))
			}
			most = max(most, got-joiner)
			for _, l := range loads(after) {
				fewest = min(fewest, float64(l)*float64(n+1)/Slots)
			}
			if got-joiner > extraBound {
				t.Errorf("%v: %d → %d members: %d slots moved besides the joiner's %d", names, n, n+1, got-joiner, joiner)
			}
			gone := Place(names[1:n+1], DefaultEpsilon) // the first leaves
			left := loads(after)[names[0]]
			if got := moved(after, gone); got-left > extraBound {
				t.Errorf("%v: %d → %d members: %d slots moved besides the leaver's %d", names, n+1, n, got-left, left)
			}
			most = max(most, moved(after, gone)-left)
		}
	}
	t.Logf("over %d sets of members: at most %d slots moved besides the joiner's or leaver's; the least loaded member held %.2f of its share", len(sets), most, fewest)
	if fewest < 0.5 {
		t.Errorf("a member held %.2f of its share, under half", fewest)
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
