package notify

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/egress"
)

// Lister lists the Notifications of a namespace (from a cache).
type Lister func(ctx context.Context, namespace string) ([]plumbv1.Notification, error)

// SecretReader reads a Secret (with no cache of all Secrets).
type SecretReader func(ctx context.Context, key types.NamespacedName) (*corev1.Secret, error)

// Recorder counts deliveries (package metrics). Results are "delivered",
// "failed" (given up after retries, or refused for good) and "dropped" (a
// queue was full).
type Recorder interface {
	ObserveNotification(sink, result string)
	ObserveNotificationAttemptFailure(sink string)
}

// Options configure a Dispatcher. Zero values take the defaults.
type Options struct {
	Notifications Lister
	Secrets       SecretReader
	// Client sends the requests (default: NewClient(egress.DefaultBlockedPrefixes())).
	Client *http.Client
	// Workers deliver at once, each to a different Notification (default
	// 4); PerNamespace of them at most to the Notifications of one
	// namespace (default half the workers, at least 1), so that a team
	// whose sinks hang cannot hold back every other team's.
	Workers      int
	PerNamespace int
	// Intake bounds the events waiting to be routed (default 1000);
	// PerNotification bounds each Notification's queue (default 100). An
	// event that finds a queue full is dropped and counted.
	Intake          int
	PerNotification int
	// BaseBackoff and MaxBackoff bound the wait between attempts (defaults
	// 1s and 5m); an event is given up MaxAge after it was queued (default
	// 1h).
	BaseBackoff, MaxBackoff, MaxAge time.Duration
	// RequestTimeout bounds one request (default 10s).
	RequestTimeout time.Duration
	// AlertRefresh is how often open Alertmanager alerts are posted again,
	// each time valid for three times as long (default 5m).
	AlertRefresh time.Duration
	Metrics      Recorder
	// Report, when set, is told when delivery to a Notification starts to
	// work or to fail, or fails for another reason (for its status). It may
	// take a request's time; it must not call the Dispatcher.
	Report func(key types.NamespacedName, delivered bool, message string)
	// QueueMetrics, when set, receives client-go's workqueue metrics of
	// the queue of Notifications (named "notifications").
	QueueMetrics workqueue.MetricsProvider
	Log          *zap.Logger
	Clock        clock.WithTicker
}

func (o *Options) defaults() {
	if o.Client == nil {
		o.Client = NewClient(egress.DefaultBlockedPrefixes())
	}
	if o.Workers <= 0 {
		o.Workers = 4
	}
	if o.PerNamespace <= 0 {
		o.PerNamespace = max(1, o.Workers/2)
	}
	if o.Intake <= 0 {
		o.Intake = 1000
	}
	if o.PerNotification <= 0 {
		o.PerNotification = 100
	}
	if o.BaseBackoff <= 0 {
		o.BaseBackoff = time.Second
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 5 * time.Minute
	}
	if o.MaxAge <= 0 {
		o.MaxAge = time.Hour
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = 10 * time.Second
	}
	if o.AlertRefresh <= 0 {
		o.AlertRefresh = 5 * time.Minute
	}
	if o.Metrics == nil {
		o.Metrics = noMetrics{}
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
}

type noMetrics struct{}

func (noMetrics) ObserveNotification(string, string)       {}
func (noMetrics) ObserveNotificationAttemptFailure(string) {}

// Dispatcher routes events to the Notifications that want them and
// delivers them.
type Dispatcher struct {
	opts   Options
	intake chan Event
	queue  workqueue.TypedRateLimitingInterface[types.NamespacedName]

	mu       sync.Mutex
	outboxes map[types.NamespacedName]*outbox
	alerts   map[alertKey]*openAlert         // open Alertmanager alerts, posted again until resolved
	reported map[types.NamespacedName]string // the state last told to Report: "" delivered, else the failure
	busy     map[string]int                  // deliveries under way, by namespace
}

// namespaceWait is how long a Notification waits when its namespace has
// PerNamespace deliveries under way.
const namespaceWait = 200 * time.Millisecond

// outbox is one Notification's queue of events, delivered in order.
type outbox struct {
	sink    string
	pending []*delivery
	failing bool // the last attempt failed (its failure was logged)
}

// delivery is one event on its way to one Notification.
type delivery struct {
	event  Event
	queued time.Time
	// refresh marks a repeat of an open Alertmanager alert: not counted as
	// an event of its own.
	refresh bool
}

// New makes a Dispatcher; Start runs it.
func New(opts Options) *Dispatcher {
	opts.defaults()
	return &Dispatcher{
		opts:   opts,
		intake: make(chan Event, opts.Intake),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[types.NamespacedName](opts.BaseBackoff, opts.MaxBackoff),
			workqueue.TypedRateLimitingQueueConfig[types.NamespacedName]{Name: "notifications", Clock: opts.Clock, MetricsProvider: opts.QueueMetrics}),
		outboxes: map[types.NamespacedName]*outbox{},
		alerts:   map[alertKey]*openAlert{},
		reported: map[types.NamespacedName]string{},
		busy:     map[string]int{},
	}
}

