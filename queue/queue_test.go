package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/wait"
	clocktesting "k8s.io/utils/clock/testing"
)

// recorder is a handler whose result per key the test sets, and which
// records ticks and scheduling decisions.
type recorder struct {
	mu        sync.Mutex
	ticks     map[string]int
	results   map[string]result
	schedules []schedule
	block     map[string]chan struct{} // a tick of the key waits on it
}

type result struct {
	outcome Outcome
	err     error
}

type schedule struct {
	Key      string
	After    time.Duration
	Failures int
	Dropped  bool
}

func newRecorder() *recorder {
	return &recorder{ticks: map[string]int{}, results: map[string]result{}, block: map[string]chan struct{}{}}
}

func (r *recorder) handle(_ context.Context, key string, _ Wake) (Outcome, error) {
	r.mu.Lock()
	r.ticks[key]++
	res, ok := r.results[key]
	wait := r.block[key]
	r.mu.Unlock()
	if wait != nil {
		<-wait
	}
	if !ok {
		res = result{outcome: Every(time.Minute)}
	}
	return res.outcome, res.err
}

func (r *recorder) onScheduled(key string, s Scheduled) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.schedules = append(r.schedules, schedule{key, s.After, s.Failures, s.Dropped})
}

func (r *recorder) set(key string, res result) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.results[key] = res
}

func (r *recorder) count(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ticks[key]
}

func (r *recorder) scheduled() []schedule {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]schedule(nil), r.schedules...)
}

// armedStep steps the fake clock once the workqueue's delaying loop has
// armed its timer for the next waiting key (a waiter besides its
// heartbeat ticker). Stepping while the loop is between reading the time
// and arming that timer would arm it late, past the step, and the key
// would never come due (client-go's waitingLoop reads Now, then calls
// NewTimer(readyAt-now)).
func armedStep(t *testing.T, clock *clocktesting.FakeClock, d time.Duration) {
	t.Helper()
	eventually(t, "the delaying queue's timer", func() bool { return clock.Waiters() >= 2 })
	clock.Step(d)
}

// eventually polls cond until it holds or a deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("timed out waiting for %s", what)
	}
}

