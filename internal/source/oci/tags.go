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
	// maxTags bounds the tags kept of one repository (a tag is at most
	// 128 bytes: a few MiB at worst).
	maxTags = 50_000
	// maxTagPages bounds the pages read, however few tags each holds.
	maxTagPages = 200
	// maxTagsPageBytes bounds one page's body.
	maxTagsPageBytes = 4 << 20
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
		tags = append(tags, page.Tags...)
	}
	return tags, nil
}

// tagListing is a session's last listing of its repository's tags. One
// listing runs at a time; the resolves that arrive meanwhile wait for it,
// each no longer than its own context allows, and share its result.
type tagListing struct {
	once   sync.Once
	turn   chan struct{} // holds a token while a resolve reads or lists
	tags   []string
	listed time.Time // when the kept listing started; zero: never listed
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
	switch {
	case l.listed.IsZero():
	case fresh && l.listed.After(asked):
		return l.tags, nil
	case !fresh && now().Sub(l.listed) < maxAge:
		return l.tags, nil
	}
	started := now()
	tags, err := list(ctx)
	if err != nil {
		return nil, err
	}
	l.tags, l.listed = tags, started
	return tags, nil
}
