package shard

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// Each replica is a member: it holds a Lease of its own, named after its
// identity and labelled with the group it belongs to, and renews it; a
// member whose Lease has not changed for the Lease's duration (as this
// replica observes it, so that clocks need not agree) is gone. The Lease
// also lists, in an annotation, the slots its member holds: ticks the Apps
// of. A member releases a slot (stops, and waits for its ticks under way)
// before it writes that it no longer holds it, and takes a slot only once
// no live member holds it, by writing that it holds it and then reading
// every Lease afresh: of two members that take one slot at once, at
// least one sees the other's claim and gives the slot back, so no slot is
// ever held by two live members.

// Annotations and labels of the members' Leases.
const (
	// LabelGroup marks a member's Lease with its group (the replicas that
	// share the Apps).
	LabelGroup = "plumb.dev/shard-group"
	// AnnotationSlots lists the slots a member holds, as a bitmap in hex.
	AnnotationSlots = "plumb.dev/slots"
	// AnnotationToken names the process that writes a member's Lease: a
	// second process of one identity (a pod force-deleted while it still
	// runs) does not write over the first's Lease while it lives.
	AnnotationToken = "plumb.dev/member-token"
)

// errLeaderRuns says a replica of the group runs with leader election
// (during a change of mode): it ticks every App, so no slot is taken.
var errLeaderRuns = errors.New("a replica of this group that runs with leader election (not --shards=auto) holds the group's Lease and ticks every App; taking no slot until it stops")

// errIdentityTaken says another process writes this member's Lease.
var errIdentityTaken = errors.New("another process writes this member's Lease (two replicas of one identity?); waiting until it has been unchanged for its duration")

// Handler is what a member does with its slots.
type Handler interface {
	// Take starts the Apps of slots.
	Take(slots []int)
	// Release stops the Apps of slots and returns when their ticks under
	// way have ended.
	Release(slots []int)
	// Lost stops every App at once: the member could not renew its Lease
	// within the renew deadline, and another may take its slots soon.
	Lost()
}

// Config configures a Member.
type Config struct {
	// Client reads and writes the Leases.
	Client kubernetes.Interface
	// Namespace holds the Leases; Group names the replicas that share the
	// Apps; Identity is this replica's name in the group (the pod's).
	Namespace, Group, Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod are as in leader
	// election (defaults 15s, 10s, 2s).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Epsilon bounds a member's slots at (1+Epsilon) × its share (default
	// DefaultEpsilon).
	Epsilon float64
	// Log logs joins, leaves and moves.
	Log *zap.Logger
	// Observe, when set, is told each placement this member acts on.
	Observe func(members []string, held []int)
}

// Member is this replica's membership in its group.
type Member struct {
	cfg  Config
	name string // of its Lease

	mu        sync.Mutex
	held      [Slots]bool
	seen      map[string]observed // the other members' Leases, by name
	lastRenew time.Time
	lease     *coordinationv1.Lease // as last written
	wake      chan struct{}

	// writing serializes the Lease's writes.
	writing sync.Mutex
	// token is this process's, in its Lease; foreign is another process's
	// version of the Lease, and when it was first seen.
	token   string
	foreign struct {
		version string
		at      time.Time
	}
	// acting serializes Take and Lost, and guards epoch: a loss ends an
	// epoch, and what was claimed in an earlier one is not started.
	acting sync.Mutex
	epoch  int
	// leader judges the group's leader-election Lease (a replica in the
	// other mode).
	leader Freshness
}

// observed is another member's Lease as this replica last saw it change.
type observed struct {
	identity string
	version  string // its resourceVersion
	at       time.Time
	slots    [Slots]bool
	duration time.Duration
}

// New prepares the membership of cfg.Identity.
func New(cfg Config) (*Member, error) {
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration, cfg.RenewDeadline, cfg.RetryPeriod = 15*time.Second, 10*time.Second, 2*time.Second
	}
	if cfg.Epsilon == 0 {
		cfg.Epsilon = DefaultEpsilon
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	if cfg.Identity == "" || cfg.Group == "" {
		return nil, errors.New("a shard member needs an identity and a group")
	}
	if !(cfg.RenewDeadline < cfg.LeaseDuration && cfg.RetryPeriod < cfg.RenewDeadline) {
		return nil, fmt.Errorf("want retry period (%s) < renew deadline (%s) < lease duration (%s)", cfg.RetryPeriod, cfg.RenewDeadline, cfg.LeaseDuration)
	}
	return &Member{cfg: cfg, name: LeaseName(cfg.Group, cfg.Identity), seen: map[string]observed{}, wake: make(chan struct{}, 1), token: uuid.NewString()}, nil
}

