package notify

import (
	"context"
	"sync"
)

// Terms hands events to the Dispatcher of the current leadership term.
// Each term delivers with a Dispatcher of its own, made when it starts and
// stopped when it ends, so that nothing of one term outlives it: a replica
// that lost the Lease neither delivers what it had queued nor refreshes
// the alerts it had opened, which the new leader may have resolved since.
// Between terms events are dropped (counted as the intake's): the next
// leader's ticks report what is still true.
type Terms struct {
	opts Options

	mu      sync.Mutex
	current *Dispatcher // nil between terms
}

// NewTerms makes a Terms whose Dispatchers use opts.
func NewTerms(opts Options) *Terms {
	opts.defaults()
	return &Terms{opts: opts}
}

// Notify hands e to the current term's Dispatcher, or drops it between
// terms. It never blocks.
func (t *Terms) Notify(e Event) {
	t.mu.Lock()
	d := t.current
	t.mu.Unlock()
	if d == nil {
		t.opts.Metrics.ObserveNotification("intake", "dropped")
		return
	}
	d.Notify(e)
}

// Begin starts delivering for one term, with a new Dispatcher that takes
// events from the moment Begin returns, until ctx ends. end waits until
// that Dispatcher has stopped.
func (t *Terms) Begin(ctx context.Context) (end func()) {
	d := New(t.opts)
	t.mu.Lock()
	t.current = d
	t.mu.Unlock()
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		_ = d.Start(ctx)
		t.mu.Lock()
		if t.current == d {
			t.current = nil
		}
		t.mu.Unlock()
	}()
	return func() { <-stopped }
}
