package helmrepo_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/plumb-dev/plumb/internal/source/helmrepo"
	"github.com/plumb-dev/plumb/internal/source/tree"
	"github.com/plumb-dev/plumb/internal/testenv"
)

func TestResolvePicksTheHighestVersionInTheRange(t *testing.T) {
	index := &helmrepo.Index{Charts: map[string][]helmrepo.ChartVersion{
		"web": {
			{Version: "1.0.0", URLs: []string{"web-1.0.0.tgz"}},
			{Version: "2.0.0-rc.1", URLs: []string{"web-2.0.0-rc.1.tgz"}},
			{Version: "1.2.0", URLs: []string{"web-1.2.0.tgz"}},
			{Version: "not-semver", URLs: []string{"web-x.tgz"}},
			{Version: "1.5.0"}, // no URL: not a candidate
		},
	}}
	for _, tc := range []struct{ versions, want string }{
		{"", "1.2.0"},
		{"*", "1.2.0"},
		{">=1.0.0 <1.2.0", "1.0.0"},
		{"1.0.0", "1.0.0"},
		{">=2.0.0-0", "2.0.0-rc.1"},
		{"^1", "1.2.0"},
	} {
		got, err := index.Resolve("web", tc.versions)
		if err != nil || got.Version != tc.want {
			t.Errorf("Resolve(%q) = %q, %v; want %s", tc.versions, got.Version, err, tc.want)
		}
	}
	for _, tc := range []struct {
		chart, versions string
		want            error
	}{
		{"web", "~3", helmrepo.ErrChartNotFound},
		{"web", "1.5.0", helmrepo.ErrChartNotFound},
		{"api", "", helmrepo.ErrChartNotFound},
		{"web", "not a range", helmrepo.ErrInvalidVersion},
	} {
		if _, err := index.Resolve(tc.chart, tc.versions); !errors.Is(err, tc.want) {
			t.Errorf("Resolve(%q, %q) = %v, want %v", tc.chart, tc.versions, err, tc.want)
		}
	}
}

var chartLimits = tree.Limits{MaxFiles: 100, MaxTotalBytes: 1 << 20, MaxFileBytes: 1 << 20}

