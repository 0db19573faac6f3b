// Package destination connects Apps to the clusters they deploy into when
// that is not the cluster plumb runs in (spec.destination). It reads an
// App's kubeconfig, refuses what would let a tenant reach the controller's
// disk or run commands on it, and keeps one connection per kubeconfig
// Secret of a namespace and content: the Apps that name the same Secret
// share it, it is built when the first one needs it and stopped when the
// last one leaves. A changed Secret (a rotated token) gives a new
// connection from the next tick on; the old one stops once no App uses it.
// Connections are never shared across namespaces: each namespace proved
// its access to the cluster with a Secret of its own.
package destination

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"github.com/plumb-dev/plumb/internal/egress"
)

// ErrTooManyDestinations is returned when a new destination would take the
// controller beyond Options.Max.
var ErrTooManyDestinations = errors.New("too many destination clusters")

// Options configure a Manager.
type Options[T any] struct {
	// Build makes the parts an App needs to act on a destination (its
	// informers, its appliers) from a connection.
	Build func(conn *Connection) (T, error)
	// Leave forgets what an App held of the value (its informers' and
	// identity's uses) when it stops using the connection.
	Leave func(app types.NamespacedName, value T)
	// Stop stops what Build started, once no App uses the connection.
	Stop func(T)
	// Max bounds the destinations (Secrets) with connections open at once
	// (default 32), and MaxPerNamespace those of one namespace (0: no bound
	// but Max), so that one tenant cannot take every place.
	Max             int
	MaxPerNamespace int
	// Parse says what a kubeconfig may ask for.
	Parse ParseOptions
	// QPS and Burst are each connection's request budget (defaults 50 and
	// 100).
	QPS   float32
	Burst int
	// ProbeTimeout bounds Reachable's request (default 5s); a success is
	// remembered for ProbeValidFor (default 10s).
	ProbeTimeout  time.Duration
	ProbeValidFor time.Duration
	// Clock tells the time of probes (default the real one).
	Clock clock.PassiveClock
}

// Connection is one destination as an App's namespace reaches it.
type Connection struct {
	// Name is the kubeconfig Secret's name, the destination's name in
	// status, logs and metrics.
	Name string
	// Namespace is the namespace of the Secret and of the Apps that use
	// it.
	Namespace string
	// Server is the destination's API server URL.
	Server string
	// Config is the client config of the kubeconfig's context.
	Config *rest.Config

	probe         discovery.ServerVersionInterface
	probeValidFor time.Duration
	// failureValidFor is how long a failed probe is taken for the answer
	// (as long as a probe may take, at least 2s): the ticks of many Apps
	// into a cluster that does not answer, or drops what is sent to it,
	// do not each wait for a probe of their own, nor hold every worker.
	failureValidFor time.Duration
	clock           clock.PassiveClock
	// probing serializes probes: Apps that tick at once wait for one
	// answer rather than each asking.
	probing   sync.Mutex
	mu        sync.Mutex
	reachedAt time.Time
	failedAt  time.Time
	failure   error
}

// Reachable asks the destination's API server for its version (within
// Options.ProbeTimeout), unless it answered within the last few seconds,
// and says why it did not answer.
func (c *Connection) Reachable() error {
	if ok, err := c.recent(); ok {
		return err
	}
	c.probing.Lock()
	defer c.probing.Unlock()
	if ok, err := c.recent(); ok { // another probe answered meanwhile
		return err
	}
	_, err := c.probe.ServerVersion()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.failedAt, c.failure = c.clock.Now(), Unanswered(c.Server, err)
		return c.failure
	}
	c.reachedAt, c.failure = c.clock.Now(), nil
	return nil
}

// recent is the last probe's answer while it is fresh.
func (c *Connection) recent() (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.failure != nil && c.clock.Since(c.failedAt) < c.failureValidFor:
		return true, c.failure
	case c.failure == nil && !c.reachedAt.IsZero() && c.clock.Since(c.reachedAt) < c.probeValidFor:
		return true, nil
	}
	return false, nil
}

