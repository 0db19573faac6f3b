package git_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/ssh/knownhosts"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/plumb-dev/plumb/internal/source/git"
	"github.com/plumb-dev/plumb/internal/source/git/gittest"
	"github.com/plumb-dev/plumb/internal/source/tree"
	"github.com/plumb-dev/plumb/internal/testenv"
)

// server is the package's Git server, started once in TestMain.
var server *gittest.Server

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.Needs{Git: true}, func(e *testenv.Env) { server = e.Git })
}

var httpAuth = git.Auth{Username: gittest.Username, Password: gittest.Password}

// newRepo pushes a first commit to a new repository and returns its work dir.
func newRepo(t *testing.T, files map[string]string) (*gittest.Workdir, string, string) {
	t.Helper()
	name := strings.ReplaceAll(t.Name(), "/", "-") + ".git"
	w, err := server.NewWorkdir(name)
	if err != nil {
		t.Fatal(err)
	}
	hash, err := w.Commit("first", files)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Push("main"); err != nil {
		t.Fatal(err)
	}
	return w, server.HTTPURL(name), hash
}

// newCache makes a cache that asks the remote on every Resolve (no shared
// ls-remote window), so that tests see each push at once.
func newCache(t *testing.T) *git.Cache {
	t.Helper()
	c, err := git.NewCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c.SetRefsTTL(0)
	return c
}

// read resolves, fetches and reads one file at ref, as the Read phase does.
func read(t *testing.T, c *git.Cache, url string, ref git.Ref, auth git.Auth, file string) (git.Revision, string) {
	t.Helper()
	ctx := context.Background()
	rev, err := c.Resolve(ctx, url, ref, auth, git.ResolveOptions{})
	if err != nil {
		t.Fatalf("Resolve(%s): %v", ref, err)
	}
	if err := c.Fetch(ctx, url, ref, rev, auth); err != nil {
		t.Fatalf("Fetch(%s): %v", rev, err)
	}
	tr, err := c.Tree(url, auth, rev.Hash, tree.Limits{})
	if err != nil {
		t.Fatalf("Tree(%s): %v", rev, err)
	}
	data, err := tr.ReadFile(file)
	if err != nil {
		t.Fatalf("ReadFile(%s): %v", file, err)
	}
	return rev, string(data)
}

func TestBranchOverHTTPWithBasicAuthFollowsNewCommits(t *testing.T) {
	w, url, first := newRepo(t, map[string]string{"deploy/cm.yaml": "v: 1"})
	c := newCache(t)
	rev, content := read(t, c, url, git.Ref{Branch: "main"}, httpAuth, "deploy/cm.yaml")
	if rev.String() != "main@sha1:"+first || content != "v: 1" {
		t.Errorf("first read = %s %q, want main@sha1:%s %q", rev, content, first, "v: 1")
	}

	second, err := w.Commit("second", map[string]string{"deploy/cm.yaml": "v: 2"})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Push("main"); err != nil {
		t.Fatal(err)
	}
	rev, content = read(t, c, url, git.Ref{Branch: "main"}, httpAuth, "deploy/cm.yaml")
	if rev.Hash != second || content != "v: 2" {
		t.Errorf("after a new commit: %s %q, want %s %q", rev, content, second, "v: 2")
	}
	if ok, err := c.IsAncestor(url, httpAuth, first, second); err != nil || !ok {
		t.Errorf("IsAncestor(first, second) = %v, %v; want true", ok, err)
	}
}

func TestCredentialsInTheURLAreUsedAndNeverShown(t *testing.T) {
	_, url, first := newRepo(t, map[string]string{"a.yaml": "a"})
	withCreds := strings.Replace(url, "://", "://"+gittest.Username+":"+gittest.Password+"@", 1)
	rev, _ := read(t, newCache(t), withCreds, git.Ref{Branch: "main"}, git.Auth{}, "a.yaml")
	if rev.Hash != first {
		t.Errorf("rev = %s, want %s", rev, first)
	}
	_, err := newCache(t).Resolve(context.Background(), withCreds, git.Ref{Branch: "nope"}, git.Auth{}, git.ResolveOptions{})
	if err == nil || strings.Contains(err.Error(), gittest.Password) {
		t.Errorf("error %v: want an error that does not show the password", err)
	}
}