func start(t *testing.T, r *recorder, opts Options[string]) (*Queue[string], *clocktesting.FakeClock) {
	t.Helper()
	clock := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	opts.Clock = clock
	opts.OnScheduled = r.onScheduled
	if opts.Phase == nil {
		opts.Phase = func(string) float64 { return 1 } // slots at whole intervals since the epoch (the fake clock starts on one)
	}
	q := New("test", r.handle, opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { q.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return q, clock
}

func TestASuccessfulTickIsScheduledAgainAtTheInterval(t *testing.T) {
	r := newRecorder()
	r.set("app", result{outcome: Every(3 * time.Minute)})
	q, clock := start(t, r, Options[string]{Workers: 1})
	q.Add("app")
	eventually(t, "the first tick", func() bool { return len(r.scheduled()) == 1 })
	if diff := cmp.Diff([]schedule{{"app", 3 * time.Minute, 0, false}}, r.scheduled()); diff != "" {
		t.Fatalf("schedule (-want +got):\n%s", diff)
	}
	armedStep(t, clock, 3*time.Minute)
	eventually(t, "the timer's tick", func() bool { return r.count("app") == 2 })
	// Many more intervals: the loop never ends.
	for i := 3; i <= 5; i++ {
		eventually(t, "the next schedule", func() bool { return len(r.scheduled()) == i-1 })
		armedStep(t, clock, 3*time.Minute)
		eventually(t, "the next tick", func() bool { return r.count("app") == i })
	}
}

func TestFailuresBackOffExponentiallyCappedAtTheInterval(t *testing.T) {
	r := newRecorder()
	r.set("app", result{outcome: Every(10 * time.Second), err: errors.New("boom")})
	q, clock := start(t, r, Options[string]{Workers: 1, BaseBackoff: time.Second, MaxBackoff: time.Hour})
	q.Add("app")
	var want []schedule
	for i, after := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second} {
		want = append(want, schedule{"app", after, i + 1, false})
		eventually(t, "a failed tick's schedule", func() bool { return len(r.scheduled()) == i+1 })
		armedStep(t, clock, after)
	}
	if diff := cmp.Diff(want, r.scheduled()[:len(want)]); diff != "" {
		t.Errorf("backoff (-want +got):\n%s", diff)
	}

	t.Run("a success resets the backoff", func(t *testing.T) {
		eventually(t, "the tick after the last step", func() bool { return len(r.scheduled()) == len(want)+1 })
		r.set("app", result{outcome: Every(10 * time.Second)})
		armedStep(t, clock, 10*time.Second)
		eventually(t, "a successful tick", func() bool { return len(r.scheduled()) == len(want)+2 })
		s := r.scheduled()
		// The success came 45 s after the start, between slots (whole 10 s):
		// the next is the first at least half an interval away, at 50 s.
		if last := s[len(s)-1]; last.After != 5*time.Second || last.Failures != 0 {
			t.Errorf("after a success: next tick in %s with %d failures, want 5s (its slot) and 0", last.After, last.Failures)
		}
		if q.Failures("app") != 0 {
			t.Errorf("Failures = %d after a success", q.Failures("app"))
		}
	})
}

func TestATickThatKeepsTheScheduleLeavesTheRetryAndTheFailuresAsTheyWere(t *testing.T) {
	r := newRecorder()
	r.set("app", result{outcome: Every(time.Hour), err: errors.New("boom")})
	q, _ := start(t, r, Options[string]{Workers: 1, BaseBackoff: time.Minute, MaxBackoff: time.Hour})
	q.Add("app")
	eventually(t, "the failed tick's schedule", func() bool { return len(r.scheduled()) == 1 })
	// An event tick 0s into the minute-long backoff that only re-assesses
	// something: the retry stays a minute away, the failure counted.
	r.set("app", result{outcome: Kept(time.Hour)})
	q.AddEvent("app")
	eventually(t, "the event tick's schedule", func() bool { return len(r.scheduled()) == 2 })
	if diff := cmp.Diff(schedule{"app", time.Minute, 1, false}, r.scheduled()[1]); diff != "" {
		t.Errorf("after a tick that keeps the schedule (-want +got):\n%s", diff)
	}
	if q.Failures("app") != 1 {
		t.Errorf("Failures = %d, want the 1 before", q.Failures("app"))
	}
}

func TestATickThatKeepsTheScheduleOfAKeyWithoutOneGetsItsSlot(t *testing.T) {
	r := newRecorder()
	r.set("app", result{outcome: Kept(time.Minute)})
	q, _ := start(t, r, Options[string]{Workers: 1})
	q.Add("app") // its first tick: no timer yet
	eventually(t, "the tick's schedule", func() bool { return len(r.scheduled()) == 1 })
	// The fake clock stands on a slot: the next is a whole interval away.
	if diff := cmp.Diff(schedule{"app", time.Minute, 0, false}, r.scheduled()[0]); diff != "" {
		t.Errorf("schedule (-want +got):\n%s", diff)
	}
}

func TestATerminalErrorWaitsAFullInterval(t *testing.T) {
	r := newRecorder()
	r.set("app", result{outcome: Every(time.Minute), err: Terminal(errors.New("invalid spec"))})
	q, _ := start(t, r, Options[string]{Workers: 1})
	q.Add("app")
	eventually(t, "the tick", func() bool { return len(r.scheduled()) == 1 })
	if diff := cmp.Diff([]schedule{{"app", time.Minute, 0, false}}, r.scheduled()); diff != "" {
		t.Errorf("schedule (-want +got):\n%s", diff)
	}
}

func TestDropForgetsTheKey(t *testing.T) {
	r := newRecorder()
	r.set("gone", result{outcome: Dropped()})
	q, _ := start(t, r, Options[string]{Workers: 1})
	q.Add("gone")
	eventually(t, "the tick", func() bool { return len(r.scheduled()) == 1 })
	if got := r.scheduled()[0]; !got.Dropped {
		t.Errorf("a dropped key was scheduled in %s", got.After)
	}
}

func TestAKeyAddedManyTimesWhileWaitingTicksOnce(t *testing.T) {
	r := newRecorder()
	release := make(chan struct{})
	r.block["busy"] = release
	q, _ := start(t, r, Options[string]{Workers: 1})
	q.Add("busy")
	eventually(t, "the busy tick to start", func() bool { return r.count("busy") == 1 })
	for range 100 {
		q.Add("app")
	}
	if q.Len() != 1 {
		t.Errorf("Len = %d after adding one key 100 times, want 1", q.Len())
	}
	close(release)
	eventually(t, "app's tick", func() bool { return len(r.scheduled()) == 2 })
	if got := r.count("app"); got != 1 {
		t.Errorf("app ticked %d times, want 1", got)
	}
	if q.Len() != 0 {
		t.Errorf("Len = %d after app's tick, want 0 (everything else waits for the timer)", q.Len())
	}
}

func TestAnEventBringsTheNextTickForward(t *testing.T) {
	r := newRecorder()
	r.set("app", result{outcome: Every(time.Hour)})
	q, _ := start(t, r, Options[string]{Workers: 2})
	q.Add("app")
	eventually(t, "the first tick", func() bool { return r.count("app") == 1 })
	q.Add("app") // e.g. a drift event, long before the hour is up
	eventually(t, "the event's tick", func() bool { return r.count("app") == 2 })
}

func TestRunStopsAfterTicksUnderWayFinish(t *testing.T) {
	r := newRecorder()
	release := make(chan struct{})
	r.block["slow"] = release
	clock := clocktesting.NewFakeClock(time.Now())
	q := New("stop", r.handle, Options[string]{Workers: 1, Clock: clock, OnScheduled: r.onScheduled})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { q.Run(ctx); close(done) }()
	q.Add("slow")
	eventually(t, "the slow tick to start", func() bool { return r.count("slow") == 1 })
	cancel()
	select {
	case <-done:
		t.Fatal("Run returned while a tick was under way")
	default:
	}
	close(release)
	<-done
	if len(r.scheduled()) != 1 {
		t.Errorf("the tick under way did not finish: %v", r.scheduled())
	}
}

// ctxRecorder is a handler that honours its context: a tick waits until
// the test releases it or its context ends, and records which came first.
type ctxRecorder struct {
	started   chan struct{}
	release   chan struct{}
	mu        sync.Mutex
	cancelled []bool
	last      context.Context // the context of the last tick
}

func (c *ctxRecorder) ctx() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

func newCtxRecorder() *ctxRecorder {
	return &ctxRecorder{started: make(chan struct{}, 10), release: make(chan struct{})}
}

func (c *ctxRecorder) handle(ctx context.Context, _ string, _ Wake) (Outcome, error) {
	c.mu.Lock()
	c.last = ctx
	c.mu.Unlock()
	c.started <- struct{}{}
	cancelled := false
	select {
	case <-ctx.Done():
		cancelled = true
	case <-c.release:
	}
	c.mu.Lock()
	c.cancelled = append(c.cancelled, cancelled)
	c.mu.Unlock()
	return Every(time.Minute), ctx.Err()
}

func (c *ctxRecorder) results() []bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]bool(nil), c.cancelled...)
}

