// Package gittest runs a real Git server for tests and the demo
// (github.com/fluxcd/pkg/gittestserver, smart HTTP with basic auth and SSH)
// and changes its repositories with the real git command: commits, tags,
// force-pushes and deletions, exactly as a person would push them.
package gittest

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/fluxcd/pkg/gittestserver"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// Credentials of the server's HTTP basic auth, and a bearer token that the
// server accepts in their place (as GitLab and Gitea accept access tokens).
const (
	Username    = "plumb"
	Password    = "s3cret-git-password"
	BearerToken = "plumb-access-token"
)

// Server is a running Git server.
type Server struct {
	srv *gittestserver.GitServer
	dir string
	// HostKey is the SSH server's public host key.
	HostKey ssh.PublicKey

	mu       sync.Mutex
	requests map[string]int // guarded by mu
}

// Kinds of HTTP requests that RequestCounts reports.
const (
	// RequestListRefs is a ref advertisement for fetching (ls-remote).
	RequestListRefs = "list-refs"
	// RequestFetch is a pack negotiation and download (git-upload-pack).
	RequestFetch = "fetch"
	// RequestPush is a push (git-receive-pack), including its ref advertisement.
	RequestPush = "push"
)

// RequestCounts returns how many HTTP requests of each kind reached
// repository repo since the server started.
func (s *Server) RequestCounts(repo string) map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for key, n := range s.requests {
		if r, kind, ok := strings.Cut(key, " "); ok && r == repo {
			out[kind] = n
		}
	}
	return out
}

// acceptBearerToken lets "Authorization: Bearer BearerToken" in as the
// basic-auth user.
func acceptBearerToken(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "Bearer "+BearerToken {
			r.SetBasicAuth(Username, Password)
		}
		next.ServeHTTP(w, r)
	})
}

// countRequests is the HTTP middleware behind RequestCounts.
func (s *Server) countRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		kind := ""
		switch {
		case strings.HasSuffix(r.URL.Path, "/info/refs") && r.URL.Query().Get("service") == "git-upload-pack":
			kind = RequestListRefs
		case strings.HasSuffix(r.URL.Path, "/git-upload-pack"):
			kind = RequestFetch
		case strings.Contains(r.URL.Path, "receive-pack") || r.URL.Query().Get("service") == "git-receive-pack":
			kind = RequestPush
		}
		if kind != "" {
			repo := strings.TrimPrefix(r.URL.Path, "/")
			for _, suffix := range []string{"/info/refs", "/git-upload-pack", "/git-receive-pack"} {
				repo = strings.TrimSuffix(repo, suffix)
			}
			s.mu.Lock()
			s.requests[repo+" "+kind]++
			s.mu.Unlock()
		}
		next.ServeHTTP(w, r)
	})
}

// Start starts the server over HTTP (basic auth: Username, Password) and
// SSH (any client key is accepted; the client must trust HostKey). Repositories
// are created by the first push.
func Start() (*Server, error) {
	dir, err := os.MkdirTemp("", "plumb-gitserver-")
	if err != nil {
		return nil, err
	}
	srv := gittestserver.NewGitServer(filepath.Join(dir, "repos")).AutoCreate().Auth(Username, Password).KeyDir(filepath.Join(dir, "keys"))
	s := &Server{srv: srv, dir: dir, requests: map[string]int{}}
	srv.AddHTTPMiddlewares(s.countRequests, acceptBearerToken)
	if err := srv.StartHTTP(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("starting the git HTTP server: %w", err)
	}
	if err := srv.ListenSSH(); err != nil {
		srv.StopHTTP()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("starting the git SSH server: %w", err)
	}
	go func() { _ = srv.StartSSH() }()
	pubs, _ := filepath.Glob(filepath.Join(dir, "keys", "*.pub"))
	if len(pubs) != 1 {
		s.Stop()
		return nil, fmt.Errorf("want one SSH host key in %s, found %d", filepath.Join(dir, "keys"), len(pubs))
	}
	data, err := os.ReadFile(pubs[0])
	if err == nil {
		s.HostKey, _, _, _, err = ssh.ParseAuthorizedKey(data)
	}
	if err != nil {
		s.Stop()
		return nil, fmt.Errorf("reading the SSH host key: %w", err)
	}
	return s, nil
}

