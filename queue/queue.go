// Package queue runs the loop's scheduling: a typed, rate-limited workqueue
// (client-go util/workqueue) with a fallback timer. Every key it has seen is
// always scheduled again: after a successful tick at the key's next slot
// (its own phase of the interval, so that keys spread), after a failure with a per-key exponential backoff capped at
// that interval. Events only bring a tick forward, at most EventBurst at
// once and one per EventInterval on average per key, and never move the
// fallback timer. A key added many times while it waits runs once. Each
// tick is told whether the timer came due or an event asked for it. On
// stop, ticks under way keep their context for DrainTimeout. It knows
// nothing about Apps.
package queue

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
)

// Handler runs one tick for key. It returns what the tick settled about
// the key's schedule and the tick's error.
type Handler[K comparable] func(ctx context.Context, key K, wake Wake) (Outcome, error)

// Outcome is what a tick settled about its key's schedule.
type Outcome struct {
	// Interval is the key's fallback timer: its slots lie one Interval
	// apart, and it caps the backoff after a failure.
	Interval time.Duration
	// Next says how the key is scheduled after the tick.
	Next Next
}

// Next says how a key is scheduled after a tick.
type Next int

const (
	// Reschedule: the key's next slot after a success (or a terminal
	// error), its backoff after another error.
	Reschedule Next = iota
	// Drop: the key is not scheduled again until it is added again (its
	// object is gone).
	Drop
	// Keep: the tick settled nothing about the key's schedule (it only
	// re-assessed something between ticks): the key keeps its next timer
	// tick or retry and its count of failures, as if this tick had not
	// run; a key that had none gets its next slot. The tick's error is
	// not counted.
	Keep
)

// Every is the outcome of a tick that reschedules its key on interval.
func Every(interval time.Duration) Outcome { return Outcome{Interval: interval} }

// Dropped is the outcome of a tick whose key is gone.
func Dropped() Outcome { return Outcome{Next: Drop} }

// Kept is the outcome of a tick that leaves the schedule of its key, whose
// interval is interval, as it was.
func Kept(interval time.Duration) Outcome { return Outcome{Interval: interval, Next: Keep} }

// Wake says what woke a key for its tick: its timer or an event (why the
// tick runs in the App's terms, a push or a drift, is reconcile's
// Trigger).
type Wake int

const (
	// WakeTimer: the key's first tick, or its fallback timer (or the
	// retry after a failure) came due.
	WakeTimer Wake = iota
	// WakeEvent: Add or AddEvent brought the tick forward.
	WakeEvent
)

func (t Wake) String() string {
	if t == WakeTimer {
		return "timer"
	}
	return "event"
}

// terminalError marks an error that retrying cannot fix (e.g. an invalid
// spec): the key waits a full interval instead of backing off.
type terminalError struct{ err error }

func (e *terminalError) Error() string { return e.err.Error() }
func (e *terminalError) Unwrap() error { return e.err }

// Terminal wraps err so that the queue does not retry it early.
func Terminal(err error) error {
	if err == nil {
		return nil
	}
	return &terminalError{err: err}
}

// IsTerminal reports whether err was wrapped with Terminal.
func IsTerminal(err error) bool {
	var t *terminalError
	return errors.As(err, &t)
}

// Options configure a Queue. Zero values take the defaults below.
type Options[K comparable] struct {
	// Workers is how many keys are ticked at once (default 4). One key is
	// never ticked by two workers at the same time.
	Workers int
	// MetricsProvider, when set, receives client-go's workqueue metrics.
	MetricsProvider workqueue.MetricsProvider
	// BaseBackoff is the first retry delay after a failure (default 1s); it
	// doubles with each consecutive failure of the key.
	BaseBackoff time.Duration
	// MaxBackoff caps the retry delay (default 5m); the key's interval caps
	// it too, so a failing key is retried at least once per interval.
	MaxBackoff time.Duration
	// Clock is the queue's time source; tests inject a fake one.
	Clock clock.WithTicker
	// Phase places a key's fallback timer: its slots lie one interval apart
	// at Phase(key) of the interval (a number in (0, 1], counted from the
	// Unix epoch), and after a successful tick the timer comes due at the
	// first slot more than half an interval away. Keys added together — a
	// fleet of Apps created at once, or every App when the controller
	// starts — and keys whose ticks ran late together behind a backlog
	// thus return to their own places in the interval instead of ticking in
	// step. The default is a hash of the key, the same in every replica.
	Phase func(K) float64
	// OnScheduled, when set, is told after each tick how the key was
	// scheduled. It must not block.
	OnScheduled func(key K, s Scheduled)
	// EventInterval and EventBurst limit the ticks that AddEvent brings
	// forward, per key: EventBurst at once, then one per EventInterval
	// (defaults 1s and 5), so an object that changes all the time cannot
	// keep its App ticking.
	EventInterval time.Duration
	EventBurst    int
	// DrainTimeout is how long ticks under way may go on after Run's
	// context ends; then their context ends too (default 30s).
	DrainTimeout time.Duration
}

