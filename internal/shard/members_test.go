package shard

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/plumb-dev/plumb/internal/testenv"
)

var cluster *testenv.Cluster

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.Needs{Cluster: testenv.ModeAPI}, func(e *testenv.Env) { cluster = e.Cluster })
}

// owners is the oracle: which member ticks each slot, as the handlers are
// told. Taking a slot that another member ticks is the fault these tests
// look for.
type owners struct {
	t      *testing.T
	mu     sync.Mutex
	owner  [Slots]string
	takes  map[string]int // slots taken, by member
	first  map[string]int // slots of each member's first take
	faults []string
}

func newOwners(t *testing.T) *owners {
	return &owners{t: t, takes: map[string]int{}, first: map[string]int{}}
}

func (o *owners) handler(identity string) Handler { return &handler{o: o, identity: identity} }

func (o *owners) count() map[string]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[string]int{}
	for _, m := range o.owner {
		out[m]++
	}
	return out
}

func (o *owners) snapshot() [Slots]string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.owner
}

func (o *owners) check() {
	o.t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, f := range o.faults {
		o.t.Error(f)
	}
	o.faults = nil
}

type handler struct {
	o        *owners
	identity string
	// drain is how long its ticks take to end when slots are released.
	drain time.Duration
}

func (h *handler) Take(slots []int) {
	h.o.mu.Lock()
	defer h.o.mu.Unlock()
	if _, ok := h.o.first[h.identity]; !ok {
		h.o.first[h.identity] = len(slots)
	}
	for _, s := range slots {
		if other := h.o.owner[s]; other != "" && other != h.identity {
			h.o.faults = append(h.o.faults, fmt.Sprintf("%s took slot %d, which %s ticks", h.identity, s, other))
		}
		h.o.owner[s] = h.identity
		h.o.takes[h.identity]++
	}
}

func (h *handler) Release(slots []int) {
	time.Sleep(max(h.drain, 50*time.Millisecond)) // ticks under way drain
	h.o.mu.Lock()
	defer h.o.mu.Unlock()
	for _, s := range slots {
		if h.o.owner[s] == h.identity {
			h.o.owner[s] = ""
		}
	}
}

func (h *handler) Lost() {
	h.o.mu.Lock()
	defer h.o.mu.Unlock()
	for s := range Slots {
		if h.o.owner[s] == h.identity {
			h.o.owner[s] = ""
		}
	}
}

// switchable fails every request while off is set: an API server this
// member cannot reach.
type switchable struct {
	next http.RoundTripper
	off  atomic.Bool
}

func (s *switchable) RoundTrip(r *http.Request) (*http.Response, error) {
	if s.off.Load() {
		return nil, errors.New("cut off")
	}
	return s.next.RoundTrip(r)
}

// running is a member running in the test.
type running struct {
	member *Member
	cut    *switchable
	stop   func()
}

func start(t *testing.T, o *owners, group, identity string) *running {
	t.Helper()
	return startDraining(t, o, group, identity, 0)
}

// startDraining starts a member whose ticks take drain to end.
func startDraining(t *testing.T, o *owners, group, identity string, drain time.Duration) *running {
	t.Helper()
	return startAs(t, o, group, identity, identity, drain, zaptest.NewLogger(t).Named(identity))
}

// startAs starts a member of identity whose handler the oracle knows as
// name, logging to log.
func startAs(t *testing.T, o *owners, group, identity, name string, drain time.Duration, log *zap.Logger) *running {
	t.Helper()
	cfg := rest.CopyConfig(cluster.Config)
	cut := &switchable{}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { cut.next = rt; return cut })
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{Client: client, Namespace: "default", Group: group, Identity: identity,
		LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 250 * time.Millisecond, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx, &handler{o: o, identity: name, drain: drain}) }()
	var once sync.Once
	r := &running{member: m, cut: cut}
	r.stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("%s: Run: %v", identity, err)
				}
			case <-time.After(30 * time.Second):
				t.Errorf("%s: Run did not return after its context ended", identity)
			}
		})
	}
	t.Cleanup(r.stop)
	return r
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 60*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		t.Fatalf("waited in vain for %s", what)
	}
}