// LeaseName is the name of a member's Lease.
func LeaseName(group, identity string) string { return group + "-" + identity }

// Held lists the slots this member holds.
func (m *Member) Held() []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return listOf(m.held)
}

// Run keeps the membership until ctx ends: it renews the Lease, and takes
// and releases slots as members come and go. On the way out it releases
// every slot (its ticks drain) and deletes its Lease, so that the others
// take its slots at once.
func (m *Member) Run(ctx context.Context, h Handler) error {
	factory := informers.NewSharedInformerFactoryWithOptions(m.cfg.Client, 0, informers.WithNamespace(m.cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = labels.Set{LabelGroup: m.cfg.Group}.String()
		}))
	leases := factory.Coordination().V1().Leases().Informer()
	if _, err := leases.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { m.observe(obj, false) },
		UpdateFunc: func(_, obj any) { m.observe(obj, false) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			m.observe(obj, true)
		},
	}); err != nil {
		return err
	}
	informerCtx, stopInformer := context.WithCancel(context.WithoutCancel(ctx))
	defer stopInformer()
	factory.Start(informerCtx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), leases.HasSynced) {
		return ctx.Err()
	}
	// Start holding nothing, whatever an earlier run of this identity wrote.
	for ctx.Err() == nil {
		if err := m.renew(ctx); err == nil {
			break
		} else {
			m.cfg.Log.Info("Could not write the member's Lease; retrying", zap.Error(err))
		}
		select {
		case <-ctx.Done():
		case <-time.After(m.cfg.RetryPeriod):
		}
	}
	m.cfg.Log.Info("Joined the shard group", zap.String("group", m.cfg.Group), zap.String("identity", m.cfg.Identity))
	// Renewals and the watchdog outlive ctx: they go on while the ticks
	// drain on the way out, and end only after.
	renewing, stopRenewing := context.WithCancel(context.WithoutCancel(ctx))
	renewed := make(chan struct{})
	go func() { defer close(renewed); m.keepRenewing(renewing, h) }()
	ticker := time.NewTicker(m.cfg.RetryPeriod)
	defer ticker.Stop()
	for ctx.Err() == nil {
		m.step(ctx, h)
		select {
		case <-ctx.Done():
		case <-ticker.C:
		case <-m.wake:
		}
	}
	m.release(h, m.Held()) // renewals go on while the ticks drain
	stopRenewing()
	<-renewed
	m.leave()
	return nil
}

// keepRenewing renews the Lease every retry period; a watchdog beside it
// stops every App at once when no renewal has succeeded for the renew
// deadline (a renewal that hangs must not keep this replica ticking past
// the moment another may take its slots: the Lease's duration after the
// last renewal).
func (m *Member) keepRenewing(ctx context.Context, h Handler) {
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		m.watch(ctx, h)
	}()
	defer func() { <-watched }()
	ticker := time.NewTicker(m.cfg.RetryPeriod)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		if err := m.renew(ctx); err != nil && ctx.Err() == nil {
			m.cfg.Log.Debug("Could not renew the member's Lease", zap.Error(err))
		}
	}
}

// watch stops every App once the Lease has gone unrenewed for the renew
// deadline: Lost cancels their ticks and waits for them to leave, and only
// then is every slot let go (so that a renewal that succeeds later says
// the slots are free only once no tick of them runs).
func (m *Member) watch(ctx context.Context, h Handler) {
	ticker := time.NewTicker(m.cfg.RetryPeriod / 2)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		m.acting.Lock()
		m.mu.Lock()
		since := time.Since(m.lastRenew)
		held := len(listOf(m.held)) > 0
		m.mu.Unlock()
		if since > m.cfg.RenewDeadline && held {
			m.cfg.Log.Warn("The member's Lease was not renewed within the renew deadline; stopping every App", zap.Duration("since", since))
			m.epoch++
			h.Lost()
			m.mu.Lock()
			m.held = [Slots]bool{}
			m.mu.Unlock()
		}
		m.acting.Unlock()
	}
}

// staleAfter is how many Lease durations a member's Lease may go
// unchanged before another member deletes it: a pod that crashed and never
// came back (a new pod has another name) leaves no Lease behind for ever.
const staleAfter = 4