// Scheduled is how a key was scheduled after a tick: its next tick is due
// After from then, unless it was Dropped; it has failed Failures times in
// a row.
type Scheduled struct {
	After    time.Duration
	Dropped  bool
	Failures int
}

func (o *Options[K]) defaults() {
	if o.Workers <= 0 {
		o.Workers = 4
	}
	if o.BaseBackoff <= 0 {
		o.BaseBackoff = time.Second
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 5 * time.Minute
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Phase == nil {
		o.Phase = hashPhase[K]
	}
	if o.EventInterval <= 0 {
		o.EventInterval = time.Second
	}
	if o.EventBurst <= 0 {
		o.EventBurst = 5
	}
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = 30 * time.Second
	}
}

// Queue schedules keys and runs ticks for them.
type Queue[K comparable] struct {
	handler Handler[K]
	opts    Options[K]
	queue   workqueue.TypedRateLimitingInterface[K]
	// backoff counts consecutive failures per key. It is the max-of limiter
	// client-go recommends minus the overall token bucket: per-key
	// exponential backoff from BaseBackoff to MaxBackoff.
	backoff workqueue.TypedRateLimiter[K]

	mu          sync.Mutex
	cancelTicks context.CancelFunc  // ends the context of the ticks under way (set by Run)
	due         map[K]time.Time     // when the key's fallback timer (or retry) comes due
	events      map[K]*rate.Limiter // per-key limit of event ticks
	delayed     map[K]time.Time     // when an event tick held back by the limit runs
}

