package shard

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

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
	faults []string
}

func newOwners(t *testing.T) *owners { return &owners{t: t, takes: map[string]int{}} }

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
}

func (h *handler) Take(slots []int) {
	h.o.mu.Lock()
	defer h.o.mu.Unlock()
	for _, s := range slots {
		if other := h.o.owner[s]; other != "" && other != h.identity {
			h.o.faults = append(h.o.faults, fmt.Sprintf("%s took slot %d, which %s ticks", h.identity, s, other))
		}
		h.o.owner[s] = h.identity
		h.o.takes[h.identity]++
	}
}

func (h *handler) Release(slots []int) {
	time.Sleep(50 * time.Millisecond) // ticks under way drain
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
	cfg := rest.CopyConfig(cluster.Config)
	cut := &switchable{}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { cut.next = rt; return cut })
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{Client: client, Namespace: "default", Group: group, Identity: identity,
		LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 250 * time.Millisecond, Log: zaptest.NewLogger(t).Named(identity)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx, o.handler(identity)) }()
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
