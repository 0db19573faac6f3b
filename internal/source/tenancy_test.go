package source_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/plumb-dev/plumb/internal/source"
	"github.com/plumb-dev/plumb/internal/source/git"
	"github.com/plumb-dev/plumb/internal/source/git/gittest"
)

// lyingRemote is a Git server that advertises branch main at hash, a commit
// it does not have, and refuses every fetch.
func lyingRemote(t *testing.T, hash string) string {
	t.Helper()
	pkt := func(s string) string { return fmt.Sprintf("%04x%s", len(s)+4, s) }
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/evil.git/info/refs" {
			http.Error(w, "no", http.StatusForbidden)
			return
		}
		w.Header().Set("Content-Type", "application/x-git-upload-pack-advertisement")
		fmt.Fprint(w, pkt("# service=git-upload-pack\n")+"0000"+
			pkt(hash+" HEAD\x00multi_ack side-band-64k ofs-delta symref=HEAD:refs/heads/main agent=git/2.39\n")+
			pkt(hash+" refs/heads/main\n")+"0000")
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/evil.git"
}

func TestARemoteThatAdvertisesAnotherAppsCommitDoesNotGetItsRender(t *testing.T) {
	_, _, url := repo(t, map[string]string{"deploy/a.yaml": configMap("private", "from the private repository")})
	r := newReader(t, source.DefaultLimits())
	ctx := context.Background()
	victim, err := r.Read(ctx, source.Request{URL: url, Ref: git.Ref{Branch: "main"}, Path: "deploy", Auth: auth})
	if err != nil {
		t.Fatal(err)
	}
	// The commit hash is public: plumb writes it on every object it applies.
	hostile := source.Request{URL: lyingRemote(t, victim.Revision.Hex()), Ref: git.Ref{Branch: "main"}, Path: "deploy"}
	got, err := r.Read(ctx, hostile)
	if err == nil {
		t.Fatalf("a remote that only advertised the victim's commit read %v", names(got))
	}
	if source.ReasonOf(err) != source.ReasonSourceUnavailable {
		t.Errorf("reason %s, want SourceUnavailable (the fetch fails): %v", source.ReasonOf(err), err)
	}
	if !strings.Contains(err.Error(), "fetching") {
		t.Errorf("%v: want the fetch to fail (the ls-remote must succeed for the test to mean anything)", err)
	}
}

func TestTheSameRepositoryWithOtherCredentialsDoesNotShareTheRender(t *testing.T) {
	_, _, url := repo(t, map[string]string{"deploy/a.yaml": configMap("a", "1")})
	r := newReader(t, source.DefaultLimits())
	ctx := context.Background()
	req := source.Request{URL: url, Ref: git.Ref{Branch: "main"}, Path: "deploy", Auth: auth}
	if _, err := r.Read(ctx, req); err != nil {
		t.Fatal(err)
	}
	// The server accepts a bearer token too: a second principal.
	req.Auth = git.Auth{BearerToken: gittest.BearerToken}
	second, err := r.Read(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if second.Cached || r.Renders() != 2 {
		t.Errorf("a read with other credentials: cached=%v after %d renders, want its own render", second.Cached, r.Renders())
	}
	req.Auth = auth
	if third, err := r.Read(ctx, req); err != nil || !third.Cached {
		t.Errorf("a read with the first credentials again: cached=%v, %v; want the first render", third != nil && third.Cached, err)
	}
}

func TestNoCacheFolderCanBeFoundFromTheRepositoryURL(t *testing.T) {
	_, _, url := repo(t, map[string]string{"deploy/a.yaml": configMap("private", "1")})
	ctx := context.Background()
	req := source.Request{URL: url, Ref: git.Ref{Branch: "main"}, Path: "deploy", Auth: auth}
	dirs := make([][]string, 2)
	var root string
	for i := range dirs {
		root = t.TempDir()
		r, err := source.NewReader(source.Options{CacheDir: root, Limits: source.DefaultLimits()})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Read(ctx, req); err != nil {
			t.Fatal(err)
		}
		entries, err := os.ReadDir(root)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.IsDir() {
				dirs[i] = append(dirs[i], e.Name())
			}
		}
	}
	if len(dirs[0]) != 1 || len(dirs[1]) != 1 || dirs[0][0] == dirs[1][0] {
		t.Errorf("two caches named the folder of one repository and credentials %v and %v, want one folder each under a different, secret-keyed name", dirs[0], dirs[1])
	}

	t.Run("a file:// URL at where the folder would be without a secret reads nothing", func(t *testing.T) {
		sum := sha256.Sum256([]byte(url))
		guessed := filepath.Join(root, hex.EncodeToString(sum[:12]))
		r, err := source.NewReader(source.Options{CacheDir: root, Limits: source.DefaultLimits()})
		if err != nil {
			t.Fatal(err)
		}
		got, err := r.Read(ctx, source.Request{URL: "file://" + guessed, Ref: git.Ref{Branch: "main"}, Path: "deploy"})
		if err == nil {
			t.Fatalf("a file:// URL computed from the repository URL read %v", names(got))
		}
	})
}
