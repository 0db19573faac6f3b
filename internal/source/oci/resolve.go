// Package oci reads sources from OCI registries. Resolve turns a reference
// (a tag, a semver range over the tags, or a digest) into a revision with
// one manifest HEAD and no blob download, so that an unchanged source costs
// one request a tick.
//
// The registry protocol is go-containerregistry's. Plain HTTP is refused
// unless the Client allows it: go-containerregistry itself falls back to
// HTTP for loopback and private (RFC 1918) addresses, which a tenant could
// point an App at.
package oci

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/Masterminds/semver/v3"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"k8s.io/utils/lru"
)

// Scheme prefixes a repository URL: oci://host[:port]/path.
const Scheme = "oci://"

var (
	// ErrInvalidRef is a repository URL or a reference that is not well
	// formed (the App's spec is wrong; retrying will not help).
	ErrInvalidRef = errors.New("invalid OCI reference")
	// ErrNotFound is a tag, digest or semver range the repository does
	// not have.
	ErrNotFound = errors.New("not found in the repository")
	// ErrUnauthorized is a registry that refused the credentials.
	ErrUnauthorized = errors.New("the registry refused the credentials")
	// ErrPlainHTTP is a request over plain HTTP that the Client does not
	// allow.
	ErrPlainHTTP = errors.New("plain HTTP to a registry is not allowed")
)

// Ref names what to take from a repository: exactly one of a tag, a semver
// range over its tags, or a manifest digest.
type Ref struct {
	Tag    string
	SemVer string
	Digest string
	// ChartTags reads the tags as `helm push` writes a chart's version: a
	// tag cannot hold "+", so build metadata follows "_" (1.2.3_build.1
	// is version 1.2.3+build.1). Other tags with "_" are no versions.
	ChartTags bool
}

// ChartRef is the Ref of a Helm chart's version in an OCI registry: an
// exact version is its tag ("+" written "_"), a range the highest tag in
// it, empty any version.
func ChartRef(version string) Ref {
	switch _, err := semver.StrictNewVersion(version); {
	case err == nil:
		return Ref{Tag: strings.ReplaceAll(version, "+", "_"), ChartTags: true}
	case version == "":
		return Ref{SemVer: "*", ChartTags: true}
	}
	return Ref{SemVer: version, ChartTags: true}
}

// Auth is the account to present to the registry; zero for anonymous.
type Auth struct {
	Username, Password string
}

// Revision is a resolved reference: the tag it came from (empty for a
// digest) and the manifest's digest.
type Revision struct {
	Tag    string
	Digest string
}

// String is "<tag>@<digest>", or the digest alone.
func (r Revision) String() string {
	if r.Tag == "" {
		return r.Digest
	}
	return r.Tag + "@" + r.Digest
}

// Client asks registries about repositories. It keeps, per repository and
// account, the session it authenticated (go-containerregistry's Puller), so
// that a later resolve sends the manifest HEAD alone, without the ping
// and token requests before it, and the repository's last listing of tags,
// which serves the semver resolves of every App with that account for
// TagsMaxAge. The zero value is ready to use; a Client is safe for
// concurrent use.
type Client struct {
	// Transport carries the requests (http.DefaultTransport when nil).
	Transport http.RoundTripper
	// AllowHTTP allows plain HTTP registries; without it every request
	// must be HTTPS.
	AllowHTTP bool
	// TagsMaxAge is how long a listing of a repository's tags serves
	// semver resolves (DefaultTagsMaxAge when zero).
	TagsMaxAge time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// MaxKeptTagBytes bounds the listings of tags kept over every
	// repository and account (DefaultMaxKeptTagBytes when zero); past it a
	// listing serves its resolve and is not kept.
	MaxKeptTagBytes int64

	mu       sync.Mutex
	sessions *lru.Cache // *session by repository and credentials' digest
	listings *keptListings
}

// DefaultTagsMaxAge is how long a listing of tags is reused: a tag pushed
// is seen by a semver range within this (and the next tick) of its push.
const DefaultTagsMaxAge = 30 * time.Second