func TestBearerToken(t *testing.T) {
	_, url, first := newRepo(t, map[string]string{"a.yaml": "token"})
	rev, _ := read(t, newCache(t), url, git.Ref{Branch: "main"}, git.Auth{BearerToken: gittest.BearerToken}, "a.yaml")
	if rev.Hash != first {
		t.Errorf("rev = %s, want %s", rev, first)
	}
	_, err := newCache(t).Resolve(context.Background(), url, git.Ref{Branch: "main"}, git.Auth{BearerToken: "not-the-token"}, git.ResolveOptions{})
	if !errors.Is(err, git.ErrAuth) || strings.Contains(err.Error(), "not-the-token") {
		t.Errorf("Resolve with a wrong token: %v, want ErrAuth without the token", err)
	}
}

func TestWrongPasswordFailsWithErrAuthAndDoesNotLeakIt(t *testing.T) {
	_, url, _ := newRepo(t, map[string]string{"a.yaml": "a"})
	const wrong = "wrong-password-do-not-print"
	_, err := newCache(t).Resolve(context.Background(), url, git.Ref{Branch: "main"}, git.Auth{Username: gittest.Username, Password: wrong}, git.ResolveOptions{})
	if !errors.Is(err, git.ErrAuth) {
		t.Fatalf("Resolve with a wrong password: %v, want ErrAuth", err)
	}
	if strings.Contains(err.Error(), wrong) || !strings.Contains(err.Error(), url) {
		t.Errorf("error %q: want the URL named and the password not shown", err)
	}
	if _, err := newCache(t).Resolve(context.Background(), url, git.Ref{Branch: "main"}, git.Auth{}, git.ResolveOptions{}); !errors.Is(err, git.ErrAuth) {
		t.Errorf("Resolve without credentials: %v, want ErrAuth", err)
	}
}

func TestTagsAndSemverRanges(t *testing.T) {
	w, url, _ := newRepo(t, map[string]string{"v.yaml": "1.0.0"})
	hashes := map[string]string{}
	for _, version := range []string{"1.0.0", "1.2.0", "1.10.1", "2.0.0"} {
		hash, err := w.Commit("release "+version, map[string]string{"v.yaml": version})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Git("tag", "-a", "v"+version, "-m", "release "+version); err != nil {
			t.Fatal(err)
		}
		hashes[version] = hash
	}
	if _, err := w.Git("tag", "not-semver"); err != nil {
		t.Fatal(err)
	}
	if err := w.Push("main", "--tags"); err != nil {
		t.Fatal(err)
	}
	c := newCache(t)
	tests := []struct {
		ref      git.Ref
		wantName string
		version  string
	}{
		{git.Ref{Tag: "v1.2.0"}, "v1.2.0", "1.2.0"},
		{git.Ref{SemVer: ">=1.0.0 <2.0.0"}, "v1.10.1", "1.10.1"},
		{git.Ref{SemVer: "~1.2"}, "v1.2.0", "1.2.0"},
		{git.Ref{SemVer: "*"}, "v2.0.0", "2.0.0"},
	}
	for _, tt := range tests {
		t.Run(tt.ref.String(), func(t *testing.T) {
			rev, content := read(t, c, url, tt.ref, httpAuth, "v.yaml")
			want := tt.wantName + "@sha1:" + hashes[tt.version]
			if rev.String() != want || content != tt.version {
				t.Errorf("got %s %q, want %s %q (annotated tags resolve to their commit)", rev, content, want, tt.version)
			}
		})
	}
	t.Run("a range no tag satisfies", func(t *testing.T) {
		_, err := c.Resolve(context.Background(), url, git.Ref{SemVer: ">=3.0.0"}, httpAuth, git.ResolveOptions{})
		if !errors.Is(err, git.ErrRevisionNotFound) || !strings.Contains(err.Error(), `no tag in semver range ">=3.0.0"`) {
			t.Errorf("got %v", err)
		}
	})
	t.Run("a malformed range", func(t *testing.T) {
		_, err := c.Resolve(context.Background(), url, git.Ref{SemVer: ">=>1"}, httpAuth, git.ResolveOptions{})
		if !errors.Is(err, git.ErrInvalidRef) {
			t.Errorf("got %v, want ErrInvalidRef", err)
		}
	})
}

