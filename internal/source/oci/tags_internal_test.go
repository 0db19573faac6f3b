package oci

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A fresh get is never served a listing that started before it asked, and
// the fresh gets that wait for one listing share the next: a push that
// arrives while a timer's listing runs is seen, and a push that brings
// many Apps forward at once costs one more listing, not one each.
func TestAFreshListingStartsAfterItWasAskedFor(t *testing.T) {
	var calls atomic.Int64
	base := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	now := func() time.Time { return base.Add(time.Duration(calls.Add(1)) * time.Millisecond) }
	var l tagListing
	var lists atomic.Int64
	release := make(chan struct{})
	listing := make(chan struct{})
	before := func(ctx context.Context) ([]string, error) { // the timer's listing, read before the push
		lists.Add(1)
		close(listing)
		<-release
		return []string{"1.0.0"}, nil
	}
	after := func(ctx context.Context) ([]string, error) {
		lists.Add(1)
		return []string{"1.0.0", "1.1.0"}, nil
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if tags, err := l.get(context.Background(), now, time.Minute, false, before); err != nil || len(tags) != 1 {
			t.Errorf("the timer's get: %v, %v", tags, err)
		}
	}()
	<-listing
	got := make([][]string, 2)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tags, err := l.get(context.Background(), now, time.Minute, true, after)
			if err != nil {
				t.Errorf("fresh get %d: %v", i, err)
			}
			got[i] = tags
		}()
	}
	for calls.Load() < 4 { // both fresh gets have asked (the timer's get took two readings)
		time.Sleep(time.Millisecond)
	}
	// A get that waits beyond its own deadline gives up, the others wait on.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.get(ctx, now, time.Minute, true, after); !errors.Is(err, context.Canceled) {
		t.Errorf("a canceled get waiting for the listing: %v, want context.Canceled", err)
	}
	close(release)
	wg.Wait()
	for i, tags := range got {
		if !slices.Equal(tags, []string{"1.0.0", "1.1.0"}) {
			t.Errorf("fresh get %d was served %v, the listing that started before it asked", i, tags)
		}
	}
	if n := lists.Load(); n != 2 {
		t.Errorf("%d listings, want 2: the timer's and one shared by the fresh gets", n)
	}
}