// New creates a queue whose workers run handler.
func New[K comparable](name string, handler Handler[K], opts Options[K]) *Queue[K] {
	opts.defaults()
	backoff := workqueue.NewTypedItemExponentialFailureRateLimiter[K](opts.BaseBackoff, opts.MaxBackoff)
	return &Queue[K]{
		handler: handler,
		opts:    opts,
		backoff: backoff,
		due:     map[K]time.Time{},
		events:  map[K]*rate.Limiter{},
		delayed: map[K]time.Time{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(backoff, workqueue.TypedRateLimitingQueueConfig[K]{
			Name:            name,
			Clock:           opts.Clock,
			MetricsProvider: opts.MetricsProvider,
		}),
	}
}

// Add asks for a tick of key as soon as a worker is free.
func (q *Queue[K]) Add(key K) { q.queue.Add(key) }

// AddEvent asks for a tick of key because something it watches changed: at
// once while the key's event budget lasts, later otherwise. It returns how
// long the tick waits. Events that arrive while a held-back tick waits join
// it and take no further budget, so a burst of events never pushes the next
// tick further out than one EventInterval.
func (q *Queue[K]) AddEvent(key K) time.Duration {
	q.mu.Lock()
	now := q.opts.Clock.Now()
	if at, ok := q.delayed[key]; ok && at.After(now) {
		q.mu.Unlock()
		return at.Sub(now)
	}
	limiter, ok := q.events[key]
	if !ok {
		limiter = rate.NewLimiter(rate.Every(q.opts.EventInterval), q.opts.EventBurst)
		q.events[key] = limiter
	}
	delay := limiter.ReserveN(now, 1).DelayFrom(now)
	if delay > 0 {
		q.delayed[key] = now.Add(delay)
	}
	q.mu.Unlock()
	if delay <= 0 {
		q.queue.Add(key)
		return 0
	}
	q.queue.AddAfter(key, delay)
	return delay
}

// AddAfter asks for an event tick of key after delay (one already due
// sooner is not delayed), outside the event budget: for a deadline the
// handler knows, such as a health timeout.
func (q *Queue[K]) AddAfter(key K, delay time.Duration) { q.queue.AddAfter(key, delay) }

// Len is the number of keys ready to tick (not those waiting for a timer).
func (q *Queue[K]) Len() int { return q.queue.Len() }

// Run starts the workers and blocks until ctx ends; then it stops taking
// keys, lets ticks under way finish, and returns. Ticks run under a context
// of their own that keeps ctx's values but ends DrainTimeout after ctx does,
// so that a stop lets them finish rather than cutting them off.
func (q *Queue[K]) Run(ctx context.Context) {
	tickCtx, cancelTicks := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelTicks()
	q.mu.Lock()
	q.cancelTicks = cancelTicks
	q.mu.Unlock()
	var wg sync.WaitGroup
	for range q.opts.Workers {
		wg.Go(func() {
			for q.processNext(ctx, tickCtx) {
			}
		})
	}
	<-ctx.Done()
	drained := make(chan struct{})
	defer close(drained)
	timer := q.opts.Clock.NewTimer(q.opts.DrainTimeout)
	go func() {
		defer timer.Stop()
		select {
		case <-timer.C():
			cancelTicks()
		case <-drained:
		}
	}()
	q.queue.ShutDownWithDrain()
	wg.Wait()
}

// processNext runs one tick under tickCtx; it returns false once the queue
// shuts down. Once run ends, keys still waiting are let go without a tick.
func (q *Queue[K]) processNext(run, tickCtx context.Context) bool {
	key, shutdown := q.queue.Get()
	if shutdown {
		return false
	}
	defer q.queue.Done(key)
	if run.Err() != nil {
		return true // stopping: finish only the ticks under way
	}

	q.mu.Lock()
	due, scheduled := q.due[key]
	delete(q.delayed, key)
	q.mu.Unlock()
	wake := WakeEvent
	if !scheduled || !q.opts.Clock.Now().Before(due) {
		wake = WakeTimer
	}
	outcome, err := q.handler(tickCtx, key, wake)
	interval := outcome.Interval
	now := q.opts.Clock.Now()
	var after time.Duration
	switch {
	case outcome.Next == Drop:
		q.backoff.Forget(key)
	case outcome.Next == Keep:
		// The timer or retry stays; a key that had none (or whose time has
		// come) gets its next slot, its failures kept.
		after = q.nextSlot(key, interval, now)
		if scheduled && due.After(now) {
			after = due.Sub(now)
		}
	case err == nil || IsTerminal(err):
		q.backoff.Forget(key)
		after = q.nextSlot(key, interval, now)
		if wake == WakeEvent && due.Sub(now) < after {
			// An event tick does not move the fallback timer: otherwise a
			// stream of events would postpone it for ever.
			after = max(due.Sub(now), 0)
		}
	default:
		after = q.backoff.When(key)
		if interval > 0 && after > interval {
			after = interval
		}
	}
	dropped := outcome.Next == Drop
	q.mu.Lock()
	if dropped {
		delete(q.due, key)
		delete(q.events, key)
		delete(q.delayed, key)
	} else {
		q.due[key] = now.Add(after)
	}
	q.mu.Unlock()
	if !dropped {
		q.queue.AddAfter(key, after)
	}
	if q.opts.OnScheduled != nil {
		q.opts.OnScheduled(key, Scheduled{After: after, Dropped: dropped, Failures: q.backoff.NumRequeues(key)})
	}
	return true
}

// hashPhase is a key's place in its interval, in (0, 1]: from a
// cryptographic hash of the key, whose every bit depends on every byte, so
// that keys that differ in one character spread evenly.
func hashPhase[K comparable](key K) float64 {
	sum := sha256.Sum256(fmt.Append(nil, key))
	return (float64(binary.BigEndian.Uint64(sum[:8])>>11) + 1) / (1 << 53)
}

// nextSlot is how long from now until the key's next timer slot: the
// first slot (see Options.Phase) more than half an interval away. A key
// that ticks at its slot is due again one interval later; one that ran
// late comes back to its slot rather than keep the lateness.
func (q *Queue[K]) nextSlot(key K, interval time.Duration, now time.Time) time.Duration {
	if interval <= 0 {
		return 0
	}
	offset := int64(q.opts.Phase(key)*float64(interval)) % int64(interval)
	earliest := now.Add(interval / 2)
	past := (earliest.UnixNano() - offset) % int64(interval)
	if past < 0 {
		past += int64(interval)
	}
	next := earliest
	if past > 0 {
		next = earliest.Add(interval - time.Duration(past))
	}
	return next.Sub(now)
}

// CancelTicks ends the context of the ticks under way at once, without
// waiting for the drain timeout (the replica lost its lease: another may
// be ticking already).
func (q *Queue[K]) CancelTicks() {
	q.mu.Lock()
	cancel := q.cancelTicks
	q.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// Failures is how many times in a row key has failed.
func (q *Queue[K]) Failures(key K) int { return q.backoff.NumRequeues(key) }