// session is one account's access to one repository.
type session struct {
	puller *remote.Puller
	tags   tagListing
}

// maxSessions bounds the sessions a Client keeps; the least recently used
// goes first.
const maxSessions = 512

// Resolve resolves ref in the repository at url (oci://host/path): a tag
// or a digest with one manifest HEAD, a semver range by listing the tags
// (every page) and then one HEAD of the highest tag in the range.
func (c *Client) Resolve(ctx context.Context, url string, ref Ref, auth Auth) (Revision, error) {
	return c.resolve(ctx, url, ref, auth, nil)
}

// ResolveFresh is Resolve for a read a push webhook asked for: a semver
// range lists the tags again rather than reuse a listing younger than
// TagsMaxAge, so that the pushed tag is seen at once, unless a listing
// started at or after since (zero: when the resolve asks), by the
// Client's clock: the resolves one push brings forward share one listing.
func (c *Client) ResolveFresh(since time.Time) func(ctx context.Context, url string, ref Ref, auth Auth) (Revision, error) {
	return func(ctx context.Context, url string, ref Ref, auth Auth) (Revision, error) {
		return c.resolve(ctx, url, ref, auth, &since)
	}
}

// resolve resolves ref; a fresh (non-nil) since asks for a listing of tags
// that started at or after it (its zero value: after the resolve asks).
func (c *Client) resolve(ctx context.Context, url string, ref Ref, auth Auth, fresh *time.Time) (Revision, error) {
	repo, err := c.repository(url)
	if err != nil {
		return Revision{}, err
	}
	set := 0
	for _, v := range []string{ref.Tag, ref.SemVer, ref.Digest} {
		if v != "" {
			set++
		}
	}
	if set > 1 {
		return Revision{}, fmt.Errorf("%w: set one of tag, semver and digest", ErrInvalidRef)
	}
	sess, err := c.session(repo, auth)
	if err != nil {
		return Revision{}, err
	}
	var target name.Reference
	tag := ref.Tag
	switch {
	case ref.Digest != "":
		if target, err = name.NewDigest(repo.String()+"@"+ref.Digest, name.StrictValidation); err != nil {
			return Revision{}, fmt.Errorf("%w: digest %q: %v", ErrInvalidRef, ref.Digest, err)
		}
	case ref.SemVer != "":
		if tag, err = c.highestInRange(ctx, sess, repo, ref, fresh); err != nil {
			return Revision{}, err
		}
		target = repo.Tag(tag)
	default:
		if tag == "" {
			tag = "latest"
		}
		if target, err = name.NewTag(repo.String()+":"+tag, name.StrictValidation); err != nil {
			return Revision{}, fmt.Errorf("%w: tag %q: %v", ErrInvalidRef, tag, err)
		}
	}
	desc, err := sess.puller.Head(ctx, target)
	if err != nil {
		return Revision{}, classify(err, fmt.Sprintf("%s in %s", target.Identifier(), url))
	}
	return Revision{Tag: tag, Digest: desc.Digest.String()}, nil
}

// highestInRange picks, of the repository's tags, the highest that is a
// semver version in ref's range (for ChartTags, build metadata after "_").
// Of tags of one precedence (versions that differ only in build metadata)
// the lowest in byte order wins, whatever order the registry lists them in.
func (c *Client) highestInRange(ctx context.Context, sess *session, repo name.Repository, ref Ref, fresh *time.Time) (string, error) {
	rangeSpec := ref.SemVer
	constraint, err := semver.NewConstraint(rangeSpec)
	if err != nil {
		return "", fmt.Errorf("%w: semver range %q: %v", ErrInvalidRef, rangeSpec, err)
	}
	maxAge := c.TagsMaxAge
	if maxAge == 0 {
		maxAge = DefaultTagsMaxAge
	}
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	tags, err := sess.tags.get(ctx, now, maxAge, fresh, func(ctx context.Context) ([]string, error) {
		return listTags(ctx, sess.puller, repo)
	})
	if err != nil {
		return "", err
	}
	var best *semver.Version
	bestTag := ""
	for _, tag := range tags {
		version := tag
		if ref.ChartTags {
			version = strings.ReplaceAll(tag, "_", "+")
		}
		v, err := semver.NewVersion(version)
		if err != nil || !constraint.Check(v) {
			continue
		}
		if best == nil || v.GreaterThan(best) || v.Equal(best) && tag < bestTag {
			best, bestTag = v, tag
		}
	}
	if best == nil {
		return "", fmt.Errorf("%w: no tag in semver range %q (of %d tags)", ErrNotFound, rangeSpec, len(tags))
	}
	return bestTag, nil
}

