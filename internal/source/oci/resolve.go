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
	"strings"
	"sync"

	"github.com/Masterminds/semver/v3"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
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
// and token requests before it. The zero value is ready to use; a Client
// is safe for concurrent use.
type Client struct {
	// Transport carries the requests (http.DefaultTransport when nil).
	Transport http.RoundTripper
	// AllowHTTP allows plain HTTP registries; without it every request
	// must be HTTPS.
	AllowHTTP bool

	mu      sync.Mutex
	pullers map[string]*remote.Puller // by sessionKey
	order   []string                  // pullers' keys, oldest first
}

// maxSessions bounds the sessions a Client keeps; the oldest goes first.
const maxSessions = 512

// Resolve resolves ref in the repository at url (oci://host/path): a tag
// or a digest with one manifest HEAD, a semver range by listing the tags
// (every page) and then one HEAD of the highest tag in the range.
func (c *Client) Resolve(ctx context.Context, url string, ref Ref, auth Auth) (Revision, error) {
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
	puller, err := c.puller(repo, auth)
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
		if tag, err = highestInRange(ctx, puller, repo, ref.SemVer); err != nil {
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
	desc, err := puller.Head(ctx, target)
	if err != nil {
		return Revision{}, classify(err, fmt.Sprintf("%s in %s", target.Identifier(), url))
	}
	return Revision{Tag: tag, Digest: desc.Digest.String()}, nil
}

// highestInRange lists the repository's tags and picks the highest that is
// a semver version in the range.
func highestInRange(ctx context.Context, puller *remote.Puller, repo name.Repository, rangeSpec string) (string, error) {
	constraint, err := semver.NewConstraint(rangeSpec)
	if err != nil {
		return "", fmt.Errorf("%w: semver range %q: %v", ErrInvalidRef, rangeSpec, err)
	}
	tags, err := puller.List(ctx, repo)
	if err != nil {
		return "", classify(err, "the tags of "+repo.String())
	}
	var best *semver.Version
	bestTag := ""
	for _, tag := range tags {
		v, err := semver.NewVersion(tag)
		if err != nil || !constraint.Check(v) {
			continue
		}
		if best == nil || v.GreaterThan(best) {
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
		return name.Repository{}, fmt.Errorf("%w: %s holds a tag, digest, query or credentials; name them in ref and secretRef", ErrInvalidRef, url)
	}
	repo, err := name.NewRepository(rest, name.StrictValidation)
	if err != nil {
		return name.Repository{}, fmt.Errorf("%w: %s: %v", ErrInvalidRef, url, err)
	}
	return repo, nil
}

// puller is the session for repo as auth: kept per repository and per
// digest of the credentials, so that no App is served a session another
// account authenticated.
func (c *Client) puller(repo name.Repository, auth Auth) (*remote.Puller, error) {
	sum := sha256.Sum256([]byte(auth.Username + "\x00" + auth.Password))
	key := repo.Name() + "\x00" + hex.EncodeToString(sum[:])
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.pullers[key]; ok {
		return p, nil
	}
	base := c.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	var authenticator authn.Authenticator = authn.Anonymous
	if auth.Username != "" || auth.Password != "" {
		authenticator = &authn.Basic{Username: auth.Username, Password: auth.Password}
	}
	p, err := remote.NewPuller(remote.WithAuth(authenticator), remote.WithTransport(httpsOnly{base: base, allowHTTP: c.AllowHTTP}))
	if err != nil {
		return nil, err
	}
	if c.pullers == nil {
		c.pullers = map[string]*remote.Puller{}
	}
	if len(c.order) >= maxSessions {
		delete(c.pullers, c.order[0])
		c.order = c.order[1:]
	}
	c.pullers[key] = p
	c.order = append(c.order, key)
	return p, nil
}

// httpsOnly refuses plain HTTP requests unless they are allowed.
type httpsOnly struct {
	base      http.RoundTripper
	allowHTTP bool
}

func (t httpsOnly) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "https" && !t.allowHTTP {
		return nil, fmt.Errorf("%w: %s", ErrPlainHTTP, req.URL.Host)
	}
	resp, err := t.base.RoundTrip(req)
	if err == nil && strings.Contains(req.URL.Path, "/manifests/") {
		resp.Body = &cappedBody{ReadCloser: resp.Body, left: maxManifestBytes + 1}
	}
	return resp, err
}

// cappedBody fails a manifest's body past maxManifestBytes, whatever the
// registry's Content-Length said.
type cappedBody struct {
	io.ReadCloser
	left int64
}

func (b *cappedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, fmt.Errorf("%w: a manifest of more than %d bytes", ErrLimitExceeded, maxManifestBytes)
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
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
	return fmt.Errorf("asking the registry about %s: %w", what, err)
}
