package git_test

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/internal/source/git"
)

// pkt is a Git pkt-line.
func pkt(s string) string { return fmt.Sprintf("%04x%s", len(s)+4, s) }

// TestAHostileGitServerGetsNoBodyShownAndNoEndlessRead: a remote's error
// answers are not read into the error (a 404 of 8 MiB, a 401 page of an
// internal service), and a remote that never stops sending refs or pack
// data is cut off at the transfer limits.
func TestAHostileGitServerGetsNoBodyShownAndNoEndlessRead(t *testing.T) {
	const marker = "INTERNAL-SERVICE-PAGE"
	hash := strings.Repeat("ab", 20)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, "/huge404/"):
			w.WriteHeader(http.StatusNotFound)
			chunk := []byte(strings.Repeat(marker+" ", 1024))
			for written := 0; written < 8<<20; written += len(chunk) {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		case strings.HasPrefix(r.URL.Path, "/private/"):
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, "<html>"+marker+": welcome to the metadata service, token=s3cr3t</html>")
		case strings.HasPrefix(r.URL.Path, "/endless-refs/"):
			w.Header().Set("Content-Type", "application/x-git-upload-pack-advertisement")
			fmt.Fprint(w, pkt("# service=git-upload-pack\n")+"0000"+pkt(hash+" HEAD\x00side-band-64k ofs-delta\n"))
			for i := 0; ; i++ {
				if _, err := fmt.Fprint(w, pkt(fmt.Sprintf("%s refs/heads/b%d\n", hash, i))); err != nil {
					return
				}
			}
		case strings.HasPrefix(r.URL.Path, "/endless-pack/") && strings.HasSuffix(r.URL.Path, "/info/refs"):
			w.Header().Set("Content-Type", "application/x-git-upload-pack-advertisement")
			fmt.Fprint(w, pkt("# service=git-upload-pack\n")+"0000"+
				pkt(hash+" HEAD\x00side-band-64k ofs-delta symref=HEAD:refs/heads/main\n")+pkt(hash+" refs/heads/main\n")+"0000")
		case strings.HasPrefix(r.URL.Path, "/endless-pack/"):
			// Progress messages on side band 2, for ever: valid, and never done.
			w.Header().Set("Content-Type", "application/x-git-upload-pack-result")
			fmt.Fprint(w, pkt("NAK\n"))
			line := pkt("\x02Counting objects: " + strings.Repeat(".", 1000) + "\n")
			for {
				if _, err := fmt.Fprint(w, line); err != nil {
					return
				}
			}
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	c := newCache(t)
	c.SetTransferLimits(git.TransferLimits{MaxAdvertisementBytes: 1 << 20, MaxFetchBytes: 4 << 20})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	for _, tc := range []struct {
		name, path string
		want       error
	}{
		{"a 404 with an 8 MiB body", "/huge404/repo.git", nil},
		{"a 401 page of an internal service", "/private/repo.git", git.ErrAuth},
		{"an advertisement that never ends", "/endless-refs/repo.git", git.ErrTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.Resolve(ctx, srv.URL+tc.path, git.Ref{Branch: "main"}, git.Auth{}, git.ResolveOptions{})
			if err == nil {
				t.Fatal("resolved")
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("err = %v, want %v", err, tc.want)
			}
			if msg := err.Error(); len(msg) > 1024 || strings.Contains(msg, marker) || strings.Contains(msg, "s3cr3t") {
				t.Errorf("the error (%d bytes) shows what the remote answered: %.300s", len(msg), msg)
			}
		})
	}
	t.Run("a pack that never ends", func(t *testing.T) {
		u := srv.URL + "/endless-pack/repo.git"
		rev, err := c.Resolve(ctx, u, git.Ref{Branch: "main"}, git.Auth{}, git.ResolveOptions{})
		if err != nil {
			t.Fatal(err)
		}
		err = c.Fetch(ctx, u, git.Ref{Branch: "main"}, rev, git.Auth{})
		if !errors.Is(err, git.ErrTooLarge) {
			t.Fatalf("err = %v, want the transfer limit", err)
		}
		if ctx.Err() != nil {
			t.Fatal("the fetch ran until the test's deadline")
		}
	})
}

// TestHTTPSWithTheSecretsCABundle: a repository served with a
// certificate of a private CA is read with the CA of the App's Secret,
// and refused without it.
func TestHTTPSWithTheSecretsCABundle(t *testing.T) {
	_, plain, hash := newRepo(t, map[string]string{"a.yaml": "a: 1\n"})
	target, err := url.Parse(plain)
	if err != nil {
		t.Fatal(err)
	}
	repoPath := target.Path
	target.Path = ""
	tlsServer := httptest.NewTLSServer(httputil.NewSingleHostReverseProxy(target))
	t.Cleanup(tlsServer.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tlsServer.Certificate().Raw})
	u := tlsServer.URL + repoPath

	withCA := httpAuth
	withCA.CABundle = ca
	if rev, got := read(t, newCache(t), u, git.Ref{Branch: "main"}, withCA, "a.yaml"); rev.Hash != hash || got != "a: 1\n" {
		t.Errorf("read %s %q, want %s", rev, got, hash)
	}
	if _, err := newCache(t).Resolve(context.Background(), u, git.Ref{Branch: "main"}, httpAuth, git.ResolveOptions{}); err == nil ||
		!strings.Contains(err.Error(), "certificate") {
		t.Errorf("without the CA: %v, want a certificate error", err)
	}
	bad := httpAuth
	bad.CABundle = []byte("not a certificate")
	if _, err := newCache(t).Resolve(context.Background(), u, git.Ref{Branch: "main"}, bad, git.ResolveOptions{}); !errors.Is(err, git.ErrAuth) {
		t.Errorf("a CA bundle without a certificate: %v, want ErrAuth", err)
	}
}
