package helmrepo

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/lru"
)

var (
	// ErrNotFound is a repository without an index at its URL.
	ErrNotFound = errors.New("not found")
	// ErrUnauthorized is a repository that refused the credentials (or
	// their absence).
	ErrUnauthorized = errors.New("unauthorized")
	// ErrPlainHTTP is a plain HTTP repository, or a redirect to one, that
	// the Client does not allow.
	ErrPlainHTTP = errors.New("plain HTTP to a Helm repository is not allowed")
	// ErrInvalidURL is a repository URL that is not https:// (or http://).
	ErrInvalidURL = errors.New("invalid repository URL")
)

// Auth is the basic-auth account a repository is read with; the zero
// value reads anonymously.
type Auth struct {
	Username, Password string
}

// Client reads repositories' indexes and keeps each, parsed, per
// repository URL and digest of the credentials that read it: an index is
// shared by every App that reads the repository with the same account
// (and by no other), downloaded once per change. Within IndexMaxAge of
// its last check an index is served without a request; after it, one
// conditional GET (If-None-Match, or If-Modified-Since where the
// repository's Last-Modified can be trusted) tells whether it changed. A
// Client is safe for concurrent use; the zero value is ready.
type Client struct {
	// Transport carries the requests (http.DefaultTransport when nil).
	Transport http.RoundTripper
	// AllowHTTP allows plain HTTP repositories.
	AllowHTTP bool
	// IndexMaxAge is how long an index serves without asking the
	// repository (DefaultIndexMaxAge when zero).
	IndexMaxAge time.Duration
	// Limits bound reading an index (DefaultIndexLimits when zero).
	Limits IndexLimits
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// IndexCacheBytes bounds the indexes kept, by the heap they hold
	// (their RetainedBytes; DefaultIndexCacheBytes when zero); past it the
	// least recently used go first, and the one in use is always kept.
	IndexCacheBytes int64

	mu      sync.Mutex
	indexes *lru.Cache       // *cachedIndex by index URL and credentials' digest
	sizes   map[string]int64 // the RetainedBytes of each kept index, by key
	used    int64            // their sum
}

// DefaultIndexCacheBytes bounds the heap of the indexes a Client keeps.
// An index as helm writes it keeps less than half a byte per byte read
// (see make bench), so this holds some 512 MiB of them.
const DefaultIndexCacheBytes = 256 << 20

// DefaultIndexMaxAge is how long an index is reused before it is checked
// again: a chart version pushed is seen within this of its push.
const DefaultIndexMaxAge = 30 * time.Second

// maxIndexes bounds the indexes a Client keeps (by repository and
// account); the least recently used goes first.
const maxIndexes = 256

// maxRedirects bounds the redirects followed for one request.
const maxRedirects = 5

// IndexResult is an index and what is known of its fetch.
type IndexResult struct {
	// Index is the parsed index; it is shared and must not be changed.
	Index *Index
	// Digest is the sha256 of the index's bytes, "sha256:<hex>".
	Digest string
	// Requested says a request was made for this call (a conditional one
	// that found it unchanged included); false when served from memory.
	Requested bool
}

// cachedIndex is an account's last reading of a repository's index. One
// fetch runs at a time; the callers that arrive meanwhile wait, each no
// longer than its own context allows, and share its result.
type cachedIndex struct {
	turn         chan struct{} // holds a token while a caller reads or fetches
	index        *Index
	digest       string
	etag         string
	lastModified string // only where it is a strong validator
	checked      time.Time
}

// Index returns the index of the repository at repoURL (its index.yaml),
// read as auth. With fresh it asks the repository whatever the index's
// age (a webhook or a sync request asked for a fresh read).
func (c *Client) Index(ctx context.Context, repoURL string, auth Auth, fresh bool) (IndexResult, error) {
	indexURL, err := c.indexURL(repoURL)
	if err != nil {
		return IndexResult{}, err
	}
	entry, key := c.cached(indexURL, auth)
	select {
	case entry.turn <- struct{}{}:
		defer func() { <-entry.turn }()
	case <-ctx.Done():
		return IndexResult{}, fmt.Errorf("waiting for another read of %s: %w", redactURL(indexURL), ctx.Err())
	}
	now := c.now()
	if entry.index != nil && !fresh && now.Sub(entry.checked) < c.maxAge() {
		return IndexResult{Index: entry.index, Digest: entry.digest}, nil
	}
	changed, err := c.fetch(ctx, indexURL, auth, entry)
	if err != nil {
		return IndexResult{}, err
	}
	if changed {
		c.account(key, entry)
	}
	entry.checked = now
	return IndexResult{Index: entry.index, Digest: entry.digest, Requested: true}, nil
}

