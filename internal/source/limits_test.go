package source_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/plumb-dev/plumb/internal/source"
	"github.com/plumb-dev/plumb/internal/source/git"
	"github.com/plumb-dev/plumb/internal/source/git/gittest"
)

func TestASymlinkLatticeFailsWithLimitExceededOnceAndIsNotRenderedAgain(t *testing.T) {
	w, _, url := repo(t, map[string]string{"deploy/l23/cm.yaml": configMap("bottom", "1")})
	// 24 levels of two links each: 46 symlinks that name 2^23 paths.
	for i := range 23 {
		dir := filepath.Join(w.Dir, "deploy", fmt.Sprintf("l%d", i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"a", "b"} {
			if err := os.Symlink(fmt.Sprintf("../l%d", i+1), filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	push(t, w, nil)
	r := newReader(t, source.DefaultLimits())
	req := source.Request{URL: url, Ref: git.Ref{Branch: "main"}, Path: "deploy", Auth: auth}

	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := r.Read(context.Background(), req)
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if source.ReasonOf(err) != source.ReasonLimitExceeded || !strings.Contains(err.Error(), "listed") {
		t.Fatalf("got %v (%s), want LimitExceeded for the listed paths", err, source.ReasonOf(err))
	}
	if allocated := after.TotalAlloc - before.TotalAlloc; allocated > 256<<20 {
		t.Errorf("the read allocated %d MiB, want a bound far below the 2^23 paths", allocated>>20)
	}
	if _, again := r.Read(context.Background(), req); again == nil || again.Error() != err.Error() || r.Renders() != 1 {
		t.Errorf("the same revision again: %v after %d renders, want the remembered failure and 1 render", again, r.Renders())
	}
	req.Refresh = true
	if _, err := r.Read(context.Background(), req); err == nil || r.Renders() != 2 {
		t.Errorf("a refresh: %v after %d renders, want a new render that fails again", err, r.Renders())
	}
}

func TestReadsOfOneRepositoryShareOneLsRemoteWithinTheWindow(t *testing.T) {
	_, name, url := repo(t, map[string]string{"deploy/a.yaml": configMap("a", "1")})
	ctx := context.Background()
	req := source.Request{URL: url, Ref: git.Ref{Branch: "main"}, Path: "deploy", Auth: auth}
	bearer := req
	bearer.Auth = git.Auth{BearerToken: gittest.BearerToken}
	// A first reader fetches the commit for both credentials into the cache
	// folder; the reader under test then finds it there and never fetches.
	dir := t.TempDir()
	warm, err := source.NewReader(source.Options{CacheDir: dir, Limits: source.DefaultLimits()})
	if err != nil {
		t.Fatal(err)
	}
	for _, req := range []source.Request{req, bearer} {
		if _, err := warm.Read(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	r, err := source.NewReader(source.Options{CacheDir: dir, Limits: source.DefaultLimits()})
	if err != nil {
		t.Fatal(err)
	}
	listRefs := func() int {
		counts := server.RequestCounts(name)
		if counts[gittest.RequestFetch] != 2 {
			t.Fatalf("%d fetches, want only the 2 of the first reader", counts[gittest.RequestFetch])
		}
		return counts[gittest.RequestListRefs]
	}
	start := listRefs()
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 20 { // twenty Apps that track the same repository tick at once
		wg.Go(func() {
			_, err := r.Read(ctx, req)
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := listRefs() - start; got != 1 {
		t.Errorf("20 reads at once made %d ls-remotes, want 1", got)
	}
	t.Run("a refresh asks the remote again", func(t *testing.T) {
		before := listRefs()
		req := req
		req.Refresh = true
		if _, err := r.Read(ctx, req); err != nil {
			t.Fatal(err)
		}
		if got := listRefs() - before; got != 1 {
			t.Errorf("a refresh made %d ls-remotes, want 1", got)
		}
	})
	t.Run("other credentials make their own ls-remote", func(t *testing.T) {
		before := listRefs()
		if _, err := r.Read(ctx, bearer); err != nil {
			t.Fatal(err)
		}
		if got := listRefs() - before; got != 1 {
			t.Errorf("a read with other credentials made %d ls-remotes, want its own 1", got)
		}
	})
}

func TestTheRenderCacheIsBoundedInBytes(t *testing.T) {
	big := strings.Repeat("x", 10_000)
	_, _, urlA := repo(t, map[string]string{"deploy/a.yaml": configMap("a", big)})
	w, err := server.NewWorkdir("render-cache-bytes-b.git")
	if err != nil {
		t.Fatal(err)
	}
	push(t, w, map[string]string{"deploy/b.yaml": configMap("b", big)})
	urlB := server.HTTPURL("render-cache-bytes-b.git")
	ctx := context.Background()
	read := func(r *source.Reader, url string) bool {
		t.Helper()
		res, err := r.Read(ctx, source.Request{URL: url, Ref: git.Ref{Branch: "main"}, Path: "deploy", Auth: auth})
		if err != nil {
			t.Fatal(err)
		}
		return res.Cached
	}
	for _, tt := range []struct {
		budget      int64
		wantCached  bool
		wantRenders int64
	}{
		{budget: 15_000, wantCached: false, wantRenders: 3}, // room for one render of ~10 kB
		{budget: 1 << 20, wantCached: true, wantRenders: 2},
	} {
		t.Run(fmt.Sprintf("a budget of %d bytes", tt.budget), func(t *testing.T) {
			r, err := source.NewReader(source.Options{CacheDir: t.TempDir(), RenderCacheBytes: tt.budget, RefsTTL: -1})
			if err != nil {
				t.Fatal(err)
			}
			read(r, urlA)
			read(r, urlB)
			if cached := read(r, urlA); cached != tt.wantCached || r.Renders() != tt.wantRenders {
				t.Errorf("the first render again: cached=%v after %d renders, want cached=%v after %d", cached, r.Renders(), tt.wantCached, tt.wantRenders)
			}
		})
	}
}
