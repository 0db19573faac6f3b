package ui

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
)

// ProxyOptions configure a Proxy.
type ProxyOptions struct {
	// Config is the dashboard's own identity. It reads nothing for a
	// viewer: it impersonates them (it needs impersonate on users and
	// groups, and create on subjectaccessreviews).
	Config *rest.Config
	// Scheme and Mapper make the viewers' clients (one mapper for all).
	Scheme *runtime.Scheme
	Mapper meta.RESTMapper
	// UserHeader and GroupsHeader name the headers that the proxy sets to
	// the person it authenticated (default X-Forwarded-User and
	// X-Forwarded-Groups; groups are comma-separated, or the header is
	// repeated).
	UserHeader, GroupsHeader string
	// TrustedProxies are the addresses the proxy connects from: only
	// their requests' headers are believed. Loopback is refused: in a pod
	// `kubectl port-forward` arrives from 127.0.0.1 (and on a machine,
	// every local user does), so a proxy in the dashboard's pod reaches
	// it over a Unix socket (Socket) or with the shared secret (Secret).
	TrustedProxies []netip.Prefix
	// Socket says the dashboard serves on a Unix socket: requests that
	// came over it (SocketConnContext marks them) are the proxy's, since
	// only containers that mount the socket's folder can reach it, and a
	// port-forward reaches TCP ports only.
	Socket bool
	// Secret, when set, makes a request that carries it in SecretHeader
	// the proxy's, wherever it comes from (a proxy that can add a fixed
	// header; nothing else knows the secret).
	Secret []byte
	// ClientCertNames, when set, believes a request made over TLS with a
	// client certificate the server verified (against the CA it was given:
	// mutual TLS with the proxy) whose common name or a DNS name is one of
	// these: a CA that signs other workloads' certificates too (a mesh's,
	// cert-manager's) must not make them the proxy.
	ClientCertNames []string
	// UserPrefix and GroupsPrefix are put before the names the proxy
	// gives (as the API server's --oidc-username-prefix does), so that a
	// login of the proxy's identity provider cannot be a user or group
	// that RBAC means for another authenticator.
	UserPrefix, GroupsPrefix string
	// NewPreview makes the preview of one viewer from their impersonating
	// config, with their own Git cache folder (nil: no diff on the App
	// page).
	NewPreview func(cfg *rest.Config, gitCacheDir string) (PreviewFunc, error)
	// GitCacheDir holds one folder per viewer for their previews' clones:
	// no viewer is served a clone fetched with another's rights.
	GitCacheDir string
	// MaxViewers bounds the viewers whose clients are kept (default 256).
	MaxViewers int
}

// SecretHeader carries ProxyOptions.Secret on the proxy's requests.
const SecretHeader = "X-Plumb-Proxy-Secret"

// socketConn marks the context of a connection made over a Unix socket.
type socketConn struct{}

// SocketConnContext is the http.Server's ConnContext of a dashboard that
// serves on a Unix socket: it marks the requests of connections over it.
func SocketConnContext(ctx context.Context, c net.Conn) context.Context {
	if c.LocalAddr().Network() == "unix" {
		return context.WithValue(ctx, socketConn{}, true)
	}
	return ctx
}

// Proxy is the Identity of a dashboard behind an authenticating proxy
// (oauth2-proxy, for instance): each request acts, by impersonation, for
// the person the proxy's headers name, and those headers are believed
// only on a connection from the proxy itself (an allow-listed source
// address or a verified client certificate): any pod of the cluster could
// otherwise reach the dashboard with forged headers.
type Proxy struct {
	opts ProxyOptions
	self client.Client // the dashboard's own identity, for access reviews

	mu        sync.Mutex
	viewers   map[string]*proxyViewer // by user and groups
	reviews   map[string]review       // by user, groups and namespace ("" for every namespace)
	instances uint64                  // viewers made, naming their folders
}

type proxyViewer struct {
	viewer  *Viewer
	lastUse time.Time
	gitDir  string // their previews' clones
}

type review struct {
	allowed bool
	until   time.Time
}

// reviewTTL is how long an access review's answer is reused; maxReviews
// bounds how many are kept; reviewsAtOnce bounds the reviews one request
// has in flight.
const (
	reviewTTL     = 30 * time.Second
	maxReviews    = 10000
	reviewsAtOnce = 16
	reviewQPS     = 200
)

// loopback are the ranges a trusted proxy may not be in.
var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128"), netip.MustParsePrefix("::ffff:127.0.0.0/104")}

