package oci

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Bounds on listing a repository's tags, so that a registry with an endless
// list (pages that never end, or pages of ever more tags) costs bounded
// memory and requests.
const (
	// tagsPageSize is the page size asked for; a registry may send fewer.
	tagsPageSize = 1000
	// maxTags bounds the tags of one repository.
	maxTags = 50_000
	// maxTagBytes bounds one tag, as the distribution spec's tag grammar
	// does; with maxTags a listing is at most about 7 MiB.
	maxTagBytes = 128
	// maxTagPages bounds the pages read, however few tags each holds.
	maxTagPages = 200
	// maxTagsPageBytes bounds one page's body.
	maxTagsPageBytes = 4 << 20
	// DefaultMaxKeptTagBytes bounds the listings a Client keeps, over all
	// its repositories and accounts (estimated as each tag's bytes plus a
	// string header).
	DefaultMaxKeptTagBytes = 64 << 20
)

// listTags reads every page of the repository's tags within the bounds.
// The pages' links are go-containerregistry's to follow: it refuses a link
// to another host.
func listTags(ctx context.Context, puller *remote.Puller, repo name.Repository) ([]string, error) {
	what := "the tags of " + repo.String()
	lister, err := puller.Lister(ctx, repo)
	if err != nil {
		return nil, classify(err, what)
	}
	var tags []string
	for pages := 0; lister.HasNext(); pages++ {
		if pages == maxTagPages {
			return nil, fmt.Errorf("%w: %s run past %d pages", ErrLimitExceeded, what, maxTagPages)
		}
		page, err := lister.Next(ctx)
		if err != nil {
			return nil, classify(err, what)
		}
		if len(tags)+len(page.Tags) > maxTags {
			return nil, fmt.Errorf("%w: %s number more than %d", ErrLimitExceeded, what, maxTags)
		}
		for _, tag := range page.Tags {
			if len(tag) > maxTagBytes {
				return nil, fmt.Errorf("%w: %s hold a tag of %d bytes, more than %d", ErrLimitExceeded, what, len(tag), maxTagBytes)
			}
		}
		tags = append(tags, page.Tags...)
	}
	return tags, nil
}

// tagBudget bounds the bytes of the listings a Client keeps. A listing
// that does not fit serves the resolve that made it and is not kept.
type tagBudget struct {
	mu        sync.Mutex
	used, max int64
}

// take reserves n bytes, or reports that they do not fit.
func (b *tagBudget) take(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.max {
		return false
	}
	b.used += n
	return true
}

// give returns n bytes taken.
func (b *tagBudget) give(n int64) {
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
}

// tagsBytes estimates what a listing keeps on the heap.
func tagsBytes(tags []string) int64 {
	n := int64(len(tags)) * 16 // string headers
	for _, tag := range tags {
		n += int64(len(tag))
	}
	return n
}

// tagListing is a session's last listing of its repository's tags. One
// listing runs at a time; the resolves that arrive meanwhile wait for it,
// each no longer than its own context allows, and share its result. The
// listing kept counts against budget (nil: unbounded) until it is
// replaced or the session is dropped.
type tagListing struct {
	once   sync.Once
	turn   chan struct{} // holds a token while a resolve reads or lists
	budget *tagBudget

	mu      sync.Mutex // guards the fields below: drop may run while a resolve holds turn
	tags    []string
	listed  time.Time // when the kept listing started; zero: none kept
	bytes   int64     // taken from budget for tags
	dropped bool      // the session was dropped: keep nothing more
}

// kept returns the listing kept and when it started.
func (l *tagListing) kept() ([]string, time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tags, l.listed
}

// keep replaces the listing kept with tags, if the budget has room.
func (l *tagListing) keep(tags []string, started time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.forgetLocked()
	if l.dropped {
		return
	}
	n := tagsBytes(tags)
	if l.budget != nil && !l.budget.take(n) {
		return
	}
	l.tags, l.listed, l.bytes = tags, started, n
}

// drop forgets the listing for good and returns its bytes to the budget
// (the session left the Client's cache).
func (l *tagListing) drop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.forgetLocked()
	l.dropped = true
}

func (l *tagListing) forgetLocked() {
	if l.budget != nil {
		l.budget.give(l.bytes)
	}
	l.tags, l.listed, l.bytes = nil, time.Time{}, 0
}

// get returns the listing if it is younger than maxAge, and lists again
// otherwise. A fresh get (a push webhook asked for it) lists again unless
// a listing started after it was asked for: the resolves a push brings
// forward at once share one listing, and none is served tags read before
// it asked. A failed listing is not kept.
func (l *tagListing) get(ctx context.Context, now func() time.Time, maxAge time.Duration, fresh bool, list func(context.Context) ([]string, error)) ([]string, error) {
	asked := now()
	l.once.Do(func() { l.turn = make(chan struct{}, 1) })
	select {
	case l.turn <- struct{}{}:
		defer func() { <-l.turn }()
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for another listing of the tags: %w", ctx.Err())
	}
	kept, listed := l.kept()
	switch {
	case listed.IsZero():
	case fresh && listed.After(asked):
		return kept, nil
	case !fresh && now().Sub(listed) < maxAge:
		return kept, nil
	}
	started := now()
	tags, err := list(ctx)
	if err != nil {
		return nil, err
	}
	l.keep(tags, started)
	return tags, nil
}