// Stop stops the server and removes its repositories.
func (s *Server) Stop() {
	s.srv.StopHTTP()
	_ = s.srv.StopSSH()
	os.RemoveAll(s.dir)
}

// HTTPURL is the repository's URL without credentials.
func (s *Server) HTTPURL(repo string) string { return s.srv.HTTPAddress() + "/" + repo }

// HTTPURLWithCredentials carries the basic-auth credentials, for pushing.
func (s *Server) HTTPURLWithCredentials(repo string) string {
	return s.srv.HTTPAddressWithCredentials() + "/" + repo
}

// SSHURL is the repository's ssh:// URL.
func (s *Server) SSHURL(repo string) string { return s.srv.SSHAddress() + "/" + repo }

// KnownHosts is a known_hosts line that trusts this server's host key.
func (s *Server) KnownHosts() []byte {
	u, _ := url.Parse(s.srv.SSHAddress())
	return []byte(knownhosts.Line([]string{knownhosts.Normalize(u.Host)}, s.HostKey) + "\n")
}

// SSHAddress is the SSH server's host:port.
func (s *Server) SSHAddress() string {
	u, _ := url.Parse(s.srv.SSHAddress())
	host, port, _ := net.SplitHostPort(u.Host)
	return net.JoinHostPort(host, port)
}

// NewSSHKey returns a new ed25519 private key in OpenSSH PEM form, and its
// public key.
func NewSSHKey() ([]byte, ssh.PublicKey, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		return nil, nil, err
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(block), sshPub, nil
}

// Workdir is a local clone that pushes to one repository on the server.
type Workdir struct {
	// Dir is the working tree.
	Dir    string
	remote string
}

// NewWorkdir makes an empty working tree on branch main whose pushes go to
// repo on the server.
func (s *Server) NewWorkdir(repo string) (*Workdir, error) {
	dir, err := os.MkdirTemp(s.dir, "work-")
	if err != nil {
		return nil, err
	}
	w := &Workdir{Dir: dir, remote: s.HTTPURLWithCredentials(repo)}
	if _, err := w.Git("init", "--quiet", "--initial-branch=main"); err != nil {
		return nil, err
	}
	return w, nil
}

// Git runs a git command in the working tree, isolated from the user's and
// the system's git configuration, and returns its trimmed output.
func (w *Workdir) Git(args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = w.Dir
	cmd.Env = append(os.Environ(),
		"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0",
		"GIT_AUTHOR_NAME=plumb test", "GIT_AUTHOR_EMAIL=test@plumb.dev",
		"GIT_COMMITTER_NAME=plumb test", "GIT_COMMITTER_EMAIL=test@plumb.dev",
	)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git %s: %w\n%s", strings.Join(args, " "), err, errOut.String())
	}
	return strings.TrimSpace(out.String()), nil
}

// WriteFiles writes files (path → content; an empty content removes the
// file) into the working tree.
func (w *Workdir) WriteFiles(files map[string]string) error {
	for name, content := range files {
		full := filepath.Join(w.Dir, filepath.FromSlash(name))
		if content == "" {
			if err := os.Remove(full); err != nil && !os.IsNotExist(err) {
				return err
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Commit writes files, commits everything and returns the new commit's hash.
func (w *Workdir) Commit(message string, files map[string]string) (string, error) {
	if err := w.WriteFiles(files); err != nil {
		return "", err
	}
	if _, err := w.Git("add", "--all"); err != nil {
		return "", err
	}
	if _, err := w.Git("commit", "--quiet", "--allow-empty", "-m", message); err != nil {
		return "", err
	}
	return w.Git("rev-parse", "HEAD")
}

// Push pushes refs (e.g. "main", "--tags", "--force main",
// ":refs/heads/old" to delete) to the server.
func (w *Workdir) Push(refs ...string) error {
	args := []string{"push", "--quiet", w.remote}
	for _, ref := range refs {
		args = append(args, strings.Fields(ref)...)
	}
	_, err := w.Git(args...)
	return err
}