// Unanswered is the error of a probe of server that failed with err,
// without what the server sent (see quiet).
func Unanswered(server string, err error) error {
	return fmt.Errorf("%s did not answer: %w", server, quiet(err))
}

// quiet is an error of the destination without what its server sent: an
// HTTP answer is named by its status code alone, since the server is
// whatever a tenant wrote in a kubeconfig and its body must not be shown.
func quiet(err error) error {
	var status apierrors.APIStatus
	switch {
	case errors.As(err, &status):
		return fmt.Errorf("it answered HTTP %d", status.Status().Code)
	case errors.Is(err, egress.ErrBlocked):
		return errors.New("its address is in a range this controller may not reach (--destination-blocked-cidrs)")
	}
	return err
}

// Forget makes the next Reachable ask again (a request to the destination
// failed).
func (c *Connection) Forget() {
	c.mu.Lock()
	c.reachedAt, c.failure = time.Time{}, nil
	c.mu.Unlock()
}

// Manager keeps the connections Apps use. It is safe for concurrent use.
type Manager[T any] struct {
	opts Options[T]

	mu      sync.Mutex
	entries map[entryKey]*entry[T]
	uses    map[types.NamespacedName]entryKey // App → its connection
}

// entryKey names a connection: who proved access (the Secret of a
// namespace) and with what (the kubeconfig's digest).
type entryKey struct {
	secret types.NamespacedName
	digest [sha256.Size]byte
}

type entry[T any] struct {
	conn  *Connection
	value T
	apps  map[types.NamespacedName]bool
}