// spread says every slot is ticked by one of want, each within its bound.
func spread(o *owners, want ...string) bool {
	count := o.count()
	if count[""] != 0 || len(count) != len(want) {
		return false
	}
	capacity := int(math.Ceil((1 + DefaultEpsilon) * Slots / float64(len(want))))
	for _, m := range want {
		if count[m] == 0 || count[m] > capacity {
			return false
		}
	}
	return true
}

func group(t *testing.T) string { return fmt.Sprintf("g%d", time.Now().UnixNano()%1e9) }

// Members that join one after another spread the slots between them, each
// within its bound, never two ticking one slot; a member that stops hands
// its slots over (released, its Lease deleted) to the others, and only
// its slots move, besides the bounded few.
func TestMembersSpreadAndHandOverTheSlots(t *testing.T) {
	o, g := newOwners(t), group(t)
	a := start(t, o, g, "a")
	waitUntil(t, "a to hold every slot", func() bool { return spread(o, "a") })
	b := start(t, o, g, "b")
	waitUntil(t, "a and b to share the slots", func() bool { return spread(o, "a", "b") })
	start(t, o, g, "c")
	waitUntil(t, "a, b and c to share the slots", func() bool { return spread(o, "a", "b", "c") })
	o.check()
	three := o.snapshot()
	if got := Place([]string{"a", "b", "c"}, DefaultEpsilon); got != Assignment(three) {
		t.Errorf("the slots ticked differ from the placement over a, b and c")
	}

	b.stop()
	waitUntil(t, "a and c to take b's slots", func() bool { return spread(o, "a", "c") })
	o.check()
	two := o.snapshot()
	movedOthers := 0
	for s := range Slots {
		if three[s] != "b" && three[s] != two[s] {
			movedOthers++
		}
	}
	t.Logf("b's leave moved %d of a's and c's slots besides b's", movedOthers)
	if movedOthers > Slots/10 {
		t.Errorf("b's leave moved %d slots that were not b's", movedOthers)
	}
	if _, err := clientOf(t).CoordinationV1().Leases("default").Get(context.Background(), LeaseName(g, "b"), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("b's Lease after it stopped: %v, want it deleted", err)
	}
	a.stop()
	waitUntil(t, "c to take every slot", func() bool { return spread(o, "c") })
	o.check()
}

// A member cut off from the API server stops every App once its renew
// deadline has passed; the others take its slots only after its Lease's
// duration, so never while it still ticks them.
func TestACutOffMemberStopsBeforeOthersTakeItsSlots(t *testing.T) {
	o, g := newOwners(t), group(t)
	start(t, o, g, "a")
	b := start(t, o, g, "b")
	waitUntil(t, "a and b to share the slots", func() bool { return spread(o, "a", "b") })
	b.cut.off.Store(true)
	waitUntil(t, "a to take b's slots", func() bool { return spread(o, "a") })
	o.check()
	if held := b.member.Held(); len(held) != 0 {
		t.Errorf("the cut-off member still holds %d slots", len(held))
	}

	// Back in reach, it rejoins and takes its share again.
	b.cut.off.Store(false)
	waitUntil(t, "a and b to share the slots again", func() bool { return spread(o, "a", "b") })
	o.check()
}

func clientOf(t *testing.T) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(cluster.Config)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A member stopping while its ticks take longer to drain than its Lease
// lasts keeps renewing it meanwhile: the others take its slots only once
// its ticks have ended.
func TestAStoppingMemberRenewsWhileItsTicksDrain(t *testing.T) {
	o, g := newOwners(t), group(t)
	start(t, o, g, "a")
	b := startDraining(t, o, g, "b", 5*time.Second) // the Lease lasts 3s
	waitUntil(t, "a and b to share the slots", func() bool { return spread(o, "a", "b") })
	b.stop()
	waitUntil(t, "a to take b's slots", func() bool { return spread(o, "a") })
	o.check()
}

// A second process of one identity (a pod force-deleted while it still
// runs) does not write over the first's Lease while the first renews it,
// so it takes no slot; once the first has gone, it takes them all.
func TestASecondProcessOfOneIdentityWaitsForTheFirst(t *testing.T) {
	o, g := newOwners(t), group(t)
	first := startAs(t, o, g, "a", "a-first", 0, zaptest.NewLogger(t).Named("a-first"))
	waitUntil(t, "the first to hold every slot", func() bool { return spread(o, "a-first") })
	core, logs := observer.New(zap.InfoLevel)
	startAs(t, o, g, "a", "a-second", 0, zap.New(core))
	waitUntil(t, "the second to be refused a few times", func() bool {
		return logs.FilterMessage("Could not write the member's Lease; retrying").Len() >= 3
	})
	if n := o.count()["a-second"]; n != 0 {
		t.Errorf("the second process took %d slots while the first renews", n)
	}
	first.stop()
	waitUntil(t, "the second to take every slot", func() bool { return spread(o, "a-second") })
	o.check()
}