// forgetStale deletes the Leases of members gone for staleAfter
// durations, unchanged since (a resourceVersion precondition).
func (m *Member) forgetStale(ctx context.Context) {
	m.mu.Lock()
	var stale []string
	versions := map[string]string{}
	for name, o := range m.seen {
		if time.Since(o.at) > staleAfter*o.duration {
			stale = append(stale, name)
			versions[name] = o.version
		}
	}
	m.mu.Unlock()
	for _, name := range stale {
		version := versions[name]
		err := m.cfg.Client.CoordinationV1().Leases(m.cfg.Namespace).Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &version}})
		if err == nil || apierrors.IsNotFound(err) {
			m.mu.Lock()
			if m.seen[name].version == version {
				delete(m.seen, name)
			}
			m.mu.Unlock()
			m.cfg.Log.Info("Deleted the Lease of a member gone long ago", zap.String("lease", name))
		}
	}
}

// step releases and takes slots by the placement over the live members.
func (m *Member) step(ctx context.Context, h Handler) {
	m.forgetStale(ctx)
	epoch := m.epochNow()
	members, others := m.live()
	placed := Place(members, m.cfg.Epsilon)
	m.mu.Lock()
	var release, take []int
	for s := range Slots {
		switch mine := placed[s] == m.cfg.Identity; {
		case m.held[s] && !mine:
			release = append(release, s)
		case !m.held[s] && mine && !others[s]:
			take = append(take, s)
		}
	}
	m.mu.Unlock()
	if len(release) > 0 {
		m.release(h, release)
		m.cfg.Log.Info("Released slots", zap.Int("slots", len(release)), zap.Strings("members", members))
	}
	if len(take) > 0 {
		taken, err := m.take(ctx, take)
		if err != nil {
			m.cfg.Log.Info("Could not take slots; retrying", zap.Error(err))
		}
		m.acting.Lock()
		if m.epoch != epoch {
			m.set(taken, false) // lost meanwhile: let go with the rest
			taken = nil
		}
		if len(taken) > 0 {
			h.Take(taken)
		}
		m.acting.Unlock()
		if len(taken) > 0 {
			m.cfg.Log.Info("Took slots", zap.Int("slots", len(taken)), zap.Strings("members", members))
		}
	}
	if m.cfg.Observe != nil {
		m.cfg.Observe(members, m.Held())
	}
}

// epochNow reads the epoch.
func (m *Member) epochNow() int {
	m.acting.Lock()
	defer m.acting.Unlock()
	return m.epoch
}

// release stops the Apps of slots and waits for their ticks, and only
// then writes that this member no longer holds them.
func (m *Member) release(h Handler, slots []int) {
	if len(slots) == 0 {
		return
	}
	h.Release(slots)
	m.set(slots, false)
	if err := m.renew(context.Background()); err != nil {
		m.cfg.Log.Info("Could not write the slots released; the next renewal will", zap.Error(err))
	}
}

// take claims slots: it writes that this member holds them, then reads
// every member's Lease from the API server (not the cache) and gives back
// those another live member holds too. It returns the slots taken.
func (m *Member) take(ctx context.Context, slots []int) ([]int, error) {
	m.set(slots, true)
	if err := m.renew(ctx); err != nil {
		m.set(slots, false)
		return nil, err
	}
	list, err := m.cfg.Client.CoordinationV1().Leases(m.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: labels.Set{LabelGroup: m.cfg.Group}.String()})
	if err != nil {
		m.set(slots, false) // written as held, never started: the next renewal says so
		return nil, err
	}
	for i := range list.Items {
		m.observe(&list.Items[i], false)
	}
	// Read after the claim, as a leader reads the members' claims after it
	// took its Lease (ActiveMembers): of the two, one sees the other.
	leader, err := m.cfg.Client.CoordinationV1().Leases(m.cfg.Namespace).Get(ctx, m.cfg.Group, metav1.GetOptions{})
	switch {
	case err == nil && m.leader.Held(leader, time.Now()):
		m.set(slots, false)
		if err := m.renew(ctx); err != nil {
			m.cfg.Log.Info("Could not write the slots given back; the next renewal will", zap.Error(err))
		}
		return nil, fmt.Errorf("%w (held by %s)", errLeaderRuns, *leader.Spec.HolderIdentity)
	case err != nil && !apierrors.IsNotFound(err):
		m.set(slots, false)
		return nil, err
	}
	_, others := m.live()
	var taken, contested []int
	for _, s := range slots {
		if others[s] {
			contested = append(contested, s)
		} else {
			taken = append(taken, s)
		}
	}
	if len(contested) > 0 {
		m.set(contested, false)
		m.cfg.Log.Info("Gave back slots another member claimed at once", zap.Int("slots", len(contested)))
		if err := m.renew(ctx); err != nil {
			m.cfg.Log.Info("Could not write the slots given back; the next renewal will", zap.Error(err))
		}
	}
	return taken, nil
}

