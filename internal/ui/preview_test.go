package ui

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/reconcile"
)

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 20*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// TestPreviewsAreBoundedForEveryoneAndForgotten: however many viewers
// open App pages, at most MaxPreviews previews run at once (each may
// render with the whole render memory limit); the others wait their turn,
// and once every preview is done the server keeps no slot of any viewer.
func TestPreviewsAreBoundedForEveryoneAndForgotten(t *testing.T) {
	s, err := New(Options{Identity: Local{}, MaxPreviews: 2})
	if err != nil {
		t.Fatal(err)
	}
	var running, most atomic.Int32
	release := make(chan struct{})
	preview := func(context.Context, *plumbv1.App) (*reconcile.Preview, error) {
		n := running.Add(1)
		defer running.Add(-1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		<-release
		return nil, errors.New("previewed")
	}
	const viewers = 40
	var wg sync.WaitGroup
	views := make([]diffView, viewers)
	for i := range viewers {
		viewer := &Viewer{Name: fmt.Sprint("viewer-", i), Key: fmt.Sprint("key-", i), Preview: preview}
		wg.Go(func() { views[i] = s.diffOf(context.Background(), viewer, &plumbv1.App{}) })
	}
	waitUntil(t, "every preview to run or wait", func() bool { return running.Load()+s.queued.Load() == viewers })
	if got := running.Load(); got != 2 {
		t.Errorf("%d previews run at once, want MaxPreviews (2)", got)
	}
	close(release)
	wg.Wait()
	if m := most.Load(); m > 2 {
		t.Errorf("%d previews ran at once, want at most 2", m)
	}
	for i, v := range views {
		if v.Error != "The preview failed: previewed" {
			t.Errorf("viewer %d: %q, want their preview's outcome", i, v.Error)
		}
	}
	s.mu.Lock()
	slots := len(s.slots)
	s.mu.Unlock()
	if slots != 0 {
		t.Errorf("%d viewers' preview slots kept after every preview ended, want none", slots)
	}
}
