// Package git reads Git repositories for the Read phase: it asks a remote
// where a ref points (one round trip, the ls-remote equivalent), fetches only
// that ref into an on-disk cache shared by every App that tracks the same
// repository, and exposes the files of a commit as a tree.Tree.
//
// Invariant: the cache is keyed by who proved access. Every repository
// folder, and every remembered ls-remote answer, belongs to one repository
// URL together with one set of credentials (a keyed digest of both), so a
// request only ever sees what the same credentials fetched from the same
// remote. Folder names are keyed with a secret kept in the cache root, so
// nobody can compute where another repository's data lies (e.g. to point a
// file:// URL at it).
package git

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Masterminds/semver/v3"
	gogit "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/storage/memory"
	"golang.org/x/sync/singleflight"
	"k8s.io/utils/lru"

	"github.com/plumb-dev/plumb/internal/repourl"
	"github.com/plumb-dev/plumb/internal/revision"
	"github.com/plumb-dev/plumb/internal/source/tree"
)

// ErrRevisionNotFound means the ref names nothing on the remote: a missing or
// deleted branch or tag, no tag in a semver range, or an unknown commit.
var ErrRevisionNotFound = errors.New("revision not found")

// ErrInvalidRef means the ref itself is malformed (e.g. a bad semver range).
var ErrInvalidRef = errors.New("invalid ref")

// Ref selects a revision; exactly one field is set.
type Ref struct {
	Branch string
	Tag    string
	SemVer string
	Commit string
}

func (r Ref) String() string {
	switch {
	case r.Branch != "":
		return "branch " + r.Branch
	case r.Tag != "":
		return "tag " + r.Tag
	case r.SemVer != "":
		return "semver " + r.SemVer
	default:
		return "commit " + r.Commit
	}
}

// Revision is a resolved ref: the branch or tag name (empty for a pinned
// commit) and the commit's SHA-1.
type Revision struct {
	Name string
	Hash string
}

// String is the revision as plumb records it: <name>@sha1:<hash>, or
// sha1:<hash> for a pinned commit (the format Flux uses); the name alone
// when there is no commit.
func (r Revision) String() string { return r.Recorded().String() }

// Recorded is the revision in the form every source records.
func (r Revision) Recorded() revision.Revision {
	if r.Hash == "" {
		return revision.Revision{Name: r.Name} // no commit: a working copy (source.Local)
	}
	return revision.Revision{Name: r.Name, Digest: revision.SHA1 + ":" + r.Hash}
}

// ShortHashLength is how many hex digits of a commit plumb shows where it
// abbreviates one (Git's and GitHub's default).
const ShortHashLength = revision.ShortLength

// ParseRevision reads a revision as String writes it: <name>@sha1:<hash>,
// sha1:<hash>, or a name alone (any other revision, too, is a name here).
func ParseRevision(s string) Revision {
	if r := revision.Parse(s); r.Algorithm() == revision.SHA1 {
		return Revision{Name: r.Name, Hash: r.Hex()}
	}
	return Revision{Name: s}
}

// ShortHash is the commit cut to ShortHashLength digits.
func (r Revision) ShortHash() string {
	if len(r.Hash) > ShortHashLength {
		return r.Hash[:ShortHashLength]
	}
	return r.Hash
}

// Short is the revision as String writes it, with its commit cut to
// ShortHashLength digits ("main@sha1:1a2b3c4"), for messages and tables.
func (r Revision) Short() string { return r.Recorded().Short() }

// Cache is the on-disk cache of bare repositories, one per repository URL
// and credentials. It is safe for concurrent use; fetches of one repository
// are serialised, and concurrent ls-remotes of one repository share one
// round trip.
type Cache struct {
	root    string
	secret  []byte        // keys the folder names (see the package invariant)
	refsTTL time.Duration // how long an ls-remote answer is shared
	now     func() time.Time

	mu    sync.Mutex             // guards locks and refs
	locks map[string]*sync.Mutex // repository key → its fetch lock
	refs  map[string]advertised  // repository key → its last ls-remote answer
	calls singleflight.Group     // ls-remotes under way, by repository key
	// trees are the last commits' trees built (see Tree), by repository
	// key, commit and limits: Apps that read folders of one repository at
	// one commit walk its tree once, not once each.
	trees     *lru.Cache
	treeWalks singleflight.Group // walks under way, by tree key
	walks     atomic.Int64       // trees walked (for tests)
	// handles are the repositories kept open between reads (see handles).
	handles *handles
	// transfer bounds what remotes may send over HTTP(S).
	transfer TransferLimits
}