// Notify hands an event over for delivery. It never blocks: when the
// intake is full the event is dropped and counted.
func (d *Dispatcher) Notify(e Event) {
	select {
	case d.intake <- e:
	default:
		d.opts.Metrics.ObserveNotification("intake", "dropped")
	}
}

// Start routes and delivers until ctx ends. Events not delivered by then
// are lost, and open alerts are no longer refreshed (the next leader's
// ticks report what is still true; an alert not posted again resolves in
// Alertmanager when its endsAt passes). A Dispatcher runs once: Terms
// makes one per leadership term.
func (d *Dispatcher) Start(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Go(func() { d.route(ctx) })
	wg.Go(func() { d.refreshAlerts(ctx) })
	for range d.opts.Workers {
		wg.Go(func() {
			for d.deliverNext(ctx) {
			}
		})
	}
	<-ctx.Done()
	d.queue.ShutDown()
	wg.Wait()
	return nil
}

// route takes events from the intake and queues them for each Notification
// of the App's namespace that wants them.
func (d *Dispatcher) route(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case e := <-d.intake:
			listCtx, cancel := context.WithTimeout(ctx, d.opts.RequestTimeout)
			notifications, err := d.opts.Notifications(listCtx, e.App.Namespace)
			cancel()
			if err != nil {
				d.opts.Log.Warn("Could not list the Notifications of a namespace; an event is not sent",
					zap.String("namespace", e.App.Namespace), zap.String("event", string(e.Kind)), zap.Error(err))
				d.opts.Metrics.ObserveNotification("intake", "dropped")
				continue
			}
			for i := range notifications {
				n := &notifications[i]
				key := types.NamespacedName{Namespace: n.Namespace, Name: n.Name}
				if wants(n, &e) || d.resolves(n, &e) {
					d.enqueue(key, string(n.Spec.Type), &delivery{event: e, queued: d.opts.Clock.Now()})
				}
			}
		}
	}
}

// wants reports whether Notification n sends event e.
func wants(n *plumbv1.Notification, e *Event) bool {
	if n.Spec.Suspend || n.Namespace != e.App.Namespace || !acceptsKind(n.Spec.Type, n.Spec.Events, e.Kind) {
		return false
	}
	if n.Spec.AppSelector == nil {
		return true
	}
	selector, err := metav1.LabelSelectorAsSelector(n.Spec.AppSelector)
	return err == nil && selector.Matches(labels.Set(e.AppLabels))
}

// resolves reports whether e ends an alert that Notification n holds open
// for e's App, or will once the firing post queued for it is sent: n gets
// it whatever its events and appSelector say now (they may have changed
// since the alert fired, or never asked for resolves), or Alertmanager
// would be told the alert fires for ever. An alert held by a Notification
// that is no longer an Alertmanager one is forgotten.
func (d *Dispatcher) resolves(n *plumbv1.Notification, e *Event) bool {
	if e.Kind != plumbv1.EventDriftResolved {
		return false
	}
	key := alertKey{notification: types.NamespacedName{Namespace: n.Namespace, Name: n.Name}, app: e.App}
	d.mu.Lock()
	defer d.mu.Unlock()
	_, open := d.alerts[key]
	if !open && !d.firingQueued(key) {
		return false
	}
	if n.Spec.Type != plumbv1.SinkAlertmanager {
		delete(d.alerts, key)
		return false
	}
	return true
}

// firingQueued reports whether key's Notification has a DriftDetected of
// key's App queued or under way (not yet an open alert); d.mu is held.
func (d *Dispatcher) firingQueued(key alertKey) bool {
	box := d.outboxes[key.notification]
	if box == nil {
		return false
	}
	for _, dl := range box.pending {
		if dl.event.App == key.app && dl.event.Kind == plumbv1.EventDriftDetected && !dl.refresh {
			return true
		}
	}
	return false
}

