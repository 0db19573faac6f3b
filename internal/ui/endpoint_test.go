package ui

import (
	"strings"
	"testing"
)

// The endpoint refuses, before anything starts, what would serve the
// dashboard to more people than it should, or options that mean nothing.
func TestAnEndpointRefusesWhatWouldServeTooMany(t *testing.T) {
	for _, tc := range []struct {
		endpoint Endpoint
		want     string // "" is valid
	}{
		{Endpoint{Addr: "127.0.0.1:9400"}, ""},
		{Endpoint{Addr: "0.0.0.0:9400"}, "serves every interface"},
		{Endpoint{Addr: ":9400"}, "serves every interface"},
		{Endpoint{Addr: ":9400", Proxy: true, TrustedProxies: []string{"10.0.0.7"}}, ""},
		{Endpoint{Addr: "unix:///run/ui.sock"}, "serves an authenticating proxy"},
		{Endpoint{Addr: "unix://run/ui.sock", Proxy: true}, "serves an authenticating proxy"},
		{Endpoint{Addr: "unix:///run/ui.sock", Proxy: true}, ""},
		{Endpoint{Addr: "127.0.0.1"}, "--addr"},
		{Endpoint{Addr: "127.0.0.1:9400", ProxySecretFile: "/s"}, "--proxy-secret-file needs --proxy"},
		{Endpoint{Addr: "127.0.0.1:9400", TLSCertFile: "c"}, "go together"},
		{Endpoint{Addr: ":9400", Proxy: true, ClientCAFile: "ca", ClientCertNames: []string{"p"}}, "needs --proxy and --tls-cert-file"},
		{Endpoint{Addr: ":9400", Proxy: true, TLSCertFile: "c", TLSKeyFile: "k", ClientCAFile: "ca"}, "--client-cert-name go together"},
		{Endpoint{Addr: ":9400", Proxy: true, TrustedProxies: []string{"proxy.example"}}, "not an address or a CIDR"},
	} {
		err := tc.endpoint.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v", tc.endpoint, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: got %v, want an error saying %q", tc.endpoint, err, tc.want)
		}
	}
}

// A local dashboard answers to its own address's names, and one behind a
// proxy to whatever Host the proxy sends.
func TestAllowedHostsFollowTheListener(t *testing.T) {
	local := Endpoint{Addr: "127.0.0.1:0"}
	listener, err := local.Listen()
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close()
	hosts := local.AllowedHosts(listener)
	if len(hosts) != 4 || !strings.HasPrefix(hosts[0], "127.0.0.1:") || strings.HasSuffix(hosts[0], ":0") || !strings.HasPrefix(hosts[1], "localhost:") {
		t.Errorf("AllowedHosts = %v, want the listener's port on 127.0.0.1, localhost, 127.0.0.1 and ::1", hosts)
	}
	if got := (Endpoint{Addr: ":0", Proxy: true}).AllowedHosts(listener); got != nil {
		t.Errorf("behind a proxy AllowedHosts = %v, want none", got)
	}
}

// ProxyTrust refuses, rather than fails on, a client CA without TLS, even
// when Validate was not asked first.
func TestProxyTrustWantsTLSForAClientCA(t *testing.T) {
	_, _, _, err := Endpoint{Addr: "127.0.0.1:9400", Proxy: true, ClientCAFile: "ca.pem", ClientCertNames: []string{"proxy"}}.ProxyTrust()
	if err == nil || !strings.Contains(err.Error(), "--client-ca-file needs --proxy and --tls-cert-file") {
		t.Fatalf("ProxyTrust = %v, want the refusal of a client CA without TLS", err)
	}
}
