package ui

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"testing"

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
// fetched with another's rights; an evicted viewer's folder goes.
func TestEachViewerPreviewsInTheirOwnFolder(t *testing.T) {
	var dirs []string
	opts := ProxyOptions{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.5/32")}, GitCacheDir: t.TempDir(), MaxViewers: 2,
		NewPreview: func(_ *rest.Config, dir string) (PreviewFunc, error) {
			dirs = append(dirs, dir)
			return nil, nil
		}}
	p := newTestProxy(t, opts)
	for _, user := range []string{"alice", "bob", "carol"} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "10.0.0.5:1"
		r.Header.Set("X-Forwarded-User", user)
		if _, err := p.ViewerOf(r); err != nil {
			t.Fatal(err)
		}
	}
	if len(dirs) != 3 || dirs[0] == dirs[1] || dirs[1] == dirs[2] || dirs[0] == dirs[2] {
		t.Errorf("preview folders %v, want one per viewer", dirs)
	}
	if len(p.viewers) != 2 {
		t.Errorf("%d viewers kept, want MaxViewers (2)", len(p.viewers))
	}
}