// repository parses oci://host/path.
func (c *Client) repository(url string) (name.Repository, error) {
	rest, ok := strings.CutPrefix(url, Scheme)
	if !ok {
		return name.Repository{}, fmt.Errorf("%w: %q does not start with %s", ErrInvalidRef, url, Scheme)
	}
	if strings.ContainsAny(rest, "@?#") {
		// Not quoted: what stands before an "@" may be a password.
		return name.Repository{}, fmt.Errorf("%w: the URL holds a tag, digest, query or credentials; name them in ref and secretRef", ErrInvalidRef)
	}
	options := []name.Option{name.StrictValidation}
	if c.AllowHTTP {
		options = append(options, name.Insecure) // plain HTTP, whatever the host
	}
	repo, err := name.NewRepository(rest, options...)
	if err != nil {
		return name.Repository{}, fmt.Errorf("%w: %s: %v", ErrInvalidRef, url, err)
	}
	// go-containerregistry takes a first part without a '.' or a ':' (and
	// not localhost) for a Docker Hub namespace: oci://zot/app would
	// read index.docker.io/zot/app.
	host, _, _ := strings.Cut(rest, "/")
	if got := repo.RegistryStr(); got != host && !(host == "docker.io" && got == name.DefaultRegistry) {
		return name.Repository{}, fmt.Errorf("%w: %s: the registry's host %q needs a '.' or a port (or is localhost); Docker Hub is oci://docker.io/<namespace>/<name>", ErrInvalidRef, url, host)
	}
	return repo, nil
}

// session is the access to repo as auth: kept per repository and per
// digest of the credentials, so that no App is served a session (or a
// listing of tags) another account authenticated.
func (c *Client) session(repo name.Repository, auth Auth) (*session, error) {
	sum := sha256.Sum256(fmt.Appendf(nil, "%d:%s%s", len(auth.Username), auth.Username, auth.Password)) // length-prefixed: no two accounts share it
	key := repo.Name() + "\x00" + hex.EncodeToString(sum[:])
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sessions == nil {
		// A session dropped gives its listing's bytes back.
		c.listings = &keptListings{max: c.MaxKeptTagBytes}
		if c.listings.max == 0 {
			c.listings.max = DefaultMaxKeptTagBytes
		}
		c.sessions = lru.NewWithEvictionFunc(maxSessions, func(_ lru.Key, s any) { c.listings.drop(&s.(*session).tags) })
	}
	if s, ok := c.sessions.Get(key); ok {
		return s.(*session), nil
	}
	base := c.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	var authenticator authn.Authenticator = authn.Anonymous
	if auth.Username != "" || auth.Password != "" {
		authenticator = &authn.Basic{Username: auth.Username, Password: auth.Password}
	}
	p, err := remote.NewPuller(remote.WithAuth(authenticator), remote.WithPageSize(tagsPageSize),
		remote.WithTransport(guarded{base: base, allowHTTP: c.AllowHTTP}))
	if err != nil {
		return nil, err
	}
	s := &session{puller: p, tags: tagListing{store: c.listings}}
	c.sessions.Add(key, s)
	return s, nil
}