// A member that died leaves a Lease that lists slots (here one whose
// slots cannot even be read: it holds them all): the others take none of
// them while it lasts, take them all once it has gone unchanged for its
// duration, and delete it once it has been gone for four.
func TestADeadMembersLeaseIsWaitedOutThenDeleted(t *testing.T) {
	o, g := newOwners(t), group(t)
	c := clientOf(t)
	ghost := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: LeaseName(g, "ghost"), Namespace: "default",
		Labels: map[string]string{LabelGroup: g}, Annotations: map[string]string{AnnotationSlots: "not a bitmap"}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("ghost"), LeaseDurationSeconds: ptr.To(int32(3))}}
	if _, err := c.CoordinationV1().Leases("default").Create(context.Background(), ghost, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	start(t, o, g, "a")
	waitUntil(t, "a to take every slot once the ghost's Lease expired", func() bool { return spread(o, "a") })
	o.mu.Lock()
	first := o.first["a"]
	o.mu.Unlock()
	if first != Slots {
		t.Errorf("a's first take was of %d slots: it took slots while the ghost's Lease, which holds them all, lasted", first)
	}
	waitUntil(t, "the ghost's Lease to be deleted", func() bool {
		_, err := c.CoordinationV1().Leases("default").Get(context.Background(), ghost.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	o.check()
}

func TestUnreadableSlotsHoldEverySlot(t *testing.T) {
	var some [Slots]bool
	some[3], some[200] = true, true
	if decode(encode(some)) != some {
		t.Error("encode and decode disagree")
	}
	for _, text := range []string{"", "zz", "00"} {
		all := decode(text)
		if len(listOf(all)) != Slots {
			t.Errorf("decode(%q) holds %d slots, want all %d", text, len(listOf(all)), Slots)
		}
	}
}

// A replica that runs with leader election holds the group's Lease (named
// after the group) and ticks every App, as during a rolling update from
// one mode to the other: a member takes no slot while that Lease is held,
// and takes them all once it is released. ActiveMembers, which the leader
// waits on, lists the member only once it holds slots.
func TestAMemberTakesNoSlotWhileALeaderHoldsTheGroupsLease(t *testing.T) {
	o, g := newOwners(t), group(t)
	c := clientOf(t)
	now := metav1.NewMicroTime(time.Now())
	leader := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: g, Namespace: "default"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("the-leader"), LeaseDurationSeconds: ptr.To(int32(600)), RenewTime: &now}}
	leader, err := c.CoordinationV1().Leases("default").Create(context.Background(), leader, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.InfoLevel)
	startAs(t, o, g, "a", "a", 0, zap.New(core))
	waitUntil(t, "a to be refused slots a few times", func() bool {
		n := 0
		for _, e := range logs.FilterMessage("Could not take slots; retrying").All() {
			if strings.Contains(fmt.Sprint(e.ContextMap()["error"]), "leader election") {
				n++
			}
		}
		return n >= 3
	})
	if n := o.count()["a"]; n != 0 {
		t.Errorf("a took %d slots while a leader holds the group's Lease", n)
	}
	if active, err := ActiveMembers(context.Background(), c, "default", g, &Freshness{}); err != nil || len(active) != 0 {
		t.Errorf("ActiveMembers while a holds no slot: %v, %v; want none", active, err)
	}
	leader.Spec.HolderIdentity = ptr.To("") // released, as leader election releases it on the way out
	if _, err := c.CoordinationV1().Leases("default").Update(context.Background(), leader, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "a to take every slot once the leader let go", func() bool { return spread(o, "a") })
	if active, err := ActiveMembers(context.Background(), c, "default", g, &Freshness{}); err != nil || len(active) != 1 || active[0] != "a" {
		t.Errorf("ActiveMembers while a holds every slot: %v, %v; want [a]", active, err)
	}
	o.check()
}