func TestForcePushIsFollowedAndDetected(t *testing.T) {
	w, url, first := newRepo(t, map[string]string{"a.yaml": "first"})
	c := newCache(t)
	old, err := w.Commit("will be rewritten", map[string]string{"a.yaml": "old"})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Push("main"); err != nil {
		t.Fatal(err)
	}
	read(t, c, url, git.Ref{Branch: "main"}, httpAuth, "a.yaml")

	if _, err := w.Git("reset", "--hard", first); err != nil {
		t.Fatal(err)
	}
	rewritten, err := w.Commit("rewritten", map[string]string{"a.yaml": "rewritten"})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Push("--force main"); err != nil {
		t.Fatal(err)
	}
	rev, content := read(t, c, url, git.Ref{Branch: "main"}, httpAuth, "a.yaml")
	if rev.Hash != rewritten || content != "rewritten" {
		t.Errorf("after force-push: %s %q, want %s rewritten", rev, content, rewritten)
	}
	if ok, err := c.IsAncestor(url, httpAuth, old, rewritten); err != nil || ok {
		t.Errorf("IsAncestor(old, rewritten) = %v, %v; want false (history rewritten)", ok, err)
	}
}

func TestDeletedBranchAndTagAreRevisionNotFound(t *testing.T) {
	w, url, _ := newRepo(t, map[string]string{"a.yaml": "a"})
	if _, err := w.Git("tag", "v1.0.0"); err != nil {
		t.Fatal(err)
	}
	if err := w.Push("main:feature", "--tags"); err != nil {
		t.Fatal(err)
	}
	c := newCache(t)
	read(t, c, url, git.Ref{Branch: "feature"}, httpAuth, "a.yaml")
	read(t, c, url, git.Ref{Tag: "v1.0.0"}, httpAuth, "a.yaml")
	if err := w.Push(":refs/heads/feature", ":refs/tags/v1.0.0"); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		ref  git.Ref
		want string
	}{
		{git.Ref{Branch: "feature"}, `branch "feature" not found at ` + url},
		{git.Ref{Tag: "v1.0.0"}, `tag "v1.0.0" not found at ` + url},
	} {
		_, err := c.Resolve(context.Background(), url, tt.ref, httpAuth, git.ResolveOptions{})
		if !errors.Is(err, git.ErrRevisionNotFound) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Resolve(%s) after deletion: %v, want ErrRevisionNotFound %q", tt.ref, err, tt.want)
		}
	}
}

