package oci

import (
	"context"
	"fmt"
	"slices"
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
	// string header): some nine of the largest a listing may be, or
	// thousands of common ones.
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
	return slices.Clone(tags), nil // without append's spare capacity: it may be kept
}

// keptListings holds the listings of tags a Client keeps, per session,
// within a byte budget. A listing older than maxAge serves no resolve (a
// timer's wants one younger, a fresh one one newer than its push), so it
// makes room when room is wanted; past that, a listing that does not fit
// serves the resolve that made it and is not kept. One lock guards it all.
type keptListings struct {
	mu   sync.Mutex
	max  int64 // 0: no bound
	used int64
	kept map[*tagListing]keptListing
}

// keptListing is one session's listing.
type keptListing struct {
	tags   []string
	listed time.Time // when it started
	bytes  int64
}

// tagsBytes estimates what a listing keeps on the heap.
func tagsBytes(tags []string) int64 {
	n := int64(len(tags)) * 16 // string headers
	for _, tag := range tags {
		n += int64(len(tag))
	}
	return n
}

// get returns l's listing and when it started (zero: none kept).
func (k *keptListings) get(l *tagListing) ([]string, time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	e := k.kept[l]
	return e.tags, e.listed
}

// put keeps tags as l's listing in place of its last, if they fit once
// the listings older than maxAge are dropped; a dropped session keeps
// nothing.
func (k *keptListings) put(l *tagListing, tags []string, started, now time.Time, maxAge time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.forgetLocked(l)
	if l.dropped {
		return
	}
	n := tagsBytes(tags)
	if k.max > 0 && k.used+n > k.max {
		for other, e := range k.kept {
			if now.Sub(e.listed) >= maxAge {
				k.forgetLocked(other)
			}
		}
		if k.used+n > k.max {
			return
		}
	}
	if k.kept == nil {
		k.kept = map[*tagListing]keptListing{}
	}
	k.kept[l] = keptListing{tags: tags, listed: started, bytes: n}
	k.used += n
}

// drop forgets l's listing for good (its session left the Client).
func (k *keptListings) drop(l *tagListing) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.forgetLocked(l)
	l.dropped = true
}

func (k *keptListings) forgetLocked(l *tagListing) {
	if e, ok := k.kept[l]; ok {
		k.used -= e.bytes
		delete(k.kept, l)
	}
}

// tagListing is a session's access to its repository's listing of tags,
// kept in store. One listing runs at a time; the resolves that arrive
// meanwhile wait for it, each no longer than its own context allows, and
// share its result.
type tagListing struct {
	once    sync.Once
	turn    chan struct{} // holds a token while a resolve reads or lists
	store   *keptListings // nil: a store of its own, unbounded
	dropped bool          // guarded by store.mu
}

// get returns the listing if it is younger than maxAge, and lists again
// otherwise. A fresh get (fresh non-nil: a push webhook asked for it)
// lists again unless a listing started after it asked, or at or after
// *fresh (when set) and younger than maxAge: the resolves a push brings
// forward share one listing, and none is served tags read before the push
// was seen. A failed listing is not kept.
func (l *tagListing) get(ctx context.Context, now func() time.Time, maxAge time.Duration, fresh *time.Time, list func(context.Context) ([]string, error)) ([]string, error) {
	asked := now()
	l.once.Do(func() {
		l.turn = make(chan struct{}, 1)
		if l.store == nil {
			l.store = &keptListings{}
		}
	})
	select {
	case l.turn <- struct{}{}:
		defer func() { <-l.turn }()
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for another listing of the tags: %w", ctx.Err())
	}
	kept, listed := l.store.get(l)
	switch {
	case listed.IsZero():
	case fresh != nil && (listed.After(asked) || !fresh.IsZero() && !listed.Before(*fresh) && now().Sub(listed) < maxAge):
		return kept, nil
	case fresh == nil && now().Sub(listed) < maxAge:
		return kept, nil
	}
	started := now()
	tags, err := list(ctx)
	if err != nil {
		return nil, err
	}
	l.store.put(l, tags, started, now(), maxAge)
	return tags, nil
}
