package ui

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
)

// newTestProxy is a Proxy whose clients are never used (ViewerOf makes
// them without a request).
func newTestProxy(t *testing.T, opts ProxyOptions) *Proxy {
	t.Helper()
	opts.Config = &rest.Config{Host: "https://127.0.0.1:1"}
	opts.Scheme = runtime.NewScheme()
	opts.Mapper = meta.NewDefaultRESTMapper(nil)
	p, err := NewProxy(opts)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func statusOfErr(err error) int {
	var httpErr *HTTPError
	if errors.As(err, &httpErr) {
		return httpErr.Status
	}
	if err != nil {
		return -1
	}
	return http.StatusOK
}

// TestProxyBelievesHeadersOnlyFromItsProxy: the trusted address, or a
// verified client certificate with the proxy's name; one user header;
// groups split on commas and repeated headers; prefixes; no system: names.
func TestProxyBelievesHeadersOnlyFromItsProxy(t *testing.T) {
	p := newTestProxy(t, ProxyOptions{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.5/32")},
		ClientCertNames: []string{"oauth2-proxy.plumb-system.svc"}, UserPrefix: "sso:", GroupsPrefix: "sso:"})
	proxyCert := &x509.Certificate{Subject: pkix.Name{CommonName: "other"}, DNSNames: []string{"oauth2-proxy.plumb-system.svc"}}
	otherCert := &x509.Certificate{Subject: pkix.Name{CommonName: "some-workload"}, DNSNames: []string{"some-workload.team-a.svc"}}
	request := func(remote string, cert *x509.Certificate, headers http.Header) *http.Request {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = remote
		r.Header = headers
		if cert != nil {
			r.TLS = &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{cert}}, PeerCertificates: []*x509.Certificate{cert}}
		}
		return r
	}
	alice := http.Header{"X-Forwarded-User": {"alice"}, "X-Forwarded-Groups": {"dev, ops", "dev", "sre"}}
	for _, tc := range []struct {
		what    string
		r       *http.Request
		want    int
		user    string
		groups  []string
		sameKey string
	}{
		{"the proxy's address", request("10.0.0.5:40000", nil, alice), http.StatusOK, "sso:alice", []string{"sso:dev", "sso:ops", "sso:sre"}, ""},
		{"another address", request("10.0.0.6:40000", nil, alice), http.StatusForbidden, "", nil, ""},
		{"an IPv4-mapped IPv6 form of the proxy's address", request("[::ffff:10.0.0.5]:40000", nil, alice), http.StatusOK, "sso:alice", []string{"sso:dev", "sso:ops", "sso:sre"}, ""},
		{"a certificate with the proxy's name", request("10.9.9.9:1", proxyCert, alice), http.StatusOK, "sso:alice", []string{"sso:dev", "sso:ops", "sso:sre"}, ""},
		{"a certificate of the same CA with another name", request("10.9.9.9:1", otherCert, alice), http.StatusForbidden, "", nil, ""},
		{"no user", request("10.0.0.5:1", nil, http.Header{"X-Forwarded-Groups": {"dev"}}), http.StatusUnauthorized, "", nil, ""},
		{"two user headers", request("10.0.0.5:1", nil, http.Header{"X-Forwarded-User": {"alice", "bob"}}), http.StatusUnauthorized, "", nil, ""},
	} {
		v, err := p.ViewerOf(tc.r)
		if got := statusOfErr(err); got != tc.want {
			t.Errorf("%s: %d (%v), want %d", tc.what, got, err, tc.want)
			continue
		}
		if err == nil && (v.Name != tc.user || !slices.Equal(v.Groups, tc.groups)) {
			t.Errorf("%s: acts as %s %v, want %s %v", tc.what, v.Name, v.Groups, tc.user, tc.groups)
		}
	}

	// Without prefixes, a system: name is refused.
	bare := newTestProxy(t, ProxyOptions{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.5/32")}})
	for _, h := range []http.Header{
		{"X-Forwarded-User": {"system:admin"}},
		{"X-Forwarded-User": {"alice"}, "X-Forwarded-Groups": {"dev,system:masters"}},
	} {
		if _, err := bare.ViewerOf(request("10.0.0.5:1", nil, h)); statusOfErr(err) != http.StatusForbidden {
			t.Errorf("%v: %v, want 403", h, err)
		}
	}
	// Two people get two keys (their tabs never share a stream); one
	// person gets one viewer.
	a1, _ := bare.ViewerOf(request("10.0.0.5:1", nil, http.Header{"X-Forwarded-User": {"alice"}}))
	a2, _ := bare.ViewerOf(request("10.0.0.5:2", nil, http.Header{"X-Forwarded-User": {"alice"}}))
	b, _ := bare.ViewerOf(request("10.0.0.5:3", nil, http.Header{"X-Forwarded-User": {"bob"}}))
	if a1 != a2 || a1.Key == b.Key || a1.Key == "" {
		t.Errorf("viewers alice %p/%p (key %s), bob key %s: want one alice and two keys", a1, a2, a1.Key, b.Key)
	}

	if _, err := NewProxy(ProxyOptions{Config: &rest.Config{}, Scheme: runtime.NewScheme(), Mapper: meta.NewDefaultRESTMapper(nil)}); err == nil {
		t.Error("a proxy identity that trusts no proxy was made")
	}
}

// TestEachViewerPreviewsInTheirOwnFolder: no viewer is served a clone
// fetched with another's rights; an evicted viewer's folder is removed,
// and one who comes back gets a new folder, which that removal cannot
// take away.
func TestEachViewerPreviewsInTheirOwnFolder(t *testing.T) {
	root := t.TempDir()
	var mu sync.Mutex
	var dirs []string
	opts := ProxyOptions{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.5/32")}, GitCacheDir: root, MaxViewers: 2,
		NewPreview: func(_ *rest.Config, dir string) (PreviewFunc, error) {
			// As a preview's first clone does.
			if err := os.MkdirAll(filepath.Join(dir, "repository"), 0o700); err != nil {
				return nil, err
			}
			mu.Lock()
			dirs = append(dirs, dir)
			mu.Unlock()
			return nil, nil
		}}
	p := newTestProxy(t, opts)
	view := func(user string) {
		t.Helper()
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "10.0.0.5:1"
		r.Header.Set("X-Forwarded-User", user)
		if _, err := p.ViewerOf(r); err != nil {
			t.Fatal(err)
		}
	}
	exists := func(dir string) bool { _, err := os.Stat(dir); return err == nil }
	view("alice")
	view("bob")
	view("carol") // alice, the least recent, is evicted
	mu.Lock()
	alice, bob, carol := dirs[0], dirs[1], dirs[2]
	mu.Unlock()
	for _, dir := range []string{alice, bob, carol} {
		if filepath.Dir(dir) != root {
			t.Errorf("preview folder %s is not in the cache folder %s", dir, root)
		}
	}
	if alice == bob || bob == carol || alice == carol {
		t.Errorf("preview folders %v, want one per viewer", []string{alice, bob, carol})
	}
	waitUntil(t, "the evicted viewer's folder to be removed", func() bool { return !exists(alice) })
	if !exists(bob) || !exists(carol) {
		t.Errorf("the kept viewers' folders are gone (%s: %v, %s: %v)", bob, exists(bob), carol, exists(carol))
	}
	if len(p.viewers) != 2 {
		t.Errorf("%d viewers kept, want MaxViewers (2)", len(p.viewers))
	}
	view("alice") // back: bob is evicted, and alice previews in a new folder
	mu.Lock()
	again := dirs[3]
	mu.Unlock()
	if again == alice {
		t.Fatalf("alice came back to her old folder %s, which its removal may still take away", alice)
	}
	waitUntil(t, "bob's folder to be removed", func() bool { return !exists(bob) })
	if !exists(again) || !exists(carol) {
		t.Errorf("alice's new folder (%v) or carol's (%v) is gone", exists(again), exists(carol))
	}
}

// TestTheProxyIsKnownBySocketOrSecretAndNeverByLoopback: a loopback
// address is refused as a trusted proxy (kubectl port-forward into the
// pod comes from there); a request over the Unix socket, or with the
// shared secret, is the proxy's; one without them is not, wherever it
// comes from.
func TestTheProxyIsKnownBySocketOrSecretAndNeverByLoopback(t *testing.T) {
	for _, prefix := range []string{"127.0.0.1/32", "127.0.0.0/8", "::1/128", "0.0.0.0/0", "::ffff:127.0.0.1/128"} {
		_, err := NewProxy(ProxyOptions{Config: &rest.Config{Host: "https://127.0.0.1:1"}, Scheme: runtime.NewScheme(), Mapper: meta.NewDefaultRESTMapper(nil),
			TrustedProxies: []netip.Prefix{netip.MustParsePrefix(prefix)}})
		if err == nil || !strings.Contains(err.Error(), "port-forward") {
			t.Errorf("trusting %s: %v, want a refusal naming port-forward", prefix, err)
		}
	}
	alice := func(remote string, socket bool, secrets ...string) *http.Request {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = remote
		r.Header.Set("X-Forwarded-User", "alice")
		for _, s := range secrets {
			r.Header.Add(SecretHeader, s)
		}
		if socket {
			r = r.WithContext(context.WithValue(r.Context(), socketConn{}, true))
		}
		return r
	}
	bySocket := newTestProxy(t, ProxyOptions{Socket: true})
	bySecret := newTestProxy(t, ProxyOptions{Secret: []byte("the-proxys-secret")})
	for _, tc := range []struct {
		what string
		p    *Proxy
		r    *http.Request
		want int
	}{
		{"over the socket", bySocket, alice("@", true), http.StatusOK},
		{"a port-forward to a TCP port (loopback)", bySocket, alice("127.0.0.1:40000", false), http.StatusForbidden},
		{"the shared secret, from anywhere", bySecret, alice("127.0.0.1:40000", false, "the-proxys-secret"), http.StatusOK},
		{"a port-forward without the secret", bySecret, alice("127.0.0.1:40000", false), http.StatusForbidden},
		{"a wrong secret", bySecret, alice("10.0.0.9:1", false, "guess"), http.StatusForbidden},
		{"the secret twice", bySecret, alice("10.0.0.9:1", false, "the-proxys-secret", "the-proxys-secret"), http.StatusForbidden},
		{"the socket, to a proxy that trusts only its secret", bySecret, alice("@", true), http.StatusForbidden},
	} {
		if _, err := tc.p.ViewerOf(tc.r); statusOfErr(err) != tc.want {
			t.Errorf("%s: %d (%v), want %d", tc.what, statusOfErr(err), err, tc.want)
		}
	}
}

// sarServer answers SubjectAccessReviews as an API server would for
// users allowed to list Apps everywhere (admins) or in some namespaces,
// each after a delay, counting the reviews and how many were in flight at
// once. With a barrier, the first reviews are held until that many are in
// flight (or a few seconds passed): a client that cannot send that many at
// once is caught by the count, not by a clock.
type sarServer struct {
	*httptest.Server
	reviews, inFlight, most atomic.Int32
	barrier                 int32
	reached                 chan struct{}
	reach                   sync.Once
}

func newSARServer(t *testing.T, admins []string, allowed map[string][]string) *sarServer {
	s := &sarServer{reached: make(chan struct{})}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := s.inFlight.Add(1)
		defer s.inFlight.Add(-1)
		for m := s.most.Load(); n > m && !s.most.CompareAndSwap(m, n); m = s.most.Load() {
		}
		s.reviews.Add(1)
		var sar authorizationv1.SubjectAccessReview
		if err := json.NewDecoder(r.Body).Decode(&sar); err != nil || sar.Spec.ResourceAttributes == nil {
			http.Error(w, "bad review", http.StatusBadRequest)
			return
		}
		if b := atomic.LoadInt32(&s.barrier); b > 0 && sar.Spec.ResourceAttributes.Namespace != "" {
			if n >= b {
				s.reach.Do(func() { close(s.reached) })
			}
			select {
			case <-s.reached:
			case <-time.After(3 * time.Second):
			}
		}
		time.Sleep(5 * time.Millisecond) // the API server's time to answer
		ns := sar.Spec.ResourceAttributes.Namespace
		sar.Status.Allowed = slices.Contains(admins, sar.Spec.User) || ns != "" && slices.Contains(allowed[sar.Spec.User], ns)
		sar.APIVersion, sar.Kind = "authorization.k8s.io/v1", "SubjectAccessReview"
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(&sar)
	}))
	t.Cleanup(s.Close)
	return s
}

