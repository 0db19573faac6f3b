package shard

import (
	"context"
	"testing"
	"time"
)

// A tick of a slot not held is refused; releasing a slot waits for its
// tick under way, and ticks of other slots are not waited for.
func TestTheGateDrainsAReleasedSlot(t *testing.T) {
	g := NewGate()
	if _, _, ok := g.Enter(context.Background(), 3); ok {
		t.Fatal("a tick of a slot not held entered")
	}
	g.Take([]int{3, 4})
	_, leave3, ok := g.Enter(context.Background(), 3)
	if !ok {
		t.Fatal("a tick of a held slot was refused")
	}
	_, leave4, _ := g.Enter(context.Background(), 4)
	defer leave4()
	released := make(chan struct{})
	go func() { g.Release([]int{3}, time.Hour); close(released) }()
	waitUntil(t, "slot 3 to be let go", func() bool { return !g.Holds(3) })
	if _, _, ok := g.Enter(context.Background(), 3); ok {
		t.Error("a tick of a slot being released entered")
	}
	select {
	case <-released:
		t.Fatal("Release returned while the slot's tick runs")
	case <-time.After(50 * time.Millisecond):
	}
	leave3()
	<-released
	if !g.Holds(4) {
		t.Error("releasing slot 3 let slot 4 go")
	}
}

// A tick still running when the release times out is cancelled; losing
// every slot cancels every tick at once, and waits for them to leave.
func TestTheGateCancelsTicksThatDoNotEnd(t *testing.T) {
	g := NewGate()
	g.Take([]int{1, 2})
	ctx1, leave1, _ := g.Enter(context.Background(), 1)
	go func() { <-ctx1.Done(); leave1() }() // a tick that ends only when cancelled
	g.Release([]int{1}, 10*time.Millisecond)
	if ctx1.Err() == nil {
		t.Error("Release returned, and the tick that did not end was not cancelled")
	}
	ctx2, leave2, _ := g.Enter(context.Background(), 2)
	left := make(chan struct{})
	go func() { <-ctx2.Done(); close(left); leave2() }() // a tick that ends when cancelled
	g.Lose()
	select {
	case <-left:
	default:
		t.Error("Lose returned before the cancelled tick left")
	}
	if g.Holds(2) {
		t.Error("Lose left a slot held")
	}
}
