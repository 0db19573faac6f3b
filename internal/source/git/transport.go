package git

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	gitclient "github.com/go-git/go-git/v5/plumbing/transport/client"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"k8s.io/utils/lru"
)

// TransferLimits bound what a remote may send over HTTP(S), so that a
// hostile Git server (any URL an App names) cannot exhaust the
// controller's memory or disk, nor have its answers shown to the App's
// author.
type TransferLimits struct {
	// MaxAdvertisementBytes bounds the ref advertisement (the answer to
	// an ls-remote).
	MaxAdvertisementBytes int64
	// MaxFetchBytes bounds one fetch's pack.
	MaxFetchBytes int64
}

// DefaultTransferLimits hold a few hundred thousand refs and a pack of a
// repository with a long history, and no more.
func DefaultTransferLimits() TransferLimits {
	return TransferLimits{MaxAdvertisementBytes: 32 << 20, MaxFetchBytes: 1 << 30}
}

// maxErrorBodyBytes is how much of an error answer's body is read (and
// thrown away, so that the connection can be reused): go-git would read
// all of it into the error's text, which reaches the App's status.
const maxErrorBodyBytes = 4 << 10

// ErrTooLarge means a remote sent more than TransferLimits allow.
var ErrTooLarge = errors.New("the remote sent more than plumb's limit")

// transferKey carries a request's TransferLimits and CA bundle through
// go-git, which passes the context of a list or fetch on to its HTTP
// requests.
type transferKey struct{}

type transferOptions struct {
	limits   TransferLimits
	caBundle []byte
}

func withTransfer(ctx context.Context, limits TransferLimits, caBundle []byte) context.Context {
	return context.WithValue(ctx, transferKey{}, transferOptions{limits: limits, caBundle: caBundle})
}

// installOnce puts plumb's HTTP transport into go-git's protocol
// registry, for http and https. go-git looks transports up by scheme in
// one process-wide map and takes no client per call, so this is the one
// process-wide registration the package makes (go-git's documented way to
// replace its HTTP client).
var installOnce sync.Once

// go-git casts the client's transport to *http.Transport (and panics if it
// is not one) when a list or fetch passes a CA bundle, a client
// certificate, a proxy or InsecureSkipTLS in its options: plumb passes
// none of them there (the CA bundle travels in the context instead), and
// must not start to.
func installTransport() {
	installOnce.Do(func() {
		client := githttp.NewClient(&http.Client{Transport: newBoundedTransport()})
		gitclient.InstallProtocol("http", client)
		gitclient.InstallProtocol("https", client)
	})
}

// boundedTransport is the HTTP round tripper of Git requests: it answers
// with the body of a non-2xx response dropped (read up to a few KiB, never
// passed on), caps a successful response's body at the request's
// TransferLimits, and trusts the request's CA bundle (one pooled
// transport per bundle, since go-git would otherwise clone a transport,
// and its connection pool, per request).
type boundedTransport struct {
	base *http.Transport

	mu      sync.Mutex
	withCAs *lru.Cache // sha256 of a CA bundle → *http.Transport
}

// maxCATransports bounds the transports kept for CA bundles (their idle
// connections with them).
const maxCATransports = 64

func newBoundedTransport() *boundedTransport {
	base := http.DefaultTransport.(*http.Transport).Clone()
	// An evicted transport's idle connections would stay open until they
	// time out: close them.
	withCAs := lru.NewWithEvictionFunc(maxCATransports, func(_ lru.Key, value any) { value.(*http.Transport).CloseIdleConnections() })
	return &boundedTransport{base: base, withCAs: withCAs}
}

func (t *boundedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	opts, ok := req.Context().Value(transferKey{}).(transferOptions)
	if !ok {
		opts = transferOptions{limits: DefaultTransferLimits()}
	}
	rt, err := t.transportFor(opts.caBundle)
	if err != nil {
		return nil, err
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBodyBytes))
		_ = resp.Body.Close()
		resp.Body, resp.ContentLength = http.NoBody, 0
		return resp, nil
	}
	limit, what := opts.limits.MaxFetchBytes, "pack"
	if strings.HasSuffix(req.URL.Path, "/info/refs") {
		limit, what = opts.limits.MaxAdvertisementBytes, "ref advertisement"
	}
	if limit > 0 {
		resp.Body = &cappedBody{body: resp.Body, limit: limit, what: what}
	}
	return resp, nil
}

// transportFor is the base transport, or the one that trusts caBundle
// besides the system's roots.
func (t *boundedTransport) transportFor(caBundle []byte) (http.RoundTripper, error) {
	if len(caBundle) == 0 {
		return t.base, nil
	}
	key := sha256.Sum256(caBundle)
	t.mu.Lock()
	defer t.mu.Unlock()
	if cached, ok := t.withCAs.Get(key); ok {
		return cached.(*http.Transport), nil
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(caBundle) {
		return nil, fmt.Errorf("%w: the CA bundle holds no PEM certificate", ErrAuth)
	}
	tr := t.base.Clone()
	tr.TLSClientConfig = tr.TLSClientConfig.Clone()
	if tr.TLSClientConfig == nil {
		tr.TLSClientConfig = &tls.Config{}
	}
	tr.TLSClientConfig.RootCAs = pool
	t.withCAs.Add(key, tr)
	return tr, nil
}

// cappedBody fails a read once more than limit bytes came.
type cappedBody struct {
	body        io.ReadCloser
	read, limit int64
	what        string
}

func (b *cappedBody) Read(p []byte) (int, error) {
	if b.read > b.limit {
		return 0, fmt.Errorf("%w: the %s is larger than %d bytes", ErrTooLarge, b.what, b.limit)
	}
	n, err := b.body.Read(p)
	b.read += int64(n)
	if over := b.read - b.limit; over > 0 {
		return n - int(over), fmt.Errorf("%w: the %s is larger than %d bytes", ErrTooLarge, b.what, b.limit)
	}
	return n, err
}

func (b *cappedBody) Close() error { return b.body.Close() }