// fetch asks for the index, conditionally when entry holds one, and
// updates entry when it changed (and then says so). A failure leaves entry
// as it was, and is not served from it: an unreachable repository fails
// the read.
func (c *Client) fetch(ctx context.Context, indexURL string, auth Auth, entry *cachedIndex) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, indexURL, nil)
	if err != nil {
		return false, fmt.Errorf("%w: %v", ErrInvalidURL, err)
	}
	if auth.Username != "" || auth.Password != "" {
		req.SetBasicAuth(auth.Username, auth.Password)
	}
	if entry.index != nil {
		if entry.etag != "" {
			req.Header.Set("If-None-Match", entry.etag)
		} else if entry.lastModified != "" {
			req.Header.Set("If-Modified-Since", entry.lastModified)
		}
	}
	resp, err := c.httpClient().Do(req)
	if err != nil {
		var plain *plainHTTPError
		if errors.As(err, &plain) {
			return false, plain
		}
		return false, fmt.Errorf("fetching %s: %w", redactURL(indexURL), err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotModified && entry.index != nil:
		return false, nil
	case resp.StatusCode == http.StatusOK:
	case resp.StatusCode == http.StatusNotFound:
		return false, fmt.Errorf("%w: %s (HTTP 404)", ErrNotFound, redactURL(indexURL))
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return false, fmt.Errorf("%w: %s (HTTP %d)", ErrUnauthorized, redactURL(indexURL), resp.StatusCode)
	default:
		return false, fmt.Errorf("fetching %s: HTTP %d", redactURL(indexURL), resp.StatusCode)
	}
	sum := sha256.New()
	index, err := ParseIndex(io.TeeReader(resp.Body, sum), c.limits())
	if err != nil {
		return false, fmt.Errorf("the index at %s: %w", redactURL(indexURL), err)
	}
	entry.index = index
	entry.digest = "sha256:" + hex.EncodeToString(sum.Sum(nil))
	entry.etag = resp.Header.Get("ETag")
	entry.lastModified = strongLastModified(resp.Header)
	return true, nil
}

// account records the heap of entry's index under key and drops the
// least recently used others until the kept indexes fit the budget.
func (c *Client) account(key string, entry *cachedIndex) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if kept, ok := c.indexes.Get(key); !ok || kept != entry {
		return // dropped meanwhile (and perhaps read again as another entry): not counted
	}
	size := max(entry.index.RetainedBytes(), 1)
	c.used += size - c.sizes[key]
	c.sizes[key] = size
	budget := c.IndexCacheBytes
	if budget <= 0 {
		budget = DefaultIndexCacheBytes
	}
	for c.used > budget && c.indexes.Len() > 1 {
		c.indexes.RemoveOldest() // key is the most recent: Get moved it
	}
}

// strongLastModified is the response's Last-Modified if it may validate a
// later request: a modification time within a second of the response's
// Date may have been followed by another change in the same second, which
// If-Modified-Since (second-granular) would miss (RFC 9110, 8.8.2.2).
func strongLastModified(h http.Header) string {
	lastModified, err := http.ParseTime(h.Get("Last-Modified"))
	if err != nil {
		return ""
	}
	date, err := http.ParseTime(h.Get("Date"))
	if err != nil || date.Sub(lastModified) < 2*time.Second {
		return ""
	}
	return h.Get("Last-Modified")
}

// indexURL checks repoURL and names its index.
func (c *Client) indexURL(repoURL string) (string, error) {
	u, err := url.Parse(repoURL)
	if err != nil || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("%w: %q must be https://host/path, without credentials, a query or a fragment", ErrInvalidURL, redactURL(repoURL))
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && c.AllowHTTP:
	case u.Scheme == "http":
		return "", &plainHTTPError{what: redactURL(repoURL)}
	default:
		return "", fmt.Errorf("%w: %q must be https://", ErrInvalidURL, redactURL(repoURL))
	}
	return strings.TrimSuffix(u.String(), "/") + "/index.yaml", nil
}

// cached is the entry of indexURL as auth, made when missing, and its key.
func (c *Client) cached(indexURL string, auth Auth) (*cachedIndex, string) {
	sum := sha256.Sum256(fmt.Appendf(nil, "%q %q", auth.Username, auth.Password)) // quoted: no two accounts join alike
	key := indexURL + "\x00" + hex.EncodeToString(sum[:])
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.indexes == nil {
		c.indexes, c.sizes = lru.New(maxIndexes), map[string]int64{}
		_ = c.indexes.SetEvictionFunc(func(k lru.Key, _ any) { // called with c.mu held
			c.used -= c.sizes[k.(string)]
			delete(c.sizes, k.(string))
		})
	}
	if e, ok := c.indexes.Get(key); ok {
		return e.(*cachedIndex), key
	}
	e := &cachedIndex{turn: make(chan struct{}, 1)}
	c.indexes.Add(key, e)
	return e, key
}

// httpClient follows at most maxRedirects redirects, none to plain HTTP
// unless allowed, and sends the Authorization header only to the first
// request's scheme, host and port (net/http would keep it for another
// port or a subdomain).
func (c *Client) httpClient() *http.Client {
	transport := c.Transport
	if transport == nil {
		transport = http.DefaultTransport
	}
	return &http.Client{
		Transport: transport,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= maxRedirects {
				return fmt.Errorf("%w: more than %d redirects", ErrLimitExceeded, maxRedirects)
			}
			if req.URL.Scheme != "https" && !c.AllowHTTP {
				return &plainHTTPError{what: "a redirect from " + via[0].URL.Host + " to " + req.URL.Host}
			}
			if !sameOrigin(via[0].URL, req.URL) {
				req.Header.Del("Authorization")
			}
			return nil
		},
	}
}

// plainHTTPError is ErrPlainHTTP for one URL or redirect.
type plainHTTPError struct{ what string }

func (e *plainHTTPError) Error() string {
	return fmt.Sprintf("%v: %s", ErrPlainHTTP, e.what)
}
func (e *plainHTTPError) Unwrap() error { return ErrPlainHTTP }

// redactURL drops a URL's credentials, query and fragment for a message.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(an unparsable URL)"
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}

func (c *Client) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

func (c *Client) maxAge() time.Duration {
	if c.IndexMaxAge > 0 {
		return c.IndexMaxAge
	}
	return DefaultIndexMaxAge
}

func (c *Client) limits() IndexLimits {
	if c.Limits == (IndexLimits{}) {
		return DefaultIndexLimits()
	}
	return c.Limits
}
