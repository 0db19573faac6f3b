package shard

import (
	"context"
	"sync"
	"time"
)

// Gate lets a replica's ticks run only for the slots it holds: a tick
// enters the gate for its App's slot, and is refused when the slot is
// not held. Releasing slots waits for their ticks under way to end
// (cancelling those still running after a timeout); losing every slot
// (the member's Lease could not be renewed) cancels every tick at once.
type Gate struct {
	mu      sync.Mutex
	held    [Slots]bool
	running [Slots]map[*tickEntry]struct{}
	ended   chan struct{} // closed and replaced whenever a tick leaves
}

type tickEntry struct{ cancel context.CancelFunc }

// NewGate is a gate that holds no slot.
func NewGate() *Gate { return &Gate{ended: make(chan struct{})} }

// Enter admits a tick of slot: it returns the tick's context (ended when
// the slot is lost) and leave, to call when the tick ends; ok is false
// when the slot is not held.
func (g *Gate) Enter(ctx context.Context, slot int) (tickCtx context.Context, leave func(), ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.held[slot] {
		return nil, nil, false
	}
	tickCtx, cancel := context.WithCancel(ctx)
	e := &tickEntry{cancel: cancel}
	if g.running[slot] == nil {
		g.running[slot] = map[*tickEntry]struct{}{}
	}
	g.running[slot][e] = struct{}{}
	return tickCtx, func() {
		cancel()
		g.mu.Lock()
		defer g.mu.Unlock()
		delete(g.running[slot], e)
		close(g.ended)
		g.ended = make(chan struct{})
	}, true
}

// Holds says the slot is held.
func (g *Gate) Holds(slot int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held[slot]
}

// Take lets ticks of slots in.
func (g *Gate) Take(slots []int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, s := range slots {
		g.held[s] = true
	}
}

// Release lets no more ticks of slots in, and returns when their ticks
// under way have ended: those still running after timeout are cancelled,
// and waited for.
func (g *Gate) Release(slots []int, timeout time.Duration) {
	g.mu.Lock()
	for _, s := range slots {
		g.held[s] = false
	}
	g.mu.Unlock()
	if timeout <= 0 {
		g.cancel(slots)
	}
	deadline := time.NewTimer(max(timeout, time.Nanosecond))
	defer deadline.Stop()
	for {
		g.mu.Lock()
		busy := false
		for _, s := range slots {
			busy = busy || len(g.running[s]) > 0
		}
		ended := g.ended
		g.mu.Unlock()
		if !busy {
			return
		}
		select {
		case <-ended:
		case <-deadline.C:
			g.cancel(slots)
		}
	}
}

// Lose lets no tick in, cancels every tick under way at once, and waits
// for them to leave.
func (g *Gate) Lose() {
	all := make([]int, Slots)
	for s := range all {
		all[s] = s
	}
	g.Release(all, 0)
}

func (g *Gate) cancel(slots []int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, s := range slots {
		for e := range g.running[s] {
			e.cancel()
		}
	}
}