// NewProxy makes a Proxy.
func NewProxy(opts ProxyOptions) (*Proxy, error) {
	if len(opts.TrustedProxies) == 0 && len(opts.ClientCertNames) == 0 && !opts.Socket && len(opts.Secret) == 0 {
		return nil, fmt.Errorf("ui: a proxy identity trusts no proxy: serve on a Unix socket, or give the proxy's shared secret, its addresses or its client certificate's names")
	}
	for _, prefix := range opts.TrustedProxies {
		for _, lo := range loopback {
			if prefix.Overlaps(lo) {
				return nil, fmt.Errorf("ui: trusted proxy %s is loopback, which kubectl port-forward into the dashboard's pod (or any user of its machine) connects from: serve on a Unix socket the proxy shares, or give the proxy a shared secret", prefix)
			}
		}
	}
	if opts.UserHeader == "" {
		opts.UserHeader = "X-Forwarded-User"
	}
	if opts.GroupsHeader == "" {
		opts.GroupsHeader = "X-Forwarded-Groups"
	}
	if opts.MaxViewers == 0 {
		opts.MaxViewers = 256
	}
	// The access reviews of every viewer share one client: its own
	// request budget, larger than client-go's default 5 per second, so
	// that a page of a few hundred namespaces is answered in moments (the
	// API server's priority and fairness still governs it).
	reviewConfig := rest.CopyConfig(opts.Config)
	reviewConfig.QPS, reviewConfig.Burst, reviewConfig.RateLimiter = reviewQPS, 2*reviewQPS, nil
	self, err := client.New(reviewConfig, client.Options{Scheme: opts.Scheme, Mapper: opts.Mapper})
	if err != nil {
		return nil, fmt.Errorf("ui: the dashboard's own client: %w", err)
	}
	return &Proxy{opts: opts, self: self, viewers: map[string]*proxyViewer{}, reviews: map[string]review{}}, nil
}