// cachedTrees is how many commits' trees Tree keeps. A tree holds names,
// sizes and blob hashes of at most MaxFiles files (about 200 bytes each),
// not their contents, and no repository handle.
const cachedTrees = 8

// advertised is an ls-remote answer and when it was received.
type advertised struct {
	refs map[string]string
	at   time.Time
}

// DefaultRefsTTL is how long an ls-remote answer is shared by every read of
// the same repository with the same credentials: Apps that track one
// repository make one round trip per window, not one each.
const DefaultRefsTTL = 5 * time.Second

// secretFile holds the key of the folder names, in the cache root.
const secretFile = ".cache-key"

// NewCache uses root (created if missing) for the repositories.
func NewCache(root string) (*Cache, error) {
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("creating the git cache %s: %w", root, err)
	}
	secret, err := loadOrCreateSecret(filepath.Join(root, secretFile))
	if err != nil {
		return nil, err
	}
	installTransport()
	return &Cache{
		root: root, secret: secret, refsTTL: DefaultRefsTTL, now: time.Now,
		locks: map[string]*sync.Mutex{}, refs: map[string]advertised{}, trees: lru.New(cachedTrees), handles: newHandles(),
		transfer: DefaultTransferLimits(),
	}, nil
}

// loadOrCreateSecret reads the 32-byte key in path, or writes a new random one.
func loadOrCreateSecret(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err == nil && len(data) == 32 {
		return data, nil
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, fmt.Errorf("making the git cache key: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, secret, 0o600); err != nil {
		return nil, fmt.Errorf("writing the git cache key: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return nil, fmt.Errorf("writing the git cache key: %w", err)
	}
	return secret, nil
}

// SetTransferLimits changes what remotes may send (before the cache is
// used).
func (c *Cache) SetTransferLimits(l TransferLimits) { c.transfer = l }

// SetRefsTTL changes how long an ls-remote answer is shared (0: never).
func (c *Cache) SetRefsTTL(ttl time.Duration) { c.refsTTL = ttl }

// Key identifies the repository at url as reached with auth: a keyed digest
// of the URL (without credentials) and of every credential. Two requests
// share cached data only when their keys are equal.
func (c *Cache) Key(url string, auth Auth) (string, error) {
	clean, ep, err := cleanURL(url)
	if err != nil {
		return "", err
	}
	return c.key(clean, effectiveAuth(ep, auth)), nil
}

func (c *Cache) key(cleanURL string, auth Auth) string {
	mac := hmac.New(sha256.New, c.secret)
	for _, part := range [][]byte{
		[]byte(cleanURL), []byte(auth.Username), []byte(auth.Password), []byte(auth.BearerToken),
		auth.SSHPrivateKey, []byte(auth.SSHPassphrase), auth.KnownHosts, auth.CABundle,
	} {
		// Length-prefixed, so that no two different inputs share a digest.
		fmt.Fprintf(mac, "%d:", len(part))
		mac.Write(part)
	}
	return hex.EncodeToString(mac.Sum(nil)[:16])
}

// remote is a parsed repository URL with credentials moved out of it.
type remote struct {
	url      string // what go-git dials: no credentials in it
	key      string // the cache key of url and the credentials
	auth     transport.AuthMethod
	caBundle []byte
	transfer TransferLimits
}

// cleanURL parses a repository URL and returns it without credentials,
// together with the credentials an https URL carried.
func cleanURL(rawURL string) (string, *transport.Endpoint, error) {
	ep, err := transport.NewEndpoint(rawURL)
	if err != nil {
		// url.Parse's error quotes the URL whole: only its reason is kept.
		var urlErr *url.Error
		if errors.As(err, &urlErr) {
			err = urlErr.Err
		}
		return "", nil, fmt.Errorf("%w: url %s: %v", ErrInvalidRef, repourl.WithoutCredentials(rawURL), err)
	}
	if repourl.HidesCredentials(rawURL) {
		// A password holding "/", "?" or "#" moves the rest of the URL
		// into its path: the URL would name another host, password and all.
		return "", nil, fmt.Errorf(`%w: url %s: an "@" that does not end the user part (percent-encode "/", "?", "#" and "@" in a password, or use a credentials Secret)`,
			ErrInvalidRef, repourl.WithoutCredentials(rawURL))
	}
	withCreds := *ep
	ep.Password = ""
	if ep.Protocol == "http" || ep.Protocol == "https" {
		ep.User = ""
	}
	if ep.Protocol == "file" {
		return "file://" + ep.Path, &withCreds, nil
	}
	return ep.String(), &withCreds, nil
}

// IsLocal reports whether Git would read rawURL from the local disk (a
// file:// URL, or anything else go-git takes for a path), whatever its
// spelling.
func IsLocal(rawURL string) bool {
	if strings.HasPrefix(strings.ToLower(strings.TrimSpace(rawURL)), "file:") {
		return true
	}
	ep, err := transport.NewEndpoint(rawURL)
	return err == nil && ep.Protocol == "file" // a URL that does not parse is refused by the Read itself
}

// effectiveAuth is auth, or the credentials written into an https URL when
// the secret has none.
func effectiveAuth(ep *transport.Endpoint, auth Auth) Auth {
	if (ep.Protocol == "http" || ep.Protocol == "https") && ep.User != "" &&
		auth.Username == "" && auth.Password == "" && auth.BearerToken == "" {
		auth.Username, auth.Password = ep.User, ep.Password
	}
	return auth
}

func (c *Cache) parseRemote(rawURL string, auth Auth) (*remote, error) {
	clean, ep, err := cleanURL(rawURL)
	if err != nil {
		return nil, err
	}
	auth = effectiveAuth(ep, auth)
	method, err := auth.method(ep)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", clean, err)
	}
	return &remote{url: clean, key: c.key(clean, auth), auth: method, caBundle: auth.CABundle, transfer: c.transfer}, nil
}

// listRefs asks the remote for its refs: one round trip, nothing fetched.
func (r *remote) listRefs(ctx context.Context) (map[string]string, error) {
	rem := gogit.NewRemote(memory.NewStorage(), &config.RemoteConfig{Name: "origin", URLs: []string{r.url}})
	// The CA bundle and the limits travel in the context, to plumb's HTTP
	// transport (transport.go).
	refs, err := rem.ListContext(r.transferContext(ctx), &gogit.ListOptions{
		Auth:          r.auth,
		PeelingOption: gogit.AppendPeeled,
	})
	if err != nil {
		return nil, r.wrap("listing refs", err)
	}
	out := make(map[string]string, len(refs))
	for _, ref := range refs {
		if ref.Type() == plumbing.HashReference {
			out[ref.Name().String()] = ref.Hash().String()
		}
	}
	return out, nil
}

// transferContext carries r's CA bundle and limits to the HTTP transport.
func (r *remote) transferContext(ctx context.Context) context.Context {
	return withTransfer(ctx, r.transfer, r.caBundle)
}

// wrap turns a transport error into one that names the repository (without
// credentials) and marks refused credentials with ErrAuth.
func (r *remote) wrap(what string, err error) error {
	err = bounded(err)
	switch {
	case errors.Is(err, transport.ErrAuthenticationRequired), errors.Is(err, transport.ErrAuthorizationFailed):
		return fmt.Errorf("%s %s: %w: %v", what, r.url, ErrAuth, err)
	case errors.Is(err, transport.ErrEmptyRemoteRepository):
		return fmt.Errorf("%s %s: %w: the repository is empty", what, r.url, ErrRevisionNotFound)
	}
	return fmt.Errorf("%s %s: %w", what, r.url, err)
}

// maxRemoteErrorBytes bounds the text of an error the remote had a say in
// (an SSH server's stderr, a pkt-line ERR): it reaches the App's status.
const maxRemoteErrorBytes = 512

// boundedError is an error whose text was cut; it still matches its
// cause with errors.Is and errors.As.
type boundedError struct {
	msg string
	err error
}

func (e *boundedError) Error() string { return e.msg }
func (e *boundedError) Unwrap() error { return e.err }

// bounded cuts err's text to maxRemoteErrorBytes.
func bounded(err error) error {
	msg := err.Error()
	if len(msg) <= maxRemoteErrorBytes {
		return err
	}
	return &boundedError{msg: strings.ToValidUTF8(msg[:maxRemoteErrorBytes], "") + " [cut]", err: err}
}

// ResolveOptions tune Resolve.
type ResolveOptions struct {
	// Fresh asks the remote even when an answer younger than the refs TTL
	// is at hand (a webhook announced a push).
	Fresh bool
}

// Resolve asks the remote where ref points, with one round trip and no
// fetch; reads of the same repository with the same credentials within the
// refs TTL share that round trip. A pinned commit is returned as is, after
// the same round trip (which proves the credentials reach the repository).
func (c *Cache) Resolve(ctx context.Context, url string, ref Ref, auth Auth, opts ResolveOptions) (Revision, error) {
	r, err := c.parseRemote(url, auth)
	if err != nil {
		return Revision{}, err
	}
	refs, err := c.advertisedRefs(ctx, r, opts.Fresh)
	if err != nil {
		return Revision{}, err
	}
	return resolveRef(refs, ref, r.url)
}

// lsRemoteTimeout bounds an ls-remote that several reads share: it runs
// under a context of its own, so that one read's deadline or cancellation
// does not fail the others.
const lsRemoteTimeout = time.Minute

// advertisedRefs returns the remote's refs: a recent answer for the same
// key, or the answer of an ls-remote under way, or a new ls-remote. A fresh
// read makes its own ls-remote (one that began before the push it was told
// about would not do), and leaves its answer for the others.
func (c *Cache) advertisedRefs(ctx context.Context, r *remote, fresh bool) (map[string]string, error) {
	if fresh {
		started := c.now()
		refs, err := r.listRefs(ctx)
		if err != nil {
			return nil, err
		}
		c.rememberAt(r.key, refs, started)
		return refs, nil
	}
	if c.refsTTL > 0 {
		c.mu.Lock()
		last, ok := c.refs[r.key]
		c.mu.Unlock()
		if ok && c.now().Sub(last.at) < c.refsTTL {
			return last.refs, nil
		}
	}
	answer := c.calls.DoChan(r.key, func() (any, error) {
		shared, cancel := context.WithTimeout(context.WithoutCancel(ctx), lsRemoteTimeout)
		defer cancel()
		started := c.now()
		refs, err := r.listRefs(shared)
		if err != nil {
			return nil, err
		}
		c.rememberAt(r.key, refs, started)
		return refs, nil
	})
	select {
	case res := <-answer:
		if res.Err != nil {
			return nil, res.Err
		}
		return res.Val.(map[string]string), nil
	case <-ctx.Done():
		return nil, r.wrap("listing refs", ctx.Err())
	}
}

// maxRemembered bounds the ls-remote answers kept; older ones go first.
const maxRemembered = 4096

// rememberAt keeps an ls-remote answer that was asked for at started, for
// the refs TTL from then, unless an answer asked for later is kept already
// (an ls-remote that began before a push must not replace one after it).
func (c *Cache) rememberAt(key string, refs map[string]string, started time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if last, ok := c.refs[key]; ok && last.at.After(started) {
		return
	}
	now := c.now()
	if len(c.refs) >= maxRemembered {
		for k, a := range c.refs {
			if now.Sub(a.at) >= c.refsTTL {
				delete(c.refs, k)
			}
		}
	}
	if len(c.refs) < maxRemembered {
		c.refs[key] = advertised{refs: refs, at: started}
	}
}

// resolveRef finds ref among the advertised refs.
func resolveRef(refs map[string]string, ref Ref, display string) (Revision, error) {
	switch {
	case ref.Branch != "":
		if hash, ok := refs["refs/heads/"+ref.Branch]; ok {
			return Revision{Name: ref.Branch, Hash: hash}, nil
		}
		return Revision{}, fmt.Errorf("branch %q not found at %s: %w", ref.Branch, display, ErrRevisionNotFound)
	case ref.Tag != "":
		if rev, ok := tagRevision(refs, ref.Tag); ok {
			return rev, nil
		}
		return Revision{}, fmt.Errorf("tag %q not found at %s: %w", ref.Tag, display, ErrRevisionNotFound)
	case ref.SemVer != "":
		constraint, err := semver.NewConstraint(ref.SemVer)
		if err != nil {
			return Revision{}, fmt.Errorf("%w: semver range %q: %v", ErrInvalidRef, ref.SemVer, err)
		}
		var best *semver.Version
		bestTag := ""
		for name := range refs {
			tag, ok := strings.CutPrefix(name, "refs/tags/")
			if !ok || strings.HasSuffix(tag, "^{}") {
				continue
			}
			v, err := semver.NewVersion(tag)
			if err != nil || !constraint.Check(v) {
				continue
			}
			if best == nil || v.GreaterThan(best) || (v.Equal(best) && tag < bestTag) {
				best, bestTag = v, tag
			}
		}
		if best == nil {
			return Revision{}, fmt.Errorf("no tag in semver range %q at %s: %w", ref.SemVer, display, ErrRevisionNotFound)
		}
		rev, _ := tagRevision(refs, bestTag)
		return rev, nil
	case ref.Commit != "":
		if !plumbing.IsHash(ref.Commit) {
			return Revision{}, fmt.Errorf("%w: commit %q is not a full SHA-1", ErrInvalidRef, ref.Commit)
		}
		return Revision{Hash: strings.ToLower(ref.Commit)}, nil
	}
	return Revision{}, fmt.Errorf("%w: no branch, tag, semver or commit", ErrInvalidRef)
}

// tagRevision resolves a tag to its commit (peeling an annotated tag).
func tagRevision(refs map[string]string, tag string) (Revision, bool) {
	if hash, ok := refs["refs/tags/"+tag+"^{}"]; ok {
		return Revision{Name: tag, Hash: hash}, true
	}
	hash, ok := refs["refs/tags/"+tag]
	return Revision{Name: tag, Hash: hash}, ok
}

// repoDir is the cache folder of a repository key.
func (c *Cache) repoDir(key string) string {
	return filepath.Join(c.root, key)
}

func (c *Cache) lock(dir string) *sync.Mutex {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, ok := c.locks[dir]
	if !ok {
		l = &sync.Mutex{}
		c.locks[dir] = l
	}
	return l
}

// Fetch makes sure rev's commit is in the cache, fetching only what ref
// needs: the branch or tag (its history), or every branch and tag when a
// pinned commit is not there yet. It does nothing when the commit is cached.
func (c *Cache) Fetch(ctx context.Context, url string, ref Ref, rev Revision, auth Auth) error {
	r, err := c.parseRemote(url, auth)
	if err != nil {
		return err
	}
	dir := c.repoDir(r.key)
	l := c.lock(dir)
	l.Lock()
	defer l.Unlock()

	hash := plumbing.NewHash(rev.Hash)
	if h, err := c.handles.get(dir); err == nil {
		if h.with(func(repo *gogit.Repository) error { _, err := repo.CommitObject(hash); return err }) == nil {
			return nil
		}
	}
	// The fetch writes through a handle of its own, which readers of the
	// shared one never see half-written.
	repo, err := openOrInit(dir, r.url)
	if err != nil {
		return err
	}
	defer c.handles.fetched(dir)
	var specs []config.RefSpec
	switch {
	case ref.Branch != "":
		specs = []config.RefSpec{config.RefSpec(fmt.Sprintf("+refs/heads/%s:refs/heads/%s", rev.Name, rev.Name))}
	case ref.Tag != "" || ref.SemVer != "":
		specs = []config.RefSpec{config.RefSpec(fmt.Sprintf("+refs/tags/%s:refs/tags/%s", rev.Name, rev.Name))}
	default:
		specs = []config.RefSpec{"+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"}
	}
	err = repo.FetchContext(r.transferContext(ctx), &gogit.FetchOptions{
		RemoteName: "origin",
		RefSpecs:   specs,
		Auth:       r.auth,
		Tags:       gogit.NoTags,
		Force:      true,
	})
	if err != nil && !errors.Is(err, gogit.NoErrAlreadyUpToDate) {
		return r.wrap("fetching "+ref.String()+" from", err)
	}
	if _, err := repo.CommitObject(hash); err != nil {
		return fmt.Errorf("commit %s of %s not found at %s after fetching: %w", rev.Hash, ref, r.url, ErrRevisionNotFound)
	}
	return nil
}

// openOrInit opens the bare repository in dir, creating it on first use.
func openOrInit(dir, url string) (*gogit.Repository, error) {
	repo, err := gogit.PlainOpen(dir)
	if errors.Is(err, gogit.ErrRepositoryNotExists) {
		repo, err = gogit.PlainInit(dir, true)
		if err == nil {
			_, err = repo.CreateRemote(&config.RemoteConfig{Name: "origin", URLs: []string{url}})
		}
	}
	if err != nil {
		return nil, fmt.Errorf("opening the cached repository %s: %w", dir, err)
	}
	return repo, nil
}

// dirOf is the cache folder of url as fetched with auth, and the URL
// without credentials.
func (c *Cache) dirOf(url string, auth Auth) (dir, clean string, err error) {
	clean, ep, err := cleanURL(url)
	if err != nil {
		return "", "", err
	}
	return c.repoDir(c.key(clean, effectiveAuth(ep, auth))), clean, nil
}

// open returns the open handle of the cached repository of url as fetched
// with auth.
func (c *Cache) open(url string, auth Auth) (*repoHandle, string, error) {
	dir, clean, err := c.dirOf(url, auth)
	if err != nil {
		return nil, "", err
	}
	h, err := c.handles.get(dir)
	if err != nil {
		return nil, clean, fmt.Errorf("opening the cached repository of %s: %w", clean, err)
	}
	return h, clean, nil
}

// IsAncestor reports whether commit ancestor is in the history of commit
// descendant, both already in the cache. A false answer for the previously
// applied commit of a branch means its history was rewritten (force-push).
func (c *Cache) IsAncestor(url string, auth Auth, ancestor, descendant string) (bool, error) {
	// A walk of the history, whose length a pusher controls: through a
	// handle of its own, so that reads of the shared one do not wait.
	dir, clean, err := c.dirOf(url, auth)
	if err != nil {
		return false, err
	}
	repo, err := openBounded(dir)
	if err != nil {
		return false, fmt.Errorf("opening the cached repository of %s: %w", clean, err)
	}
	a, err := repo.CommitObject(plumbing.NewHash(ancestor))
	if err != nil {
		return false, nil // not even fetched: not in this history
	}
	d, err := repo.CommitObject(plumbing.NewHash(descendant))
	if err != nil {
		return false, fmt.Errorf("commit %s not in the cache of %s: %w", descendant, clean, err)
	}
	return a.IsAncestor(d)
}

// CommitTime is the committer date of a cached commit: when it was made,
// as the committer's clock said.
func (c *Cache) CommitTime(url string, auth Auth, hash string) (time.Time, error) {
	h, clean, err := c.open(url, auth)
	if err != nil {
		return time.Time{}, err
	}
	var when time.Time
	err = h.with(func(repo *gogit.Repository) error {
		commit, err := repo.CommitObject(plumbing.NewHash(hash))
		if err != nil {
			return fmt.Errorf("commit %s not in the cache of %s: %w", hash, clean, err)
		}
		when = commit.Committer.When
		return nil
	})
	return when, err
}

// Tree returns the files of a cached commit, enforcing limits while it reads
// the commit's tree. Contents load on demand, through the repository's open
// handle. The tree of a commit (names, sizes and blob hashes,
// not contents) is walked once and kept, for the same repository key, so
// for the same credentials only; each call gets a view whose reads count
// against MaxTotalBytes from zero.
func (c *Cache) Tree(url string, auth Auth, hash string, limits tree.Limits) (*tree.Tree, error) {
	repoKey, err := c.Key(url, auth)
	if err != nil {
		return nil, err
	}
	h, clean, err := c.open(url, auth)
	if err != nil {
		return nil, err
	}
	treeKey := fmt.Sprintf("%s\x00%s\x00%d/%d/%d", repoKey, hash, limits.MaxFiles, limits.MaxTotalBytes, limits.MaxFileBytes)
	walked, err, _ := c.treeWalks.Do(treeKey, func() (any, error) {
		if cached, ok := c.trees.Get(treeKey); ok {
			return cached, nil
		}
		var t *tree.Tree
		err := h.with(func(repo *gogit.Repository) error {
			var err error
			t, err = c.walkTree(repo, clean, hash, limits)
			return err
		})
		if err != nil {
			return nil, err
		}
		c.trees.Add(treeKey, t)
		return t, nil
	})
	if err != nil {
		return nil, err
	}
	maxFile := limits.MaxFileBytes
	return walked.(*tree.Tree).View(func(key string) ([]byte, error) {
		var data []byte
		err := h.with(func(repo *gogit.Repository) error {
			var err error
			data, err = readBlob(repo, plumbing.NewHash(key), maxFile)
			return err
		})
		return data, err
	}), nil
}

// objectSizer reads an object's size without its content (go-git's
// filesystem storage does).
type objectSizer interface {
	EncodedObjectSize(plumbing.Hash) (int64, error)
}

// walkTree builds the tree of a commit: its files' names, sizes and blob
// hashes, with no loader (see Tree).
func (c *Cache) walkTree(repo *gogit.Repository, clean, hash string, limits tree.Limits) (*tree.Tree, error) {
	c.walks.Add(1)
	commit, err := repo.CommitObject(plumbing.NewHash(hash))
	if err != nil {
		return nil, fmt.Errorf("commit %s not in the cache of %s: %w", hash, clean, err)
	}
	root, err := commit.Tree()
	if err != nil {
		return nil, fmt.Errorf("reading the tree of commit %s: %w", hash, err)
	}
	sizeOf := func(h plumbing.Hash) (int64, error) {
		if sizer, ok := repo.Storer.(objectSizer); ok {
			return sizer.EncodedObjectSize(h)
		}
		obj, err := repo.Storer.EncodedObject(plumbing.BlobObject, h)
		if err != nil {
			return 0, err
		}
		return obj.Size(), nil
	}
	builder := tree.NewBuilder(limits, nil)
	walker := object.NewTreeWalker(root, true, nil)
	defer walker.Close()
	for {
		name, entry, err := walker.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("walking the tree of commit %s: %w", hash, err)
		}
		switch entry.Mode {
		case filemode.Regular, filemode.Executable, filemode.Deprecated:
			size, err := sizeOf(entry.Hash)
			if err != nil {
				return nil, fmt.Errorf("reading %s at commit %s: %w", name, hash, err)
			}
			if err := builder.AddFile(name, size, entry.Hash.String()); err != nil {
				return nil, err
			}
		case filemode.Symlink:
			target, err := readBlob(repo, entry.Hash, 4096)
			if err != nil {
				return nil, fmt.Errorf("reading symlink %s at commit %s: %w", name, hash, err)
			}
			if err := builder.AddSymlink(name, string(target)); err != nil {
				return nil, err
			}
		}
		// Folders are walked into; submodules (filemode.Submodule) are not
		// followed: their content is another repository.
	}
	return builder.Build(), nil
}

// readBlob reads a blob, refusing one larger than max (when max > 0).
func readBlob(repo *gogit.Repository, hash plumbing.Hash, max int64) ([]byte, error) {
	blob, err := repo.BlobObject(hash)
	if err != nil {
		return nil, err
	}
	if max > 0 && blob.Size > max {
		return nil, &tree.LimitError{Limit: "file size", Max: max, Got: blob.Size, Path: hash.String()}
	}
	rd, err := blob.Reader()
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	return io.ReadAll(rd)
}
