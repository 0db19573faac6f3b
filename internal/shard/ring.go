// Package shard spreads Apps over controller replicas. An App belongs to
// one of Slots slots, by a hash of its namespace and name that never
// changes; the slots are placed on the
// live members by consistent hashing with bounded loads (Mirrokni,
// Thorup and Zadimoghaddam), so that no member holds more than its share
// of slots by a bounded factor, and a member that joins or leaves moves
// few slots besides its own. The placement depends on the members alone,
// not on the Apps: every replica that sees the same members places the
// slots alike, and creating or deleting an App moves nothing.
package shard

import (
	"cmp"
	"hash/fnv"
	"math"
	"slices"
	"strconv"
)

// Slots is how many slots Apps are spread over: enough that a slot is a
// small part of any member's share, few enough that a member's label
// selector (the slots it owns) stays short.
const Slots = 256

// DefaultEpsilon bounds a member's slots at 1.1 × its share: a join moves
// a few slots besides the joiner's (at most 8 of 256 for ring_test.go's
// two sets of names, joining one by one up to 9), where a looser bound
// moves fewer but lets a member hold more.
const DefaultEpsilon = 0.1

// virtualPoints is how many points each member has on the ring.
const virtualPoints = 256

// SlotOf is the slot of the App namespace/name.
func SlotOf(namespace, name string) int {
	return int(hash64(namespace+"/"+name) % Slots)
}

// Assignment says which member owns each slot ("" when there is no
// member).
type Assignment [Slots]string

// Place puts each slot on a member: the first member clockwise from the
// slot's point on the ring that holds fewer than ceil((1+epsilon) ×
// Slots / members) slots. The result depends only on the set of members
// (in any order, repeats ignored) and epsilon.
func Place(members []string, epsilon float64) Assignment {
	var out Assignment
	members = slices.Clone(members)
	slices.Sort(members)
	members = slices.Compact(members)
	if len(members) == 0 {
		return out
	}
	type point struct {
		at    uint64
		index int // a member's, or a slot's
	}
	byPoint := func(a, b point) int {
		if c := cmp.Compare(a.at, b.at); c != 0 {
			return c
		}
		return a.index - b.index
	}
	ring := make([]point, 0, len(members)*virtualPoints)
	for i, m := range members {
		for v := range virtualPoints {
			ring = append(ring, point{at: hash64(m + "#" + strconv.Itoa(v)), index: i})
		}
	}
	slices.SortFunc(ring, byPoint)
	// Slots are placed in the order of their own points on the ring, the
	// same order whatever the members.
	order := make([]point, Slots)
	for s := range Slots {
		order[s] = point{at: hash64("slot#" + strconv.Itoa(s)), index: s}
	}
	slices.SortFunc(order, byPoint)
	capacity := int(math.Ceil((1 + epsilon) * float64(Slots) / float64(len(members))))
	load := make([]int, len(members))
	for _, slot := range order {
		start, _ := slices.BinarySearchFunc(ring, slot.at, func(p point, at uint64) int { return cmp.Compare(p.at, at) })
		for i := range ring {
			p := ring[(start+i)%len(ring)]
			if load[p.index] < capacity {
				load[p.index]++
				out[slot.index] = members[p.index]
				break
			}
		}
	}
	return out
}

// hash64 is a well-spread 64-bit hash of s: FNV-1a, whose low bits spread
// poorly over similar strings, finished with a mixer (MurmurHash3's).
func hash64(s string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s))
	sum := h.Sum64()
	sum ^= sum >> 33
	sum *= 0xff51afd7ed558ccd
	sum ^= sum >> 33
	sum *= 0xc4ceb9fe1a85ec53
	sum ^= sum >> 33
	return sum
}