// fromProxy reports whether r came from the proxy: over the Unix socket,
// with the shared secret, with the proxy's client certificate, or from a
// trusted address.
func (p *Proxy) fromProxy(r *http.Request) bool {
	if socket, _ := r.Context().Value(socketConn{}).(bool); p.opts.Socket && socket {
		return true
	}
	if len(p.opts.Secret) > 0 {
		values := r.Header.Values(SecretHeader)
		if len(values) == 1 && subtle.ConstantTimeCompare([]byte(values[0]), p.opts.Secret) == 1 {
			return true
		}
	}
	if len(p.opts.ClientCertNames) > 0 && r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0 {
		leaf := r.TLS.VerifiedChains[0][0]
		for _, name := range append([]string{leaf.Subject.CommonName}, leaf.DNSNames...) {
			if name != "" && slices.Contains(p.opts.ClientCertNames, name) {
				return true
			}
		}
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	addr = addr.Unmap()
	for _, prefix := range p.opts.TrustedProxies {
		if prefix.Contains(addr) {
			return true
		}
	}
	return false
}

// ViewerOf is the person the proxy's headers name, on a request from the
// proxy; any other request is refused.
func (p *Proxy) ViewerOf(r *http.Request) (*Viewer, error) {
	if !p.fromProxy(r) {
		return nil, &HTTPError{Status: http.StatusForbidden, Message: "this dashboard serves only through its authenticating proxy"}
	}
	user := strings.TrimSpace(r.Header.Get(p.opts.UserHeader))
	if user == "" || len(r.Header.Values(p.opts.UserHeader)) != 1 {
		return nil, &HTTPError{Status: http.StatusUnauthorized, Message: "the proxy named no user (header " + p.opts.UserHeader + ")"}
	}
	var groups []string
	for _, value := range r.Header.Values(p.opts.GroupsHeader) {
		for _, g := range strings.Split(value, ",") {
			if g = strings.TrimSpace(g); g != "" && !slices.Contains(groups, g) {
				groups = append(groups, g)
			}
		}
	}
	slices.Sort(groups)
	user = p.opts.UserPrefix + user
	for i := range groups {
		groups[i] = p.opts.GroupsPrefix + groups[i]
	}
	// Kubernetes reserves the system: prefix for its own users and groups
	// (system:masters is every right): a proxy's identity provider must
	// not be able to name one.
	for _, name := range append([]string{user}, groups...) {
		if strings.HasPrefix(name, "system:") {
			return nil, &HTTPError{Status: http.StatusForbidden, Message: "the proxy named " + strconv.Quote(name) + ": names beginning with system: are Kubernetes' own, and the dashboard does not act as them"}
		}
	}
	return p.viewer(user, groups)
}

// viewer is the cached Viewer of user and groups, made on first use.
func (p *Proxy) viewer(user string, groups []string) (*Viewer, error) {
	id := user + "\x00" + strings.Join(groups, "\x00")
	p.mu.Lock()
	defer p.mu.Unlock()
	if v, ok := p.viewers[id]; ok {
		v.lastUse = time.Now()
		return v.viewer, nil
	}
	cfg := rest.CopyConfig(p.opts.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	c, err := client.New(cfg, client.Options{Scheme: p.opts.Scheme, Mapper: p.opts.Mapper})
	if err != nil {
		return nil, fmt.Errorf("a client acting as %s: %w", user, err)
	}
	sum := sha256.Sum256([]byte(id))
	key := hex.EncodeToString(sum[:12])
	v := &Viewer{Name: user, Groups: groups, Key: key, Client: c}
	dir := ""
	if p.opts.NewPreview != nil {
		// A folder per viewer instance: an evicted viewer's folder is
		// removed in the background, while the same person may be back
		// already with a new instance (and a folder of their own).
		p.instances++
		dir = filepath.Join(p.opts.GitCacheDir, key+"-"+strconv.FormatUint(p.instances, 10))
		if v.Preview, err = p.opts.NewPreview(cfg, dir); err != nil {
			return nil, err
		}
	}
	v.MayRead = func(ctx context.Context, namespaces []string) (map[string]bool, error) {
		return p.mayRead(ctx, user, groups, namespaces)
	}
	if len(p.viewers) >= p.opts.MaxViewers {
		if dir := p.evictOldest(); dir != "" {
			// Not under p.mu: a large folder would stall every request. A
			// preview of theirs under way may still be cloning there: it
			// fails, and their next page view makes the folder again.
			go func() { _ = os.RemoveAll(dir) }()
		}
	}
	p.viewers[id] = &proxyViewer{viewer: v, lastUse: time.Now(), gitDir: dir}
	return v, nil
}

// evictOldest forgets the viewer used least recently and returns their
// previews' folder. p.mu is held.
func (p *Proxy) evictOldest() string {
	var oldest string
	var at time.Time
	for id, v := range p.viewers {
		if oldest == "" || v.lastUse.Before(at) {
			oldest, at = id, v.lastUse
		}
	}
	dir := p.viewers[oldest].gitDir
	delete(p.viewers, oldest)
	return dir
}

// mayRead asks the API server whether user and groups may list the Apps
// of each namespace (SubjectAccessReviews by the dashboard's identity),
// and keeps each answer for reviewTTL. It asks about every namespace at
// once first: one who may list Apps everywhere needs one review, not one
// per namespace; the others' namespaces are reviewed reviewsAtOnce at a
// time.
func (p *Proxy) mayRead(ctx context.Context, user string, groups []string, namespaces []string) (map[string]bool, error) {
	out := make(map[string]bool, len(namespaces))
	everywhere, err := p.review(ctx, user, groups, "")
	if err != nil {
		return out, err
	}
	if everywhere {
		for _, ns := range namespaces {
			out[ns] = true
		}
		return out, nil
	}
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
		slots = make(chan struct{}, reviewsAtOnce)
	)
	for _, ns := range namespaces {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			ok, err := p.review(ctx, user, groups, ns)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && first == nil {
				first = err
			}
			out[ns] = ok
		})
	}
	wg.Wait()
	return out, first
}

// review is whether user and groups may list the Apps of namespace (""
// every namespace), from the cache of answers or a SubjectAccessReview.
func (p *Proxy) review(ctx context.Context, user string, groups []string, namespace string) (bool, error) {
	id := user + "\x00" + strings.Join(groups, "\x00") + "\x00\x00" + namespace
	now := time.Now()
	p.mu.Lock()
	if r, ok := p.reviews[id]; ok && now.Before(r.until) {
		p.mu.Unlock()
		return r.allowed, nil
	}
	p.mu.Unlock()
	// An impersonated request is in system:authenticated too: the review
	// must count what that group may do.
	reviewGroups := append(slices.Clone(groups), "system:authenticated")
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: reviewGroups,
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: namespace, Group: plumbv1.GroupVersion.Group, Resource: "apps", Verb: "list"}}}
	if err := p.self.Create(ctx, sar); err != nil {
		where := namespace
		if where == "" {
			where = "every namespace"
		}
		return false, fmt.Errorf("reviewing whether %s may list the Apps of %s: %w", user, where, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.reviews) > maxReviews {
		for k, r := range p.reviews {
			if !now.Before(r.until) {
				delete(p.reviews, k)
			}
		}
		if len(p.reviews) > maxReviews {
			p.reviews = map[string]review{} // all fresh: ask again
		}
	}
	p.reviews[id] = review{allowed: sar.Status.Allowed, until: now.Add(reviewTTL)}
	return sar.Status.Allowed, nil
}