// New makes a Manager.
func New[T any](opts Options[T]) *Manager[T] {
	if opts.Max <= 0 {
		opts.Max = 32
	}
	if opts.QPS <= 0 {
		opts.QPS = 50
	}
	if opts.Burst <= 0 {
		opts.Burst = 100
	}
	if opts.ProbeTimeout <= 0 {
		opts.ProbeTimeout = 5 * time.Second
	}
	if opts.ProbeValidFor <= 0 {
		opts.ProbeValidFor = 10 * time.Second
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &Manager[T]{opts: opts, entries: map[entryKey]*entry[T]{}, uses: map[types.NamespacedName]entryKey{}}
}

// For returns what app needs to act on the destination of kubeconfig, read
// from Secret secret of the App's namespace, and records that app uses it
// (and no other). The kubeconfig is parsed and a connection built only
// when no App of the namespace used this Secret with this content before.
func (m *Manager[T]) For(app types.NamespacedName, secret string, kubeconfig []byte) (T, *Connection, error) {
	var zero T
	key := entryKey{secret: types.NamespacedName{Namespace: app.Namespace, Name: secret}, digest: sha256.Sum256(kubeconfig)}
	var unused []T
	defer func() { m.stop(unused) }() // outside m.mu: stopping waits for informers
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.entries[key]; e != nil {
		unused = m.useLocked(app, key, e)
		return e.value, e.conn, nil
	}
	total, mine := m.openAfterLocked(app, key.secret)
	if total >= m.opts.Max {
		return zero, nil, fmt.Errorf("%w: %d are open, the controller's limit (--max-destinations)", ErrTooManyDestinations, total)
	}
	if m.opts.MaxPerNamespace > 0 && mine >= m.opts.MaxPerNamespace {
		return zero, nil, fmt.Errorf("%w: %d are open for namespace %s, the controller's limit per namespace (--max-destinations-per-namespace)",
			ErrTooManyDestinations, mine, app.Namespace)
	}
	config, server, err := Parse(kubeconfig, m.opts.Parse)
	if err != nil {
		return zero, nil, fmt.Errorf("Secret %s: %w", key.secret, err)
	}
	config.QPS, config.Burst = m.opts.QPS, m.opts.Burst
	config.UserAgent = rest.DefaultKubernetesUserAgent()
	probeConfig := rest.CopyConfig(config)
	probeConfig.Timeout = m.opts.ProbeTimeout
	probe, err := discovery.NewDiscoveryClientForConfig(probeConfig)
	if err != nil {
		return zero, nil, fmt.Errorf("Secret %s: connecting to %s: %w", key.secret, server, err)
	}
	conn := &Connection{Name: secret, Namespace: app.Namespace, Server: server, Config: config,
		probe: probe, probeValidFor: m.opts.ProbeValidFor, failureValidFor: max(2*time.Second, m.opts.ProbeTimeout), clock: m.opts.Clock}
	value, err := m.opts.Build(conn)
	if err != nil {
		return zero, nil, fmt.Errorf("Secret %s: connecting to %s: %w", key.secret, server, err)
	}
	e := &entry[T]{conn: conn, value: value, apps: map[types.NamespacedName]bool{}}
	m.entries[key] = e
	unused = m.useLocked(app, key, e)
	return value, conn, nil
}

// openAfterLocked is how many destinations (Secrets) have connections
// once app leaves the one it uses (it will, for a new one), in all and in
// app's namespace; a new content of a Secret that has one (a rotated
// token) is no new destination. m.mu is held.
func (m *Manager[T]) openAfterLocked(app types.NamespacedName, secret types.NamespacedName) (total, inNamespace int) {
	open := map[types.NamespacedName]bool{}
	for key, e := range m.entries {
		if own, ok := m.uses[app]; ok && own == key && len(e.apps) == 1 {
			continue
		}
		open[key.secret] = true
	}
	if open[secret] {
		return 0, 0
	}
	for s := range open {
		if s.Namespace == app.Namespace {
			inNamespace++
		}
	}
	return len(open), inNamespace
}

// useLocked records that app uses e, and returns what no App uses any
// more. m.mu is held.
func (m *Manager[T]) useLocked(app types.NamespacedName, key entryKey, e *entry[T]) []T {
	var unused []T
	if old, ok := m.uses[app]; ok && old != key {
		unused = m.releaseLocked(app)
	}
	e.apps[app] = true
	m.uses[app] = key
	return unused
}

// Release records that app uses no destination any more (it was deleted,
// or deploys into plumb's own cluster now), and stops a connection that no
// App uses.
func (m *Manager[T]) Release(app types.NamespacedName) {
	m.mu.Lock()
	unused := m.releaseLocked(app)
	m.mu.Unlock()
	m.stop(unused)
}

// releaseLocked forgets app's use, and returns the value no App uses any
// more (to stop once m.mu is released). m.mu is held.
func (m *Manager[T]) releaseLocked(app types.NamespacedName) []T {
	key, ok := m.uses[app]
	if !ok {
		return nil
	}
	delete(m.uses, app)
	e := m.entries[key]
	delete(e.apps, app)
	if m.opts.Leave != nil {
		m.opts.Leave(app, e.value)
	}
	if len(e.apps) > 0 {
		return nil
	}
	delete(m.entries, key)
	return []T{e.value}
}

// stop stops values no App uses.
func (m *Manager[T]) stop(values []T) {
	if m.opts.Stop == nil {
		return
	}
	for _, v := range values {
		m.opts.Stop(v)
	}
}

// Uses reports whether app uses conn (a destination's events are for its
// Apps alone: any object there may carry any App's labels).
func (m *Manager[T]) Uses(app types.NamespacedName, conn *Connection) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	key, ok := m.uses[app]
	return ok && m.entries[key] != nil && m.entries[key].conn == conn
}

// Len is how many connections are open.
func (m *Manager[T]) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.entries)
}

// Stop stops every connection (the controller is shutting down).
func (m *Manager[T]) Stop() {
	m.mu.Lock()
	var all []T
	for key, e := range m.entries {
		all = append(all, e.value)
		delete(m.entries, key)
	}
	m.uses = map[types.NamespacedName]entryKey{}
	m.mu.Unlock()
	m.stop(all)
}