// enqueue adds a delivery to the queue of Notification key, or drops it
// when the queue is full.
func (d *Dispatcher) enqueue(key types.NamespacedName, sink string, dl *delivery) bool {
	d.mu.Lock()
	added, first := d.enqueueLocked(key, sink, dl)
	d.mu.Unlock()
	d.scheduleAdded(key, sink, dl, added, first)
	return added
}

// enqueueLocked appends dl to key's queue; d.mu is held. It reports whether
// it did, and whether dl is the queue's first (the key then needs
// scheduling; otherwise it is scheduled already, for a delivery under way
// or a retry whose backoff a new event must not cut short).
func (d *Dispatcher) enqueueLocked(key types.NamespacedName, sink string, dl *delivery) (added, first bool) {
	box, ok := d.outboxes[key]
	if !ok {
		box = &outbox{sink: sink} // the sink label stays while the queue lasts
		d.outboxes[key] = box
	}
	if len(box.pending) >= d.opts.PerNotification {
		return false, false
	}
	box.pending = append(box.pending, dl)
	return true, len(box.pending) == 1
}

// scheduleAdded schedules key after enqueueLocked, or counts a drop.
func (d *Dispatcher) scheduleAdded(key types.NamespacedName, sink string, dl *delivery, added, first bool) {
	switch {
	case !added && !dl.refresh:
		d.opts.Metrics.ObserveNotification(sink, "dropped")
	case first:
		d.queue.Add(key)
	}
}

// deliverNext sends the head of one Notification's queue; it returns false
// once the queue shuts down.
func (d *Dispatcher) deliverNext(ctx context.Context) bool {
	key, shutdown := d.queue.Get()
	if shutdown {
		return false
	}
	defer d.queue.Done(key)
	d.mu.Lock()
	box := d.outboxes[key]
	var head *delivery
	if box != nil && len(box.pending) > 0 {
		head = box.pending[0]
	}
	d.mu.Unlock()
	if head == nil {
		d.queue.Forget(key)
		return true
	}
	if !d.claim(key.Namespace) {
		d.queue.AddAfter(key, namespaceWait)
		return true
	}
	defer d.release(key.Namespace)
	n, err := d.current(ctx, key)
	if err == nil && n == nil {
		d.drop(key) // the Notification is gone, or no longer wants events
		return true
	}
	if err == nil {
		err = d.send(ctx, n, head)
	}
	if err != nil && ctx.Err() != nil {
		// The term ended during the attempt: no failure of the sink's, so
		// neither reported in its status nor logged; the event is dropped
		// with the term's other queued ones.
		d.finish(key, box.sink, head, "dropped")
		d.queue.Forget(key)
		return true
	}
	now := d.opts.Clock.Now()
	d.report(key, err)
	var permanent *permanentError
	switch {
	case err == nil:
		d.recovered(key, box)
		d.finish(key, box.sink, head, "delivered")
	case errors.As(err, &permanent) || now.Sub(head.queued) >= d.opts.MaxAge:
		d.opts.Metrics.ObserveNotificationAttemptFailure(box.sink)
		d.logFailure(key, box, err, "gave up")
		if head.event.Kind == plumbv1.EventDriftResolved {
			d.untrack(key, head.event.App) // not refreshed as firing for ever
		}
		d.finish(key, box.sink, head, "failed")
	default:
		d.opts.Metrics.ObserveNotificationAttemptFailure(box.sink)
		d.logFailure(key, box, err, "will retry")
		d.queue.AddRateLimited(key)
		return true
	}
	d.queue.Forget(key)
	d.mu.Lock()
	more := len(box.pending) > 0
	d.mu.Unlock()
	if more {
		d.queue.Add(key)
	}
	return true
}

// claim takes one of a namespace's PerNamespace delivery slots, if one is free.
func (d *Dispatcher) claim(namespace string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.busy[namespace] >= d.opts.PerNamespace {
		return false
	}
	d.busy[namespace]++
	return true
}

// release gives a namespace's delivery slot back.
func (d *Dispatcher) release(namespace string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.busy[namespace]--; d.busy[namespace] <= 0 {
		delete(d.busy, namespace)
	}
}