func TestPinnedCommit(t *testing.T) {
	w, url, first := newRepo(t, map[string]string{"a.yaml": "first"})
	if _, err := w.Commit("second", map[string]string{"a.yaml": "second"}); err != nil {
		t.Fatal(err)
	}
	if err := w.Push("main"); err != nil {
		t.Fatal(err)
	}
	rev, content := read(t, newCache(t), url, git.Ref{Commit: first}, httpAuth, "a.yaml")
	if rev.String() != "sha1:"+first || content != "first" {
		t.Errorf("pinned commit: %s %q, want sha1:%s first", rev, content, first)
	}
	unknown := strings.Repeat("0123456789", 4)
	ctx := context.Background()
	c := newCache(t)
	rev, err := c.Resolve(ctx, url, git.Ref{Commit: unknown}, httpAuth, git.ResolveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Fetch(ctx, url, git.Ref{Commit: unknown}, rev, httpAuth); !errors.Is(err, git.ErrRevisionNotFound) {
		t.Errorf("Fetch of an unknown commit: %v, want ErrRevisionNotFound", err)
	}
}

func TestSSHWithKnownHosts(t *testing.T) {
	_, httpURL, first := newRepo(t, map[string]string{"a.yaml": "over ssh"})
	sshURL := server.SSHURL(httpURL[strings.LastIndex(httpURL, "/")+1:])
	key, _, err := gittest.NewSSHKey()
	if err != nil {
		t.Fatal(err)
	}
	auth := git.Auth{SSHPrivateKey: key, KnownHosts: server.KnownHosts()}
	rev, content := read(t, newCache(t), sshURL, git.Ref{Branch: "main"}, auth, "a.yaml")
	if rev.Hash != first || content != "over ssh" {
		t.Errorf("over ssh: %s %q", rev, content)
	}

	t.Run("an unknown host key is refused", func(t *testing.T) {
		_, otherHostKey, err := gittest.NewSSHKey()
		if err != nil {
			t.Fatal(err)
		}
		otherKnownHosts := knownhosts.Line([]string{knownhosts.Normalize(server.SSHAddress())}, otherHostKey)
		_, err = newCache(t).Resolve(context.Background(), sshURL, git.Ref{Branch: "main"},
			git.Auth{SSHPrivateKey: key, KnownHosts: []byte(otherKnownHosts)}, git.ResolveOptions{})
		if !errors.Is(err, git.ErrAuth) || !strings.Contains(err.Error(), "known_hosts") {
			t.Errorf("got %v, want ErrAuth about known_hosts", err)
		}
	})
	t.Run("no known_hosts is refused", func(t *testing.T) {
		_, err := newCache(t).Resolve(context.Background(), sshURL, git.Ref{Branch: "main"}, git.Auth{SSHPrivateKey: key}, git.ResolveOptions{})
		if !errors.Is(err, git.ErrAuth) || !strings.Contains(err.Error(), "needs known_hosts") {
			t.Errorf("got %v, want ErrAuth asking for known_hosts", err)
		}
	})
	t.Run("a malformed key is refused without showing it", func(t *testing.T) {
		bad := []byte("-----BEGIN OPENSSH PRIVATE KEY-----\nnot-a-key-SECRETMARKER\n-----END OPENSSH PRIVATE KEY-----\n")
		_, err := newCache(t).Resolve(context.Background(), sshURL, git.Ref{Branch: "main"}, git.Auth{SSHPrivateKey: bad, KnownHosts: server.KnownHosts()}, git.ResolveOptions{})
		if !errors.Is(err, git.ErrAuth) || strings.Contains(err.Error(), "SECRETMARKER") {
			t.Errorf("got %v, want ErrAuth without the key", err)
		}
	})
}

func TestFileURL(t *testing.T) {
	w, _, first := newRepo(t, map[string]string{"a.yaml": "local"})
	rev, content := read(t, newCache(t), "file://"+w.Dir, git.Ref{Branch: "main"}, git.Auth{}, "a.yaml")
	if rev.Hash != first || content != "local" {
		t.Errorf("file:// read = %s %q", rev, content)
	}
}

func TestConcurrentReadsOfOneRepositoryShareTheCache(t *testing.T) {
	_, url, first := newRepo(t, map[string]string{"a.yaml": "shared"})
	root := t.TempDir()
	c, err := git.NewCache(root)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			ctx := context.Background()
			rev, err := c.Resolve(ctx, url, git.Ref{Branch: "main"}, httpAuth, git.ResolveOptions{})
			if err == nil {
				err = c.Fetch(ctx, url, git.Ref{Branch: "main"}, rev, httpAuth)
			}
			if err == nil {
				var tr *tree.Tree
				if tr, err = c.Tree(url, httpAuth, rev.Hash, tree.Limits{}); err == nil {
					var data []byte
					if data, err = tr.ReadFile("a.yaml"); err == nil && string(data) != "shared" {
						err = fmt.Errorf("read %q", data)
					}
				}
			}
			if err == nil && rev.Hash != first {
				err = fmt.Errorf("rev %s, want %s", rev, first)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	repositories := 0
	for _, e := range entries {
		if e.IsDir() {
			repositories++
		}
	}
	if repositories != 1 {
		t.Errorf("the cache holds %d repositories for one URL and credentials, want 1", repositories)
	}
}

func TestTreeLimits(t *testing.T) {
	_, url, first := newRepo(t, map[string]string{"a.yaml": "12345", "b.yaml": "1234567890"})
	c := newCache(t)
	read(t, c, url, git.Ref{Branch: "main"}, httpAuth, "a.yaml")
	_, err := c.Tree(url, httpAuth, first, tree.Limits{MaxFileBytes: 8})
	var limitErr *tree.LimitError
	if !errors.As(err, &limitErr) || limitErr.Path != "b.yaml" || limitErr.Limit != "file size" {
		t.Errorf("Tree with an 8-byte file limit: %v, want a file size LimitError naming b.yaml", err)
	}
}

// slowRemote advertises branch main at hash once release is closed, and
// counts the ls-remotes it receives.
func slowRemote(t *testing.T, hash string, release chan struct{}) (string, *atomic.Int64) {
	t.Helper()
	var calls atomic.Int64
	pkt := func(s string) string { return fmt.Sprintf("%04x%s", len(s)+4, s) }
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		<-release
		w.Header().Set("Content-Type", "application/x-git-upload-pack-advertisement")
		fmt.Fprint(w, pkt("# service=git-upload-pack\n")+"0000"+
			pkt(hash+" HEAD\x00side-band-64k ofs-delta symref=HEAD:refs/heads/main\n")+pkt(hash+" refs/heads/main\n")+"0000")
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/slow.git", &calls
}

func TestASharedLsRemoteOutlivesTheReadThatStartedIt(t *testing.T) {
	hash := strings.Repeat("ab", 20)
	release := make(chan struct{})
	url, calls := slowRemote(t, hash, release)
	c, err := git.NewCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	first, cancelFirst := context.WithCancel(context.Background())
	firstDone := make(chan error, 1)
	go func() {
		_, err := c.Resolve(first, url, git.Ref{Branch: "main"}, git.Auth{}, git.ResolveOptions{})
		firstDone <- err
	}()
	secondDone := make(chan error, 1)
	var second git.Revision
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true,
			func(context.Context) (bool, error) { return cond(), nil }); err != nil {
			t.Fatalf("waiting for %s", what)
		}
	}
	waitFor("the first ls-remote to reach the server", func() bool { return calls.Load() == 1 })
	go func() {
		var err error
		second, err = c.Resolve(context.Background(), url, git.Ref{Branch: "main"}, git.Auth{}, git.ResolveOptions{})
		secondDone <- err
	}()
	cancelFirst() // the App that started the ls-remote reaches its deadline
	if err := <-firstDone; !errors.Is(err, context.Canceled) {
		t.Errorf("the cancelled read returned %v, want context.Canceled", err)
	}
	close(release)
	if err := <-secondDone; err != nil || second.Hash != hash {
		t.Errorf("the read that shared the ls-remote got %v, %v; want %s", second, err, hash)
	}
	if got := calls.Load(); got != 1 {
		t.Errorf("%d ls-remotes for two reads, want 1 shared", got)
	}
}

