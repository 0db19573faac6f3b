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
		if tags, err := l.get(context.Background(), now, time.Minute, nil, before); err != nil || len(tags) != 1 {
			t.Errorf("the timer's get: %v, %v", tags, err)
		}
	}()
	<-listing
	got := make([][]string, 2)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tags, err := l.get(context.Background(), now, time.Minute, &time.Time{}, after)
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
	if _, err := l.get(ctx, now, time.Minute, &time.Time{}, after); !errors.Is(err, context.Canceled) {
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
// serves its resolve and is listed again by the next; listings older than
// the max age (which serve no resolve) make room for a new one; a listing
// replaced, or dropped with its session, gives its bytes back.
func TestKeptListingsFitTheBudget(t *testing.T) {
	clock := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	now := func() time.Time { return clock }
	store := &keptListings{max: 100}
	small, large := []string{"1.0.0"}, []string{"1.0.0", "1.1.0", "1.2.0", "1.3.0", "1.4.0", "1.5.0"} // 21 and 126 bytes
	a, b, c := &tagListing{store: store}, &tagListing{store: store}, &tagListing{store: store}
	lists := 0
	listing := func(tags []string) func(context.Context) ([]string, error) {
		return func(context.Context) ([]string, error) { lists++; return tags, nil }
	}
	for range 2 {
		if tags, err := a.get(context.Background(), now, time.Minute, nil, listing(large)); err != nil || len(tags) != 6 {
			t.Fatalf("a listing over the budget: %v, %v; want it served", tags, err)
		}
	}
	if lists != 2 || store.used != 0 {
		t.Errorf("a listing over the budget: %d listings, %d bytes kept; want 2 (not kept), 0", lists, store.used)
	}
	lists = 0
	for range 2 {
		if _, err := b.get(context.Background(), now, time.Minute, nil, listing(small)); err != nil {
			t.Fatal(err)
		}
	}
	if lists != 1 || store.used != tagsBytes(small) {
		t.Errorf("a listing within the budget: %d listings, %d bytes kept; want 1 (kept), %d", lists, store.used, tagsBytes(small))
	}
	store.put(b, []string{"2.0.0", "2.1.0"}, clock, clock, time.Minute)
	if want := tagsBytes([]string{"2.0.0", "2.1.0"}); store.used != want {
		t.Errorf("a replaced listing: %d bytes kept, want %d", store.used, want)
	}
	// Past the max age, b's listing serves no resolve and makes room.
	store.max = tagsBytes(small) + tagsBytes([]string{"2.0.0", "2.1.0"}) - 1
	clock = clock.Add(2 * time.Minute)
	store.put(c, small, clock, clock, time.Minute)
	if tags, _ := store.get(c); len(tags) != 1 || store.used != tagsBytes(small) {
		t.Errorf("a listing when only an expired one is kept: %v kept, %d bytes used; want it kept in the expired one's place", tags, store.used)
	}
	store.drop(c)
	store.put(c, small, clock, clock, time.Minute)
	if store.used != 0 {
		t.Errorf("after the session was dropped: %d bytes kept, want 0", store.used)
	}
	if tags, listed := store.get(c); tags != nil || !listed.IsZero() {
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
	now := time.Now()
	c.listings.put(&first.tags, []string{"1.0.0"}, now, now, time.Minute)
	if c.listings.used == 0 {
		t.Fatal("a kept listing took no bytes")
	}
	for i := 1; i <= maxSessions; i++ { // the first session is the least recently used
		if _, err := c.session(repo, Auth{Username: fmt.Sprint("u", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if c.listings.used != 0 || len(c.listings.kept) != 0 {
		t.Errorf("%d bytes, %d listings kept after the session was dropped, want none", c.listings.used, len(c.listings.kept))
	}
}

// The fresh gets of the Apps one push woke share the first listing that
// started after the push was seen, though each asks after it started; a
// listing that started before the push was seen serves none of them.
func TestFreshGetsOfOnePushShareAListing(t *testing.T) {
	base := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	clock := base
	now := func() time.Time { return clock }
	var l tagListing
	lists := 0
	list := func(context.Context) ([]string, error) { lists++; return []string{"1.0.0"}, nil }
	// A timer's listing before the push.
	if _, err := l.get(context.Background(), now, time.Minute, nil, list); err != nil {
		t.Fatal(err)
	}
	seen := base.Add(time.Second) // the push's sync requests were seen
	for i := range 5 {
		clock = seen.Add(time.Duration(i+1) * time.Second) // each App's tick asks later
		if _, err := l.get(context.Background(), now, time.Minute, &seen, list); err != nil {
			t.Fatal(err)
		}
	}
	if lists != 2 {
		t.Errorf("%d listings, want 2: the timer's, and one that the five Apps the push woke share", lists)
	}
	// An App the push woke whose tick comes past the max age lists again.
	clock = seen.Add(10 * time.Minute)
	if _, err := l.get(context.Background(), now, time.Minute, &seen, list); err != nil {
		t.Fatal(err)
	}
	if lists != 3 {
		t.Errorf("%d listings, want 3: a listing past the max age serves no fresh get", lists)
	}
	// A push seen later is not served that listing.
	later := clock.Add(time.Second)
	clock = later.Add(time.Second)
	if _, err := l.get(context.Background(), now, time.Minute, &later, list); err != nil {
		t.Fatal(err)
	}
	if lists != 4 {
		t.Errorf("%d listings, want 4: a later push lists again", lists)
	}
}