// current is Notification key as the cache has it now; nil when it is gone
// or suspended.
func (d *Dispatcher) current(ctx context.Context, key types.NamespacedName) (*plumbv1.Notification, error) {
	listCtx, cancel := context.WithTimeout(ctx, d.opts.RequestTimeout)
	defer cancel()
	list, err := d.opts.Notifications(listCtx, key.Namespace)
	if err != nil {
		return nil, fmt.Errorf("listing Notifications: %w", err)
	}
	for i := range list {
		if list[i].Name == key.Name && !list[i].Spec.Suspend {
			return &list[i], nil
		}
	}
	return nil, nil
}

// finish takes the head off key's queue and counts it for sink.
func (d *Dispatcher) finish(key types.NamespacedName, sink string, head *delivery, result string) {
	d.mu.Lock()
	box := d.outboxes[key] // nil when the Notification was forgotten meanwhile (forgetGone)
	if box != nil && len(box.pending) > 0 && box.pending[0] == head {
		box.pending[0] = nil
		box.pending = box.pending[1:]
	}
	if box != nil && len(box.pending) == 0 {
		delete(d.outboxes, key)
	}
	d.mu.Unlock()
	if !head.refresh {
		d.opts.Metrics.ObserveNotification(sink, result)
	}
}

// report tells Report how the attempt went, when that differs from what
// it was told last.
func (d *Dispatcher) report(key types.NamespacedName, err error) {
	if d.opts.Report == nil {
		return
	}
	state := ""
	if err != nil {
		state = err.Error()
	}
	d.mu.Lock()
	last, known := d.reported[key]
	d.reported[key] = state
	d.mu.Unlock()
	if !known || last != state {
		d.opts.Report(key, err == nil, state)
	}
}

// drop forgets key's queue and open alerts (its Notification is gone).
func (d *Dispatcher) drop(key types.NamespacedName) {
	d.mu.Lock()
	delete(d.outboxes, key)
	delete(d.reported, key)
	for a := range d.alerts {
		if a.notification == key {
			delete(d.alerts, a)
		}
	}
	d.mu.Unlock()
	d.queue.Forget(key)
}

// recovered logs that a Notification that was failing delivers again.
func (d *Dispatcher) recovered(key types.NamespacedName, box *outbox) {
	d.mu.Lock()
	was := box.failing
	box.failing = false
	d.mu.Unlock()
	if was {
		d.opts.Log.Info("Delivering notifications again", zap.Stringer("notification", key), zap.String("sink", box.sink))
	}
}

// logFailure logs a Notification's failure once per run of failures.
func (d *Dispatcher) logFailure(key types.NamespacedName, box *outbox, err error, what string) {
	d.mu.Lock()
	first := !box.failing
	box.failing = true
	d.mu.Unlock()
	if first || what == "gave up" {
		d.opts.Log.Warn("Could not deliver a notification; "+what, zap.Stringer("notification", key),
			zap.String("sink", box.sink), zap.Error(err))
	}
}

// permanentError is a refusal that retrying cannot change (a 4xx answer
// other than 408 and 429, or a Notification that cannot be sent as
// configured).
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// send builds n's request for the delivery and sends it.
func (d *Dispatcher) send(ctx context.Context, n *plumbv1.Notification, dl *delivery) error {
	var secret map[string][]byte
	if ref := n.Spec.SecretRef; ref != nil {
		s, err := d.opts.Secrets(ctx, types.NamespacedName{Namespace: n.Namespace, Name: ref.Name})
		if err != nil {
			return fmt.Errorf("reading secret %s/%s: %w", n.Namespace, ref.Name, err)
		}
		// The controller reads the Secret with its own rights and sends its
		// token to an address whoever wrote the Notification chose: never a
		// ServiceAccount's token.
		if s.Type == corev1.SecretTypeServiceAccountToken {
			return &permanentError{err: fmt.Errorf("secret %s/%s holds a ServiceAccount token, which a Notification may not send", n.Namespace, ref.Name)}
		}
		secret = s.Data
	}
	req, err := d.request(ctx, n, secret, dl)
	if err != nil {
		return &permanentError{err: err}
	}
	if req == nil {
		return nil // nothing to send for this event
	}
	reqCtx, cancel := context.WithTimeout(ctx, d.opts.RequestTimeout)
	defer cancel()
	resp, err := d.opts.Client.Do(req.WithContext(reqCtx))
	if err != nil {
		return transportError(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	switch code := resp.StatusCode; {
	case code >= 200 && code < 300:
		d.track(n, dl)
		return nil
	case code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500:
		return fmt.Errorf("the %s sink answered %d", n.Spec.Type, code)
	default:
		return &permanentError{err: fmt.Errorf("the %s sink answered %d", n.Spec.Type, code)}
	}
}