func TestATreeIsWalkedOnceAndEachViewHasItsOwnReadBudget(t *testing.T) {
	_, url, _ := newRepo(t, map[string]string{"a.yaml": "12345", "b.yaml": "1234567890"})
	c := newCache(t)
	rev, _ := read(t, c, url, git.Ref{Branch: "main"}, httpAuth, "a.yaml")
	limits := tree.Limits{MaxTotalBytes: 15}
	views := make([]*tree.Tree, 2)
	for i := range views {
		var err error
		if views[i], err = c.Tree(url, httpAuth, rev.Hash, limits); err != nil {
			t.Fatal(err)
		}
	}
	if got := c.TreesWalked(); got != 2 { // once by read (no limits), once for these limits
		t.Errorf("%d trees walked, want 2: the second view must come from the cache", got)
	}
	for i, view := range views {
		for _, file := range []string{"a.yaml", "b.yaml"} {
			if _, err := view.ReadFile(file); err != nil {
				t.Fatalf("view %d: reading %s within the budget: %v", i, file, err)
			}
		}
	}
	var limitErr *tree.LimitError
	if _, err := views[0].ReadFile("a.yaml"); !errors.As(err, &limitErr) || limitErr.Limit != "bytes read" {
		t.Errorf("a view reading past MaxTotalBytes: %v, want a bytes read LimitError", err)
	}
}

