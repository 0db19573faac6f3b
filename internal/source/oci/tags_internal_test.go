package oci

import (
	"context"
	"errors"
	"fmt"
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

// The listings a Client keeps fit its budget: one that does not fit
// serves its resolve and is listed again by the next, and a listing
// dropped with its session, or replaced, gives its bytes back.
func TestKeptListingsFitTheBudget(t *testing.T) {
	now := func() time.Time { return time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC) }
	budget := &tagBudget{max: 100}
	small, large := []string{"1.0.0"}, []string{"1.0.0", "1.1.0", "1.2.0", "1.3.0", "1.4.0", "1.5.0"} // 21 and 126 bytes
	var a, b tagListing
	a.budget, b.budget = budget, budget
	lists := 0
	listing := func(tags []string) func(context.Context) ([]string, error) {
		return func(context.Context) ([]string, error) { lists++; return tags, nil }
	}
	for range 2 {
		if tags, err := a.get(context.Background(), now, time.Minute, false, listing(large)); err != nil || len(tags) != 6 {
			t.Fatalf("a listing over the budget: %v, %v; want it served", tags, err)
		}
	}
	if lists != 2 || budget.used != 0 {
		t.Errorf("a listing over the budget: %d listings, %d bytes kept; want 2 (not kept), 0", lists, budget.used)
	}
	lists = 0
	for range 2 {
		if _, err := b.get(context.Background(), now, time.Minute, false, listing(small)); err != nil {
			t.Fatal(err)
		}
	}
	if lists != 1 || budget.used != tagsBytes(small) {
		t.Errorf("a listing within the budget: %d listings, %d bytes kept; want 1 (kept), %d", lists, budget.used, tagsBytes(small))
	}
	b.keep([]string{"2.0.0", "2.1.0"}, now())
	if want := tagsBytes([]string{"2.0.0", "2.1.0"}); budget.used != want {
		t.Errorf("a replaced listing: %d bytes kept, want %d", budget.used, want)
	}
	b.drop()
	b.keep(small, now())
	if budget.used != 0 {
		t.Errorf("after the session was dropped: %d bytes kept, want 0", budget.used)
	}
	if tags, listed := b.kept(); tags != nil || !listed.IsZero() {
		t.Errorf("a dropped listing keeps %v (listed %v)", tags, listed)
	}
}

// A Client's sessions give their listings' bytes back as they leave its
// cache.
func TestADroppedSessionGivesItsListingBack(t *testing.T) {
	c := &Client{}
	repo, err := c.repository("oci://registry.example.com/org/app")
	if err != nil {
		t.Fatal(err)
	}
	first, err := c.session(repo, Auth{Username: "u0"})
	if err != nil {
		t.Fatal(err)
	}
	first.tags.keep([]string{"1.0.0"}, time.Now())
	if c.tagBytes.used == 0 {
		t.Fatal("a kept listing took no bytes")
	}
	for i := 1; i <= maxSessions; i++ { // the first session is the least recently used
		if _, err := c.session(repo, Auth{Username: fmt.Sprint("u", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if c.tagBytes.used != 0 {
		t.Errorf("%d bytes kept after the session was dropped, want 0", c.tagBytes.used)
	}
}