// leave deletes the Lease (every slot released), so that the others take
// the slots at once rather than when it expires.
func (m *Member) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	leases := m.cfg.Client.CoordinationV1().Leases(m.cfg.Namespace)
	lease, err := leases.Get(ctx, m.name, metav1.GetOptions{})
	if err == nil && lease.Annotations[AnnotationToken] == m.token {
		err = leases.Delete(ctx, m.name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &lease.UID, ResourceVersion: &lease.ResourceVersion}})
	}
	if err != nil && !apierrors.IsNotFound(err) {
		m.cfg.Log.Info("Could not delete the member's Lease; it expires on its own", zap.Error(err))
		return
	}
	m.cfg.Log.Info("Left the shard group", zap.String("identity", m.cfg.Identity))
}

// renew writes the Lease: now, and the slots held, within the renew
// deadline.
func (m *Member) renew(ctx context.Context) error {
	m.writing.Lock()
	defer m.writing.Unlock()
	ctx, cancel := context.WithTimeout(ctx, m.cfg.RenewDeadline)
	defer cancel()
	m.mu.Lock()
	slots := encode(m.held)
	lease := m.lease
	m.mu.Unlock()
	sent := time.Now() // a write the server takes counts from before it was sent
	now := metav1.NewMicroTime(sent)
	leases := m.cfg.Client.CoordinationV1().Leases(m.cfg.Namespace)
	if lease == nil {
		current, err := leases.Get(ctx, m.name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			current = nil
		case err != nil:
			return err
		}
		lease = current
		if lease != nil && lease.Annotations[AnnotationToken] != m.token && !m.quietForeign(lease) {
			return errIdentityTaken
		}
	}
	var written *coordinationv1.Lease
	var err error
	if lease == nil {
		written, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: m.name, Namespace: m.cfg.Namespace, Labels: map[string]string{LabelGroup: m.cfg.Group},
				Annotations: map[string]string{AnnotationSlots: slots, AnnotationToken: m.token}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(m.cfg.Identity), LeaseDurationSeconds: ptr.To(int32(m.cfg.LeaseDuration / time.Second)),
				AcquireTime: &now, RenewTime: &now},
		}, metav1.CreateOptions{})
	} else {
		next := lease.DeepCopy()
		if next.Annotations == nil {
			next.Annotations = map[string]string{}
		}
		next.Annotations[AnnotationSlots] = slots
		next.Annotations[AnnotationToken] = m.token
		if next.Labels == nil {
			next.Labels = map[string]string{}
		}
		next.Labels[LabelGroup] = m.cfg.Group
		next.Spec.HolderIdentity = ptr.To(m.cfg.Identity)
		next.Spec.LeaseDurationSeconds = ptr.To(int32(m.cfg.LeaseDuration / time.Second))
		next.Spec.RenewTime = &now
		written, err = leases.Update(ctx, next, metav1.UpdateOptions{})
	}
	if err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) || apierrors.IsAlreadyExists(err) {
			m.mu.Lock()
			m.lease = nil // read it afresh next time
			m.mu.Unlock()
		}
		return err
	}
	m.mu.Lock()
	m.lease, m.lastRenew = written, sent
	m.mu.Unlock()
	return nil
}

// Freshness tells held Leases from expired ones by when this process saw
// each one change (its resourceVersion), as leader election does, so that
// clocks need not agree. It is safe for concurrent use.
type Freshness struct {
	mu   sync.Mutex
	seen map[string]seenLease // by namespace/name
}

// seenLease is a Lease's version and when this process first saw it.
type seenLease struct {
	version string
	at      time.Time
}