func TestATickUnderWayKeepsItsContextAfterTheStopUntilTheDrainTimeout(t *testing.T) {
	c := newCtxRecorder()
	clock := clocktesting.NewFakeClock(time.Now())
	q := New("drain", c.handle, Options[string]{Workers: 1, Clock: clock, DrainTimeout: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { q.Run(ctx); close(done) }()
	q.Add("app")
	q.Add("waiting") // ready, but behind the tick under way
	<-c.started
	cancel() // SIGTERM: a context derived from ctx would end within this call
	if err := c.ctx().Err(); err != nil {
		t.Errorf("the stop ended the context of the tick under way: %v", err)
	}
	close(c.release)
	<-done
	if diff := cmp.Diff([]bool{false}, c.results()); diff != "" {
		t.Errorf("ticks that ran, and whether each was cancelled (-want +got):\n%s", diff)
	}
}

func TestATickUnderWayIsCancelledWhenTheDrainTimeoutEnds(t *testing.T) {
	c := newCtxRecorder()
	clock := clocktesting.NewFakeClock(time.Now())
	q := New("drain", c.handle, Options[string]{Workers: 1, Clock: clock, DrainTimeout: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { q.Run(ctx); close(done) }()
	q.Add("app")
	<-c.started
	cancel()
	// The drain timer starts once Run sees the stop; step until it fires.
	eventually(t, "Run to return after the drain timeout", func() bool {
		clock.Step(time.Minute)
		select {
		case <-done:
			return true
		default:
			return false
		}
	})
	if diff := cmp.Diff([]bool{true}, c.results()); diff != "" {
		t.Errorf("was the tick cancelled at the drain timeout? (-want +got):\n%s", diff)
	}
}

// triggerRecorder records each tick's trigger.
type triggerRecorder struct {
	mu       sync.Mutex
	triggers []Wake
	schedule []time.Duration
}

func (r *triggerRecorder) handle(_ context.Context, _ string, trigger Wake) (Outcome, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.triggers = append(r.triggers, trigger)
	return Every(time.Hour), nil
}

func (r *triggerRecorder) onScheduled(_ string, s Scheduled) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.schedule = append(r.schedule, s.After)
}

func (r *triggerRecorder) snapshot() ([]Wake, []time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Wake(nil), r.triggers...), append([]time.Duration(nil), r.schedule...)
}

func TestAnEventTickKeepsTheFallbackTimersSchedule(t *testing.T) {
	r := &triggerRecorder{}
	clock := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	q := New("triggers", r.handle, Options[string]{Workers: 1, Clock: clock,
		Phase: func(string) float64 { return 1 }, OnScheduled: r.onScheduled})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { q.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	ticks := func(n int) {
		t.Helper()
		eventually(t, "the tick", func() bool { _, s := r.snapshot(); return len(s) == n })
	}
	q.Add("app") // the first tick counts as the timer's
	ticks(1)
	armedStep(t, clock, 40*time.Minute)
	q.AddEvent("app") // drift, 40 minutes before the timer
	ticks(2)
	armedStep(t, clock, 20*time.Minute) // the hour is up
	ticks(3)
	triggers, schedule := r.snapshot()
	if diff := cmp.Diff([]Wake{WakeTimer, WakeEvent, WakeTimer}, triggers); diff != "" {
		t.Errorf("triggers (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]time.Duration{time.Hour, 20 * time.Minute, time.Hour}, schedule); diff != "" {
		t.Errorf("next ticks after each tick (-want +got):\n%s", diff)
	}
}

func TestEventTicksAreRateLimitedPerKey(t *testing.T) {
	r := &triggerRecorder{}
	clock := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	q := New("events", r.handle, Options[string]{Workers: 1, Clock: clock, EventInterval: time.Second, EventBurst: 2, OnScheduled: r.onScheduled})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { q.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	var delays []time.Duration
	for i := range 6 {
		delays = append(delays, q.AddEvent("app"))
		if delays[i] == 0 {
			eventually(t, "the event's tick", func() bool { _, s := r.snapshot(); return len(s) == i+1 })
		}
	}
	// Two at once, then one held back a second; the events after it join
	// that tick instead of pushing the next one further out.
	if diff := cmp.Diff([]time.Duration{0, 0, time.Second, time.Second, time.Second, time.Second}, delays); diff != "" {
		t.Errorf("delays of six events in a row (-want +got):\n%s", diff)
	}
	if got := q.AddEvent("other"); got != 0 {
		t.Errorf("another key's first event waits %s, want 0: the limit is per key", got)
	}
	armedStep(t, clock, time.Second)
	eventually(t, "the held-back events' one tick", func() bool { triggers, _ := r.snapshot(); return len(triggers) == 4 })
	if got := q.AddEvent("app"); got != time.Second {
		t.Errorf("an event after the held-back tick waits %s, want 1s (one token a second)", got)
	}
}

// TestKeysAddedTogetherSpreadTheirTimersOverTheInterval adds 200 keys at
// once, as a controller that starts with 200 Apps does: their timers come
// due at each key's own place in the interval (by a hash of the key)
// instead of together — and again so after all of them ran late together,
// as behind a backlog of first ticks.
func TestKeysAddedTogetherSpreadTheirTimersOverTheInterval(t *testing.T) {
	const keys, interval = 200, 100 * time.Second
	r := newRecorder()
	for i := range keys {
		r.set(fmt.Sprintf("ns/app-%03d", i), result{outcome: Every(interval)})
	}
	clock := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	q := New("fleet", r.handle, Options[string]{Workers: 4, Clock: clock, OnScheduled: r.onScheduled})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { q.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	for i := range keys {
		q.Add(fmt.Sprintf("ns/app-%03d", i))
	}
	spread := func(round int, schedules []schedule) {
		t.Helper()
		var tenths [10]int
		for _, s := range schedules {
			if s.After < interval/2 || s.After >= 3*interval/2 {
				t.Fatalf("round %d, %s: timer after %s, want within [%s, %s)", round, s.Key, s.After, interval/2, 3*interval/2)
			}
			due := clock.Now().Add(s.After)
			tenths[int(due.UnixNano()%int64(interval))*10/int(interval)]++
		}
		for i, n := range tenths {
			// 20 per tenth if even; a hash is not, but no tenth may hold a crowd.
			if n < 8 || n > 35 {
				t.Errorf("round %d: tenth %d of the interval holds %d of %d timers, want 8–35: %v", round, i, n, keys, tenths)
			}
		}
	}
	eventually(t, "every first tick", func() bool { return len(r.scheduled()) == keys })
	spread(1, r.scheduled())
	armedStep(t, clock, 3*interval/2) // every timer came due: all tick together, late
	eventually(t, "every second tick", func() bool { return len(r.scheduled()) == 2*keys })
	spread(2, r.scheduled()[keys:])
}

func TestHashPhaseIsWithinTheInterval(t *testing.T) {
	for _, key := range []string{"", "a", "ns/app", strings.Repeat("x", 1000)} {
		if p := hashPhase(key); p <= 0 || p > 1 {
			t.Errorf("hashPhase(%q) = %v, want (0, 1]", key, p)
		}
		if hashPhase(key) != hashPhase(key) {
			t.Errorf("hashPhase(%q) changes", key)
		}
	}
}

// TestAKeyTicksAtItsSlotAfterFailures: a fleet that fails together at
// first (the API server was down) must still spread once it succeeds.
func TestAKeyTicksAtItsSlotAfterFailures(t *testing.T) {
	r := newRecorder()
	r.set("app", result{outcome: Every(100 * time.Second), err: errors.New("down")})
	q, clock := start(t, r, Options[string]{Workers: 1, BaseBackoff: time.Second, Phase: func(string) float64 { return 0.25 }})
	q.Add("app")
	eventually(t, "the failed tick", func() bool { return len(r.scheduled()) == 1 })
	r.set("app", result{outcome: Every(100 * time.Second)})
	armedStep(t, clock, time.Second)
	eventually(t, "the first success", func() bool { return len(r.scheduled()) == 2 })
	armedStep(t, clock, 124*time.Second) // its slot: 25 s past a whole 100 s
	eventually(t, "the tick at its slot", func() bool { return len(r.scheduled()) == 3 })
	var afters []time.Duration
	for _, s := range r.scheduled() {
		afters = append(afters, s.After)
	}
	if diff := cmp.Diff([]time.Duration{time.Second, 124 * time.Second, 100 * time.Second}, afters); diff != "" {
		t.Errorf("next ticks (-want +got):\n%s", diff)
	}
}
