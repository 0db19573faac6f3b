package leadership

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// The Lease here is the client-go fake's: these tests are about what Run
// does with the terms when renewals fail or hang, which is Run's own logic.

// terms records the terms Run starts and how each ended.
type terms struct {
	mu      sync.Mutex
	started int
	ends    []string // "lost" or "stopped"
}

func (tr *terms) term(lost, stop <-chan struct{}) {
	tr.mu.Lock()
	tr.started++
	tr.mu.Unlock()
	end := "stopped"
	select {
	case <-lost:
		end = "lost"
	case <-stop:
	}
	tr.mu.Lock()
	tr.ends = append(tr.ends, end)
	tr.mu.Unlock()
}

func (tr *terms) state() (int, []string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.started, append([]string(nil), tr.ends...)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("waited in vain for %s", what)
	}
}

func run(t *testing.T, client *fake.Clientset, tr *terms) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{Client: client, Namespace: "plumb", Name: "lease",
			LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 250 * time.Millisecond}, tr.term, zap.NewNop())
	}()
	return func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("Run did not return after its context ended")
		}
	}
}

func TestALostLeaseEndsTheTermAndRunCampaignsAgain(t *testing.T) {
	client := fake.NewClientset()
	var failing atomic.Bool
	client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failing.Load() {
			return true, nil, errors.New("the API server is unreachable")
		}
		return false, nil, nil
	})
	tr := &terms{}
	stop := run(t, client, tr)
	waitFor(t, "a first term", func() bool { n, _ := tr.state(); return n == 1 })

	failing.Store(true) // renewals fail: the term ends, the process goes on
	waitFor(t, "the term to end as lost", func() bool { _, ends := tr.state(); return len(ends) >= 1 && ends[len(ends)-1] == "lost" })
	failing.Store(false) // the API server is back: a new term starts
	waitFor(t, "a second term", func() bool { n, _ := tr.state(); return n >= 2 })

	stop()
	if n, ends := tr.state(); len(ends) != n || ends[n-1] != "stopped" {
		t.Errorf("terms started %d, ended %v; want each ended, the last by the stop", n, ends)
	}
}

func TestARenewalThatHangsEndsTheTermBeforeTheLeaseCouldPassOn(t *testing.T) {
	client := fake.NewClientset()
	var hanging atomic.Bool
	unblock := make(chan struct{})
	client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if hanging.Load() {
			<-unblock // an API server that accepts the request and never answers
			return true, nil, errors.New("timed out")
		}
		return false, nil, nil
	})
	tr := &terms{}
	stop := run(t, client, tr)
	waitFor(t, "a first term", func() bool { n, _ := tr.state(); return n == 1 })
	hanging.Store(true)
	// The renewal hangs; the term must end anyway, while it still hangs.
	waitFor(t, "the term to end while the renewal hangs", func() bool { _, ends := tr.state(); return len(ends) >= 1 && ends[len(ends)-1] == "lost" })
	hanging.Store(false)
	close(unblock)
	waitFor(t, "a second term once the API server answers", func() bool { n, _ := tr.state(); return n >= 2 })
	stop()
}

// A replica whose renewal hung while another took the Lease must not give
// the other's Lease away when its term ends: client-go's release (v0.37)
// reads the Lease afresh but asks whether it leads from what it saw last,
// and so empties a Lease another holds, which lets this replica campaign
// straight back in while the other still ticks. Run releases the Lease
// only on a stop, and only while it holds it.
func TestATermLostWhileAnotherTookTheLeaseDoesNotReleaseTheirs(t *testing.T) {
	clientA := fake.NewClientset()
	// B shares A's objects but not its client, whose reactors run one at
	// a time: A's hanging renewal must not hold B's requests up.
	clientB := &fake.Clientset{}
	clientB.AddReactor("*", "*", k8stesting.ObjectReaction(clientA.Tracker()))
	var (
		mu           sync.Mutex
		hang         bool // A's renewals hang
		unblock      = make(chan struct{})
		taken        bool // B took the Lease
		emptiedTaken bool // A emptied the Lease while B held it
		getsAfter    int  // A's Lease reads after its hang ended
		released     bool
	)
	holderOf := func(action k8stesting.Action) string {
		lease := action.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease)
		if lease.Spec.HolderIdentity == nil {
			return ""
		}
		return *lease.Spec.HolderIdentity
	}
	// While A is cut off, its renewals fail at once and its reads of the
	// Lease hang (an API server that stops answering), until B has taken
	// the Lease: A's elector then never sees B's Lease before its term ends.
	clientA.PrependReactor("update", "leases", func(action k8stesting.Action) (bool, runtime.Object, error) {
		holder := holderOf(action)
		mu.Lock()
		defer mu.Unlock()
		if hang && holder != "" {
			return true, nil, errors.New("the API server is unreachable")
		}
		if holder == "" && taken {
			emptiedTaken = true
		}
		return false, nil, nil
	})
	clientA.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		cutOff := hang
		if released {
			getsAfter++
		}
		mu.Unlock()
		if cutOff {
			<-unblock
			return true, nil, errors.New("timed out")
		}
		return false, nil, nil
	})
	clientB.PrependReactor("update", "leases", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if holderOf(action) != "" {
			mu.Lock()
			taken = true
			mu.Unlock()
		}
		return false, nil, nil
	})
	a, b := &terms{}, &terms{}
	stopA := run(t, clientA, a)
	waitFor(t, "a first term of A", func() bool { n, _ := a.state(); return n == 1 })
	mu.Lock()
	hang = true
	mu.Unlock()
	stopB := run(t, clientB, b)
	defer stopB()
	waitFor(t, "B to take the Lease while A is cut off", func() bool { n, _ := b.state(); return n == 1 })
	mu.Lock()
	hang, released = false, true
	mu.Unlock()
	close(unblock)
	// A campaigns again (reading the Lease), after its elector has done
	// whatever it does when its term ends.
	waitFor(t, "A to campaign again", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return getsAfter >= 2
	})
	mu.Lock()
	clobbered := emptiedTaken
	mu.Unlock()
	if clobbered {
		t.Error("A emptied the Lease that B held (it released a Lease it no longer led)")
	}
	if n, _ := a.state(); n != 1 {
		t.Errorf("A started %d terms while B held the Lease, want 1", n)
	}
	stopA()
}

// On a stop, the replica that leads gives the Lease up (after its term
// drained), so that the next need not wait for it to expire.
func TestAStopReleasesTheLease(t *testing.T) {
	client := fake.NewClientset()
	tr := &terms{}
	stop := run(t, client, tr)
	waitFor(t, "a term", func() bool { n, _ := tr.state(); return n == 1 })
	stop()
	lease, err := client.CoordinationV1().Leases("plumb").Get(context.Background(), "lease", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := lease.Spec.HolderIdentity; (h != nil && *h != "") || lease.Spec.LeaseDurationSeconds == nil || *lease.Spec.LeaseDurationSeconds != 1 {
		t.Errorf("after the stop the Lease is held by %v for %v s, want released", lease.Spec.HolderIdentity, lease.Spec.LeaseDurationSeconds)
	}
}
