package leadership

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
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