// A chart is pulled from a real HTTPS repository behind basic auth,
// checked against the digest helm's indexer wrote; an archive changed
// behind the index's back is refused.
func TestPullChecksTheArchiveAgainstTheIndex(t *testing.T) {
	repo := testenv.StartHelmRepository(t, testenv.HelmRepositoryOptions{TLS: true, Username: "ci", Password: "s3cret"})
	digest := repo.Publish(t, "web", "1.0.0", map[string]string{"templates/cm.yaml": "kind: ConfigMap\n"})
	c := &helmrepo.Client{Transport: repo.Transport()}
	auth := helmrepo.Auth{Username: "ci", Password: "s3cret"}
	ctx := context.Background()
	index, err := c.Index(ctx, repo.URL, auth, false)
	if err != nil {
		t.Fatal(err)
	}
	cv, err := index.Index.Resolve("web", "")
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := c.Pull(ctx, repo.URL, cv, auth, chartLimits, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if pulled.Digest != "sha256:"+digest {
		t.Errorf("digest %s, want sha256:%s", pulled.Digest, digest)
	}
	if data, err := pulled.Tree.ReadFile("web/templates/cm.yaml"); err != nil || string(data) != "kind: ConfigMap\n" {
		t.Errorf("web/templates/cm.yaml: %q, %v", data, err)
	}

	repo.Replace(t, "web-1.0.0.tgz", testenv.Chart(t, "web", "1.0.0", map[string]string{"templates/cm.yaml": "kind: Secret\n"}))
	if _, err := c.Pull(ctx, repo.URL, cv, auth, chartLimits, 1<<20); !errors.Is(err, helmrepo.ErrDigestMismatch) {
		t.Errorf("a tampered archive: %v, want ErrDigestMismatch", err)
	}
	if _, err := c.Pull(ctx, repo.URL, cv, helmrepo.Auth{}, chartLimits, 1<<20); !errors.Is(err, helmrepo.ErrUnauthorized) {
		t.Errorf("without the account: %v, want ErrUnauthorized", err)
	}
}

// The repository's credentials go with a download from the repository's
// own origin and never to another host the index names.
func TestPullSendsCredentialsOnlyToTheRepository(t *testing.T) {
	archive := testenv.Chart(t, "web", "1.0.0", map[string]string{"templates/cm.yaml": "kind: ConfigMap\n"})
	var (
		mu        sync.Mutex
		withAuth  = map[string]bool{} // host → saw an Authorization header
		elsewhere *httptest.Server
	)
	serve := func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		withAuth[r.Host] = withAuth[r.Host] || r.Header.Get("Authorization") != ""
		mu.Unlock()
		if r.URL.Path == "/charts/moved.tgz" { // to the same host name, another port
			http.Redirect(w, r, elsewhere.URL+"/web-1.0.0.tgz", http.StatusFound)
			return
		}
		w.Write(archive)
	}
	elsewhere = httptest.NewServer(http.HandlerFunc(serve))
	defer elsewhere.Close()
	repo := httptest.NewServer(http.HandlerFunc(serve))
	defer repo.Close()

	c := &helmrepo.Client{AllowHTTP: true}
	auth := helmrepo.Auth{Username: "ci", Password: "s3cret"}
	ctx := context.Background()
	for _, u := range []string{elsewhere.URL + "/web-1.0.0.tgz", "web-1.0.0.tgz", "moved.tgz"} {
		if _, err := c.Pull(ctx, repo.URL+"/charts", helmrepo.ChartVersion{Version: "1.0.0", URLs: []string{u}}, auth, chartLimits, 1<<20); err != nil {
			t.Fatalf("%s: %v", u, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if withAuth[strings.TrimPrefix(elsewhere.URL, "http://")] {
		t.Error("the repository's credentials were sent to another host (or port), listed there or redirected to")
	}
	if !withAuth[strings.TrimPrefix(repo.URL, "http://")] {
		t.Error("a download from the repository itself went without its credentials")
	}
}

// A hostile index or archive costs bounded work: an archive past the
// download bound, a decompression bomb, a plain-HTTP or non-HTTP archive
// URL from an HTTPS repository, credentials in an archive URL.
func TestPullRefusesHostileArchives(t *testing.T) {
	bomb := testenv.TarGz(t, map[string]string{"web/Chart.yaml": strings.Repeat("a", 4<<20)})
	padded := testenv.TarGzPadded(t, map[string]string{"web/Chart.yaml": "name: web\n"}, 64<<20)
	big := testenv.Chart(t, "web", "1.0.0", map[string]string{"templates/a.yaml": randomText(64 << 10)})
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/bomb.tgz":
			w.Write(bomb)
		case "/big.tgz":
			w.Write(big)
		case "/padded.tgz":
			w.Write(padded)
		}
	}))
	defer srv.Close()
	c := &helmrepo.Client{Transport: srv.Client().Transport}
	ctx := context.Background()
	pull := func(u string, maxBytes int64) error {
		_, err := c.Pull(ctx, srv.URL, helmrepo.ChartVersion{Version: "1.0.0", URLs: []string{u}}, helmrepo.Auth{}, chartLimits, maxBytes)
		return err
	}
	if err := pull("big.tgz", 16<<10); !errors.Is(err, helmrepo.ErrLimitExceeded) {
		t.Errorf("an archive past the download bound: %v, want ErrLimitExceeded", err)
	}
	var limitErr *tree.LimitError
	if err := pull("bomb.tgz", 1<<20); !errors.As(err, &limitErr) || limitErr.Limit != "file size" {
		t.Errorf("a decompression bomb of one file: %v, want the file size limit", err)
	}
	// Its files within every limit, its bytes not: the decompression
	// budget stops it.
	if err := pull("padded.tgz", 1<<20); !errors.Is(err, helmrepo.ErrLimitExceeded) || !strings.Contains(err.Error(), "decompresses to more") {
		t.Errorf("a decompression bomb of skipped bytes: %v, want ErrLimitExceeded naming the budget", err)
	}
	if err := pull("http://"+strings.TrimPrefix(srv.URL, "https://")+"/big.tgz", 1<<20); !errors.Is(err, helmrepo.ErrPlainHTTP) {
		t.Errorf("a plain HTTP archive URL: %v, want ErrPlainHTTP", err)
	}
	if err := pull("file:///etc/passwd", 1<<20); !errors.Is(err, helmrepo.ErrInvalidIndex) {
		t.Errorf("a file:// archive URL: %v, want ErrInvalidIndex", err)
	}
	err := pull("https://user:hunter2@"+strings.TrimPrefix(srv.URL, "https://")+"/big.tgz", 1<<20)
	if !errors.Is(err, helmrepo.ErrInvalidIndex) || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("an archive URL with credentials: %v, want ErrInvalidIndex without the password", err)
	}
}

// randomText is n bytes that gzip cannot shrink much.
func randomText(n int) string {
	var b strings.Builder
	x := uint64(88172645463325252)
	for b.Len() < n {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		fmt.Fprintf(&b, "%016x", x)
	}
	return b.String()
}
