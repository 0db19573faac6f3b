package helmrepo_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/internal/source/helmrepo"
)

// repository is a static Helm repository: a folder served by net/http's
// file server (Last-Modified, If-Modified-Since), optionally behind basic
// auth, that counts what it was asked and answered.
type repository struct {
	dir string
	srv *httptest.Server

	mu       sync.Mutex
	answered map[int]int // status code → count
}

func startRepository(t *testing.T, user, password string) *repository {
	t.Helper()
	r := &repository{dir: t.TempDir(), answered: map[int]int{}}
	files := http.FileServer(http.Dir(r.dir))
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		defer func() {
			r.mu.Lock()
			r.answered[rec.status]++
			r.mu.Unlock()
		}()
		if u, p, _ := req.BasicAuth(); user != "" && (u != user || p != password) {
			rec.WriteHeader(http.StatusUnauthorized)
			return
		}
		files.ServeHTTP(rec, req)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// publish writes index.yaml, modified at modified.
func (r *repository) publish(t *testing.T, data []byte, modified time.Time) {
	t.Helper()
	file := filepath.Join(r.dir, "index.yaml")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(file, modified, modified); err != nil {
		t.Fatal(err)
	}
}

// counts returns and resets the answers by status.
func (r *repository) counts() map[int]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.answered
	r.answered = map[int]int{}
	return out
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

// clock is a settable clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func TestAnIndexIsDownloadedOncePerChangeHoweverManyAppsReadIt(t *testing.T) {
	repo := startRepository(t, "", "")
	old := time.Now().Add(-time.Hour)
	repo.publish(t, writeHelm(t, helmIndex(t, 3, 2)), old)
	clk := &clock{now: time.Now()}
	c := &helmrepo.Client{AllowHTTP: true, Now: clk.Now}
	ctx := context.Background()

	// Twenty Apps on one tick: one download.
	var wg sync.WaitGroup
	results := make([]helmrepo.IndexResult, 20)
	errs := make([]error, 20)
	for i := range results {
		wg.Go(func() { results[i], errs[i] = c.Index(ctx, repo.srv.URL, helmrepo.Auth{}, false) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("App %d: %v", i, err)
		}
		if results[i].Index != results[0].Index || results[i].Index.Versions() != 6 {
			t.Fatalf("App %d was served another index, or a wrong one (%d versions)", i, results[i].Index.Versions())
		}
	}
	if got := repo.counts(); got[http.StatusOK] != 1 || len(got) != 1 {
		t.Errorf("twenty reads made %v, want one 200", got)
	}

	// Past the max age, one conditional request finds it unchanged.
	clk.advance(helmrepo.DefaultIndexMaxAge)
	unchanged, err := c.Index(ctx, repo.srv.URL, helmrepo.Auth{}, false)
	if err != nil || unchanged.Index != results[0].Index || !unchanged.Requested || unchanged.Digest != results[0].Digest {
		t.Fatalf("unchanged: %+v, %v", unchanged, err)
	}
	if got := repo.counts(); got[http.StatusNotModified] != 1 || len(got) != 1 {
		t.Errorf("an unchanged check made %v, want one 304", got)
	}

	// A change is downloaded once more.
	repo.publish(t, writeHelm(t, helmIndex(t, 3, 3)), old.Add(time.Minute))
	clk.advance(helmrepo.DefaultIndexMaxAge)
	for range 3 {
		changed, err := c.Index(ctx, repo.srv.URL, helmrepo.Auth{}, false)
		if err != nil || changed.Index.Versions() != 9 || changed.Digest == results[0].Digest {
			t.Fatalf("changed: %d versions, digest %s, %v", changed.Index.Versions(), changed.Digest, err)
		}
	}
	if got := repo.counts(); got[http.StatusOK] != 1 || len(got) != 1 {
		t.Errorf("a changed index read three times made %v, want one 200", got)
	}

	// A fresh read (a webhook, a sync request) asks within the max age.
	if fresh, err := c.Index(ctx, repo.srv.URL, helmrepo.Auth{}, true); err != nil || !fresh.Requested || fresh.Index.Versions() != 9 {
		t.Fatalf("fresh: %+v, %v", fresh, err)
	}
	if got := repo.counts(); got[http.StatusNotModified] != 1 || len(got) != 1 {
		t.Errorf("a fresh read of an unchanged index made %v, want one 304", got)
	}
}

// A Last-Modified within a second of the answer's Date cannot tell a
// later change in the same second (nor can one after the Date): it is
// not used to ask conditionally.
func TestAJustModifiedIndexIsNotTrustedToValidate(t *testing.T) {
	repo := startRepository(t, "", "")
	repo.publish(t, writeHelm(t, helmIndex(t, 1, 1)), time.Now().Add(time.Hour)) // as good as "now" on a slow machine
	clk := &clock{now: time.Now()}
	c := &helmrepo.Client{AllowHTTP: true, Now: clk.Now}
	if _, err := c.Index(context.Background(), repo.srv.URL, helmrepo.Auth{}, false); err != nil {
		t.Fatal(err)
	}
	clk.advance(helmrepo.DefaultIndexMaxAge)
	if _, err := c.Index(context.Background(), repo.srv.URL, helmrepo.Auth{}, false); err != nil {
		t.Fatal(err)
	}
	if got := repo.counts(); got[http.StatusOK] != 2 || len(got) != 1 {
		t.Errorf("two reads of a just-modified index made %v, want two 200s", got)
	}
}

// An index read with one account is not served to another: each proves
// its access, and a wrong password gets the repository's refusal.
func TestAnIndexIsServedOnlyToTheAccountThatReadIt(t *testing.T) {
	repo := startRepository(t, "team-a", "s3cret-a")
	repo.publish(t, writeHelm(t, helmIndex(t, 1, 2)), time.Now().Add(-time.Hour))
	c := &helmrepo.Client{AllowHTTP: true}
	ctx := context.Background()
	if _, err := c.Index(ctx, repo.srv.URL, helmrepo.Auth{Username: "team-a", Password: "s3cret-a"}, false); err != nil {
		t.Fatal(err)
	}
	for _, auth := range []helmrepo.Auth{{}, {Username: "team-a", Password: "guess"}} {
		_, err := c.Index(ctx, repo.srv.URL, auth, false)
		if !errors.Is(err, helmrepo.ErrUnauthorized) {
			t.Errorf("as %q: %v, want %v", auth.Username, err, helmrepo.ErrUnauthorized)
		}
		if err != nil && strings.Contains(err.Error(), "guess") {
			t.Errorf("the error shows the password: %v", err)
		}
	}
	if got := repo.counts(); got[http.StatusOK] != 1 || got[http.StatusUnauthorized] != 2 {
		t.Errorf("answers %v, want one 200 and two 401s", got)
	}
}

func TestPlainHTTPAndBadURLsAreRefused(t *testing.T) {
	repo := startRepository(t, "", "")
	repo.publish(t, writeHelm(t, helmIndex(t, 1, 1)), time.Now().Add(-time.Hour))
	ctx := context.Background()
	secure := &helmrepo.Client{}
	if _, err := secure.Index(ctx, repo.srv.URL, helmrepo.Auth{}, false); !errors.Is(err, helmrepo.ErrPlainHTTP) {
		t.Errorf("plain HTTP without AllowHTTP: %v, want %v", err, helmrepo.ErrPlainHTTP)
	}
	// An HTTPS repository that redirects to plain HTTP.
	redirector := httptest.NewTLSServer(http.RedirectHandler(repo.srv.URL+"/index.yaml", http.StatusFound))
	defer redirector.Close()
	secure.Transport = redirector.Client().Transport
	if _, err := secure.Index(ctx, redirector.URL, helmrepo.Auth{}, false); !errors.Is(err, helmrepo.ErrPlainHTTP) {
		t.Errorf("a redirect to plain HTTP: %v, want %v", err, helmrepo.ErrPlainHTTP)
	}
	if got := repo.counts(); len(got) != 0 {
		t.Errorf("the plain HTTP repository was asked %v, want nothing", got)
	}
	// A repository that redirects to itself without end.
	var loop *httptest.Server
	loop = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, loop.URL+r.URL.Path+"x", http.StatusFound)
	}))
	defer loop.Close()
	endless := &helmrepo.Client{Transport: loop.Client().Transport}
	if _, err := endless.Index(ctx, loop.URL, helmrepo.Auth{}, false); !errors.Is(err, helmrepo.ErrLimitExceeded) {
		t.Errorf("endless redirects: %v, want %v", err, helmrepo.ErrLimitExceeded)
	}
	for _, bad := range []string{"ftp://host/charts", "https://user:pw@host/charts", "https://host/charts?x=1", "charts"} {
		_, err := secure.Index(ctx, bad, helmrepo.Auth{}, false)
		if !errors.Is(err, helmrepo.ErrInvalidURL) || strings.Contains(err.Error(), "pw@") {
			t.Errorf("%s: %v, want %v without the password", bad, err, helmrepo.ErrInvalidURL)
		}
	}
	missing := &helmrepo.Client{AllowHTTP: true}
	if _, err := missing.Index(ctx, repo.srv.URL+"/elsewhere", helmrepo.Auth{}, false); !errors.Is(err, helmrepo.ErrNotFound) {
		t.Errorf("no index: %v, want %v", err, helmrepo.ErrNotFound)
	}
}