// guarded is the transport under every request to a registry. Without
// allowHTTP it sends every request over HTTPS, though go-containerregistry
// picks plain HTTP for loopback and private (RFC 1918) hosts, and refuses a
// redirect to plain HTTP. It bounds the bodies of manifests and tag lists
// whatever their Content-Length says, and lets a request leave the
// registry's host only as a blob download (real registries send those to
// a storage host), and then without the registry's credentials.
type guarded struct {
	base      http.RoundTripper
	allowHTTP bool
}

// blobPath is the path of a blob download, /v2/<repository>/blobs/<digest>
// (a repository's name holds no ':', so no manifest's path matches).
var blobPath = regexp.MustCompile(`^/v2/.+/blobs/sha256:[0-9a-f]{64}$`)

func (t guarded) RoundTrip(req *http.Request) (*http.Response, error) {
	first := req
	for first.Response != nil && first.Response.Request != nil {
		first = first.Response.Request
	}
	asked := req
	switch {
	case req.URL.Scheme == "https" || t.allowHTTP:
	case first == req:
		req = req.Clone(req.Context())
		req.URL.Scheme = "https"
	default:
		return nil, fmt.Errorf("%w: the registry redirected %s to %s", ErrPlainHTTP, first.URL.Host, req.URL.Host)
	}
	if first != req && first.URL.Host != req.URL.Host {
		if req.Method != http.MethodGet || !blobPath.MatchString(first.URL.Path) {
			return nil, fmt.Errorf("%w: the registry redirected %s %s to another host (%s); only a blob download may leave the registry's host",
				ErrLimitExceeded, first.Method, first.URL.Path, req.URL.Host)
		}
		req = req.Clone(req.Context())
		req.Header.Del("Authorization")
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	// The answer is to the request go-containerregistry made: a next
	// page's link is checked against its scheme.
	resp.Request = asked
	switch {
	case strings.Contains(first.URL.Path, "/manifests/"):
		resp.Body = &cappedBody{ReadCloser: resp.Body, limit: maxManifestBytes, what: "a manifest"}
	case strings.HasSuffix(first.URL.Path, "/tags/list"):
		resp.Body = &cappedBody{ReadCloser: resp.Body, limit: maxTagsPageBytes, what: "a page of tags"}
	}
	return resp, nil
}

// cappedBody fails a body past its bound, whatever the registry's
// Content-Length said, and closes it there: go-containerregistry does not
// close a body it failed to decode, and the connection would stay open.
type cappedBody struct {
	io.ReadCloser
	limit, read int64
	what        string
}

func (b *cappedBody) Read(p []byte) (int, error) {
	if b.read > b.limit {
		return 0, b.exceeded()
	}
	if left := b.limit + 1 - b.read; int64(len(p)) > left {
		p = p[:left]
	}
	n, err := b.ReadCloser.Read(p)
	b.read += int64(n)
	if b.read > b.limit {
		return n, b.exceeded()
	}
	return n, err
}

func (b *cappedBody) exceeded() error {
	_ = b.ReadCloser.Close()
	return fmt.Errorf("%w: %s of more than %d bytes", ErrLimitExceeded, b.what, b.limit)
}

// classify maps a registry's answer to the package's errors; what names
// the thing asked about.
func classify(err error, what string) error {
	var terr *transport.Error
	if errors.As(err, &terr) {
		switch terr.StatusCode {
		case http.StatusNotFound:
			return fmt.Errorf("%w: %s", ErrNotFound, what)
		case http.StatusUnauthorized, http.StatusForbidden:
			return fmt.Errorf("%w: %s (HTTP %d)", ErrUnauthorized, what, terr.StatusCode)
		}
	}
	if strings.Contains(err.Error(), "server gave HTTP response to HTTPS client") {
		return fmt.Errorf("%w: asking the registry about %s, it answered over plain HTTP (oci.insecure reads it so, where the controller allows it)", ErrPlainHTTP, what)
	}
	return fmt.Errorf("asking the registry about %s: %w", what, err)
}