func TestATreeIsNotServedToOtherCredentials(t *testing.T) {
	_, url, _ := newRepo(t, map[string]string{"a.yaml": "secret config"})
	c := newCache(t)
	rev, _ := read(t, c, url, git.Ref{Branch: "main"}, httpAuth, "a.yaml")
	other := git.Auth{Username: "someone-else", Password: "guess"}
	if _, err := c.Tree(url, other, rev.Hash, tree.Limits{}); err == nil {
		t.Error("credentials that never proved access got the tree of a commit read with others")
	}
}

// TestARepositoryStaysOpenAndAFetchIsSeen: reads of a repository share one
// open handle (its pack indexes decoded once), a fetch that adds a commit
// makes the next read open it afresh and see the commit, and a view taken
// before the fetch still reads its own commit — also while views of both
// commits are read at once (make test runs this package with -race too).
func TestARepositoryStaysOpenAndAFetchIsSeen(t *testing.T) {
	w, url, first := newRepo(t, map[string]string{"a.yaml": "one", "b.yaml": "bee"})
	c := newCache(t)
	read(t, c, url, git.Ref{Branch: "main"}, httpAuth, "a.yaml")
	old, err := c.Tree(url, httpAuth, first, tree.Limits{MaxFiles: 10})
	if err != nil {
		t.Fatal(err)
	}
	read(t, c, url, git.Ref{Branch: "main"}, httpAuth, "b.yaml")
	if got := c.RepositoriesOpened(); got != 1 {
		t.Errorf("%d opens for reads of one repository and commit, want 1", got)
	}
	second, err := w.Commit("second", map[string]string{"a.yaml": "two"})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Push("main"); err != nil {
		t.Fatal(err)
	}
	rev, content := read(t, c, url, git.Ref{Branch: "main"}, httpAuth, "a.yaml")
	if rev.Hash != second || content != "two" {
		t.Errorf("after a push: %s %q, want %s %q", rev, content, second, "two")
	}
	if got := c.RepositoriesOpened(); got != 2 {
		t.Errorf("%d opens after a fetch added a commit, want 2 (the stale handle replaced)", got)
	}
	current, err := c.Tree(url, httpAuth, second, tree.Limits{MaxFiles: 10})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := range 40 {
		wg.Go(func() {
			view, want := old, "one"
			if i%2 == 1 {
				view, want = current, "two"
			}
			data, err := view.ReadFile("a.yaml")
			if err == nil && string(data) != want {
				err = fmt.Errorf("read %q, want %q", data, want)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

func TestCommitTimeIsTheCommittersDate(t *testing.T) {
	w, url, first := newRepo(t, map[string]string{"a.yaml": "one"})
	c := newCache(t)
	read(t, c, url, git.Ref{Branch: "main"}, httpAuth, "a.yaml")
	when, err := c.CommitTime(url, httpAuth, first)
	if err != nil {
		t.Fatal(err)
	}
	want, err := w.Git("log", "-1", "--format=%ct", first)
	if err != nil {
		t.Fatal(err)
	}
	if got := strconv.FormatInt(when.Unix(), 10); got != want {
		t.Errorf("CommitTime = %s (%v), git log says %s", got, when, want)
	}
	if _, err := c.CommitTime(url, httpAuth, strings.Repeat("ab", 20)); err == nil {
		t.Error("CommitTime of a commit not in the cache succeeded")
	}
}

// A URL that does not parse is refused with a message that shows none of
// the password it carries, wherever the password's characters fall.
func TestAMalformedURLsPasswordIsNotInItsError(t *testing.T) {
	c, err := git.NewCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, raw := range []string{
		"https://user:pa/ss-s3cret@example.com/repo.git",
		"https://user:pa ss-s3cret@example.com/repo.git",
		"https://user:s3cret@exa mple.com/%zz",
		// These parse, with the password in the path, query or fragment.
		"https://user:123/s3cret@example.com/repo.git",
		"https://user:123#s3cret@example.com/repo.git",
		"https://user:123?s3cret@example.com/repo.git",
		"https://s3c/ret@example.com/repo.git",
	} {
		_, err := c.Key(raw, git.Auth{})
		if !errors.Is(err, git.ErrInvalidRef) {
			t.Errorf("Key(%q) = %v, want ErrInvalidRef", raw, err)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "ret@") {
			t.Errorf("Key's error shows the password: %v", err)
		}
	}
}