// TestAccessReviewsOfManyNamespacesAreFew: one who may list Apps in every
// namespace costs one review for 300 namespaces; one who may not gets a
// review per namespace, several at once, never one at a time at
// client-go's default 5 per second; the answers are right either way.
func TestAccessReviewsOfManyNamespacesAreFew(t *testing.T) {
	var namespaces []string
	for i := range 300 {
		namespaces = append(namespaces, fmt.Sprint("team-", i))
	}
	api := newSARServer(t, []string{"admin"}, map[string][]string{"alice": {"team-7", "team-99"}})
	scheme := runtime.NewScheme()
	_ = authorizationv1.AddToScheme(scheme)
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(authorizationv1.SchemeGroupVersion.WithKind("SubjectAccessReview"), meta.RESTScopeRoot)
	// JSON, which the test server reads (a client of the real one sends protobuf).
	config := &rest.Config{Host: api.URL, ContentConfig: rest.ContentConfig{ContentType: "application/json"}}
	p, err := NewProxy(ProxyOptions{Config: config, Scheme: scheme, Mapper: mapper, Socket: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	started := time.Now()
	got, err := p.mayRead(ctx, "admin", nil, namespaces)
	if err != nil {
		t.Fatal(err)
	}
	if n := api.reviews.Load(); n != 1 || len(got) != 300 || !got["team-250"] {
		t.Errorf("an admin: %d reviews and %d namespaces allowed, want 1 review and all 300", n, len(got))
	}
	api.reviews.Store(0)
	atomic.StoreInt32(&api.barrier, reviewsAtOnce)
	got, err = p.mayRead(ctx, "alice", []string{"developers"}, namespaces)
	took := time.Since(started)
	if err != nil {
		t.Fatal(err)
	}
	allowed := 0
	for _, ok := range got {
		if ok {
			allowed++
		}
	}
	if n := api.reviews.Load(); n != 301 || allowed != 2 || !got["team-7"] || !got["team-99"] {
		t.Errorf("alice: %d reviews, %d namespaces allowed, want 301 (every namespace at once, then each) and 2", n, allowed)
	}
	if most := api.most.Load(); most != reviewsAtOnce {
		t.Errorf("%d reviews in flight at most, want %d at once, not one at a time, and no more", most, reviewsAtOnce)
	}
	t.Logf("302 reviews of 300 namespaces for two viewers took %s", took)
	api.reviews.Store(0)
	if _, err := p.mayRead(ctx, "alice", []string{"developers"}, namespaces); err != nil || api.reviews.Load() != 0 {
		t.Errorf("asking again within the review TTL made %d reviews (%v), want none", api.reviews.Load(), err)
	}
}

// BenchmarkAccessReviewsOf300Namespaces measures how long a viewer who may
// read Apps in two of 300 namespaces waits for their answers (no review
// cached), against a server that takes 5 ms per review: plumb's reviews
// beside the baseline of one review at a time (without client-go's
// default limit of 5 a second, which alone would make it a minute).
func BenchmarkAccessReviewsOf300Namespaces(b *testing.B) {
	var namespaces []string
	for i := range 300 {
		namespaces = append(namespaces, fmt.Sprint("team-", i))
	}
	api := newSARServer(&testing.T{}, nil, map[string][]string{"alice": {"team-7", "team-99"}})
	defer api.Close()
	scheme := runtime.NewScheme()
	_ = authorizationv1.AddToScheme(scheme)
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(authorizationv1.SchemeGroupVersion.WithKind("SubjectAccessReview"), meta.RESTScopeRoot)
	config := &rest.Config{Host: api.URL, ContentConfig: rest.ContentConfig{ContentType: "application/json"}}
	proxy := func(b *testing.B) *Proxy {
		p, err := NewProxy(ProxyOptions{Config: config, Scheme: scheme, Mapper: mapper, Socket: true})
		if err != nil {
			b.Fatal(err)
		}
		return p
	}
	b.Run("plumb", func(b *testing.B) {
		for b.Loop() {
			if _, err := proxy(b).mayRead(context.Background(), "alice", nil, namespaces); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("one-at-a-time", func(b *testing.B) {
		for b.Loop() {
			p := proxy(b)
			for _, ns := range namespaces {
				if _, err := p.review(context.Background(), "alice", nil, ns); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