// A read that waits for another read of the same index waits no longer
// than its own context: a repository that answers slowly holds up only
// the read that asked it.
func TestAWaitForAnotherReadEndsWithItsContext(t *testing.T) {
	asked, release := make(chan struct{}), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(asked)
		<-release
		_, _ = w.Write([]byte("apiVersion: v1\nentries: {}\n"))
	}))
	defer srv.Close()
	c := &helmrepo.Client{AllowHTTP: true}
	first := make(chan error, 1)
	go func() {
		_, err := c.Index(context.Background(), srv.URL, helmrepo.Auth{}, false)
		first <- err
	}()
	<-asked
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := c.Index(ctx, srv.URL, helmrepo.Auth{}, false); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a read waiting for a slow one: %v; want its own deadline", err)
	}
	select {
	case err := <-first:
		t.Fatalf("the slow read returned (%v) before its answer", err)
	default:
	}
	close(release)
	if err := <-first; err != nil {
		t.Errorf("the slow read: %v", err)
	}
}

// The indexes a Client keeps fit its budget of heap: reading a third index
// drops the least recently used, which the next read downloads again,
// while the ones kept are still served from memory.
func TestTheIndexesKeptFitTheirByteBudget(t *testing.T) {
	var repos []*repository
	size := int64(0)
	for i := range 3 {
		r := startRepository(t, "", "")
		var index strings.Builder
		index.WriteString("apiVersion: v1\nentries:\n  web:\n")
		for v := range 20 {
			fmt.Fprintf(&index, "  - {name: web, version: %d.%d.0, urls: [web-%d.tgz], digest: %064d}\n", i, v, v, v)
		}
		r.publish(t, []byte(index.String()), time.Now().Add(-time.Hour))
		repos = append(repos, r)
		parsed, err := helmrepo.ParseIndex(strings.NewReader(index.String()), helmrepo.DefaultIndexLimits())
		if err != nil {
			t.Fatal(err)
		}
		size = max(size, parsed.RetainedBytes())
	}
	c := &helmrepo.Client{AllowHTTP: true, IndexMaxAge: time.Hour, IndexCacheBytes: size * 5 / 2} // two of these indexes, not three
	read := func(i int) {
		t.Helper()
		if _, err := c.Index(context.Background(), repos[i].srv.URL, helmrepo.Auth{}, false); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		read(i)
	}
	read(2)
	read(1)
	if got := repos[1].counts(); got[http.StatusOK] != 1 {
		t.Errorf("the second index, kept: answered %v, want one download", got)
	}
	read(0)
	if got := repos[0].counts(); got[http.StatusOK] != 2 {
		t.Errorf("the first index, dropped for the third: answered %v, want two downloads", got)
	}
}