// Held reports whether lease is held at now: it names a holder and has
// changed within its duration, as this process saw it (a Lease seen for
// the first time, or changed, counts from now).
func (f *Freshness) Held(lease *coordinationv1.Lease, now time.Time) bool {
	if h := lease.Spec.HolderIdentity; h == nil || *h == "" {
		return false
	}
	duration := 15 * time.Second
	if d := lease.Spec.LeaseDurationSeconds; d != nil && *d > 0 {
		duration = time.Duration(*d) * time.Second
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.seen == nil {
		f.seen = map[string]seenLease{}
	}
	key := lease.Namespace + "/" + lease.Name
	if seen, ok := f.seen[key]; ok && seen.version == lease.ResourceVersion {
		return now.Sub(seen.at) < duration
	}
	f.seen[key] = seenLease{version: lease.ResourceVersion, at: now}
	return true
}

// ActiveMembers lists the members of group whose Leases are held (as
// fresh judges them: pass the same Freshness to each call) and list
// slots. A replica that runs with leader election waits until there are
// none before it ticks (during a change of mode, a rolling update runs
// both): it reads them after it took its own Lease, as a member reads that
// Lease after it claimed slots.
func ActiveMembers(ctx context.Context, client kubernetes.Interface, namespace, group string, fresh *Freshness) ([]string, error) {
	list, err := client.CoordinationV1().Leases(namespace).List(ctx, metav1.ListOptions{LabelSelector: labels.Set{LabelGroup: group}.String()})
	if err != nil {
		return nil, err
	}
	now := time.Now()
	var active []string
	for i := range list.Items {
		lease := &list.Items[i]
		if fresh.Held(lease, now) && decode(lease.Annotations[AnnotationSlots]) != [Slots]bool{} {
			active = append(active, *lease.Spec.HolderIdentity)
		}
	}
	slices.Sort(active)
	return active, nil
}

// quietForeign says another process's Lease of this identity has gone
// unchanged for its duration, as this process observed it: that process
// is gone, and this one may write over it. m.writing is held.
func (m *Member) quietForeign(lease *coordinationv1.Lease) bool {
	if m.foreign.version != lease.ResourceVersion {
		m.foreign.version, m.foreign.at = lease.ResourceVersion, time.Now()
		return false
	}
	duration := m.cfg.LeaseDuration
	if d := lease.Spec.LeaseDurationSeconds; d != nil && *d > 0 {
		duration = time.Duration(*d) * time.Second
	}
	return time.Since(m.foreign.at) >= duration
}

// observe records another member's Lease (or its deletion), and wakes the
// loop when the members or their slots changed.
func (m *Member) observe(obj any, deleted bool) {
	lease, ok := obj.(*coordinationv1.Lease)
	if !ok || lease.Name == m.name || lease.Spec.HolderIdentity == nil {
		return
	}
	m.mu.Lock()
	before, known := m.seen[lease.Name]
	switch {
	case deleted && (!known || before.slots == [Slots]bool{} || decode(lease.Annotations[AnnotationSlots]) == [Slots]bool{}):
		delete(m.seen, lease.Name) // it had let its slots go: a graceful leave
	case deleted:
		// Deleted while it listed slots (by hand, say): its member may still
		// tick them, so they stay its until the Lease would have expired.
	case !known || before.version != lease.ResourceVersion:
		duration := m.cfg.LeaseDuration
		if d := lease.Spec.LeaseDurationSeconds; d != nil && *d > 0 {
			duration = time.Duration(*d) * time.Second
		}
		m.seen[lease.Name] = observed{identity: *lease.Spec.HolderIdentity, version: lease.ResourceVersion, at: time.Now(),
			slots: decode(lease.Annotations[AnnotationSlots]), duration: duration}
	}
	changed := deleted || !known || before.slots != m.seen[lease.Name].slots
	m.mu.Unlock()
	if changed {
		select {
		case m.wake <- struct{}{}:
		default:
		}
	}
}

// live is the members alive (this one among them), sorted, and the slots
// the others hold.
func (m *Member) live() ([]string, [Slots]bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	members := []string{m.cfg.Identity}
	var others [Slots]bool
	for _, o := range m.seen {
		if time.Since(o.at) >= o.duration {
			continue // not renewed for its duration: gone
		}
		members = append(members, o.identity)
		for s := range Slots {
			others[s] = others[s] || o.slots[s]
		}
	}
	slices.Sort(members)
	return slices.Compact(members), others
}

func (m *Member) set(slots []int, held bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range slots {
		m.held[s] = held
	}
}

func listOf(set [Slots]bool) []int {
	var out []int
	for s, in := range set {
		if in {
			out = append(out, s)
		}
	}
	return out
}

// encode writes a set of slots as a bitmap in hex.
func encode(set [Slots]bool) string {
	var b [Slots / 8]byte
	for s, in := range set {
		if in {
			b[s/8] |= 1 << (s % 8)
		}
	}
	return hex.EncodeToString(b[:])
}

// decode reads what encode wrote; anything else (a hand edit, another
// version's format) holds every slot, so that no slot is taken from a
// member whose claims cannot be read.
func decode(text string) [Slots]bool {
	var set [Slots]bool
	b, err := hex.DecodeString(text)
	if err != nil || len(b) != Slots/8 {
		for s := range set {
			set[s] = true
		}
		return set
	}
	for s := range Slots {
		set[s] = b[s/8]&(1<<(s%8)) != 0
	}
	return set
}
