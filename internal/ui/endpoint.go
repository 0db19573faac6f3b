package ui

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Endpoint is where the dashboard serves and how it knows its proxy: the
// flags of `plumb ui` (its errors name them) checked in one place. Locally
// it serves one loopback address; with Proxy, behind an authenticating
// proxy known by a Unix socket, a shared secret, its addresses or its
// client certificate.
type Endpoint struct {
	// Addr is host:port, or unix:///ABSOLUTE/PATH (with Proxy only).
	Addr string
	// Proxy serves behind an authenticating proxy (see ProxyOptions).
	Proxy bool
	// TLSCertFile and TLSKeyFile serve HTTPS; ClientCAFile (with Proxy and
	// TLS) verifies the proxy's client certificate, whose name is one of
	// ClientCertNames.
	TLSCertFile, TLSKeyFile, ClientCAFile string
	ClientCertNames                       []string
	// TrustedProxies are addresses or CIDRs the proxy connects from.
	TrustedProxies []string
	// ProxySecretFile holds the secret the proxy sends in SecretHeader.
	ProxySecretFile string
}

// Socket is the path of a Unix socket Addr, and whether it is one.
func (e Endpoint) Socket() (string, bool) {
	if rest, ok := strings.CutPrefix(e.Addr, "unix://"); ok {
		return rest, true
	}
	return strings.CutPrefix(e.Addr, "unix:")
}

// Validate checks the endpoint before anything starts: a socket only for
// a proxy, no local dashboard on every interface, and TLS, client
// certificate and secret options only where they mean something.
func (e Endpoint) Validate() error {
	if socket, ok := e.Socket(); ok {
		if !e.Proxy || !filepath.IsAbs(socket) {
			return fmt.Errorf("--addr %q: a Unix socket (unix:///ABSOLUTE/PATH) serves an authenticating proxy, with --proxy", e.Addr)
		}
	} else {
		host, port, err := net.SplitHostPort(e.Addr)
		if err != nil {
			return fmt.Errorf("--addr %q: %w", e.Addr, err)
		}
		if ip := net.ParseIP(host); !e.Proxy && (host == "" || (ip != nil && ip.IsUnspecified())) {
			return fmt.Errorf("--addr %q serves every interface: the dashboard acts with your rights, so give the one address to serve on (127.0.0.1:%s)", e.Addr, port)
		}
	}
	if e.ProxySecretFile != "" && !e.Proxy {
		return errors.New("--proxy-secret-file needs --proxy: it names the proxy's requests")
	}
	if (e.TLSCertFile == "") != (e.TLSKeyFile == "") {
		return errors.New("--tls-cert-file and --tls-key-file go together")
	}
	if e.ClientCAFile != "" && (!e.Proxy || e.TLSCertFile == "") {
		return errors.New("--client-ca-file needs --proxy and --tls-cert-file: it names the proxy's certificates")
	}
	if (e.ClientCAFile == "") != (len(e.ClientCertNames) == 0) {
		return errors.New("--client-ca-file and --client-cert-name go together: a CA may sign other workloads' certificates too, so the proxy's own name is needed")
	}
	if _, err := e.trustedPrefixes(); err != nil {
		return err
	}
	return nil
}

// ProxyTrust is how the endpoint's proxy is known: its addresses, its
// secret and, in the TLS config, the CA of its client certificate (nil
// without TLS).
func (e Endpoint) ProxyTrust() (trusted []netip.Prefix, secret []byte, tlsConfig *tls.Config, err error) {
	if e.TLSCertFile != "" {
		tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if !e.Proxy {
		return nil, nil, tlsConfig, nil
	}
	if trusted, err = e.trustedPrefixes(); err != nil {
		return nil, nil, nil, err
	}
	if e.ClientCAFile != "" {
		if tlsConfig == nil {
			return nil, nil, nil, errors.New("--client-ca-file needs --proxy and --tls-cert-file: it names the proxy's certificates")
		}
		pem, err := os.ReadFile(e.ClientCAFile)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("--client-ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, nil, nil, fmt.Errorf("--client-ca-file %s holds no PEM certificate", e.ClientCAFile)
		}
		tlsConfig.ClientCAs, tlsConfig.ClientAuth = pool, tls.RequireAndVerifyClientCert
		if len(trusted) > 0 {
			tlsConfig.ClientAuth = tls.VerifyClientCertIfGiven
		}
	}
	if e.ProxySecretFile != "" {
		data, err := os.ReadFile(e.ProxySecretFile)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("--proxy-secret-file: %w", err)
		}
		if secret = []byte(strings.TrimSpace(string(data))); len(secret) < 16 {
			return nil, nil, nil, fmt.Errorf("--proxy-secret-file %s holds %d characters: want a secret of at least 16", e.ProxySecretFile, len(secret))
		}
	}
	return trusted, secret, tlsConfig, nil
}

// trustedPrefixes reads TrustedProxies: CIDRs or single addresses.
func (e Endpoint) trustedPrefixes() ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, v := range e.TrustedProxies {
		if prefix, err := netip.ParsePrefix(v); err == nil {
			out = append(out, prefix.Masked())
			continue
		}
		addr, err := netip.ParseAddr(v)
		if err != nil {
			return nil, fmt.Errorf("--trusted-proxy %q: not an address or a CIDR", v)
		}
		out = append(out, netip.PrefixFrom(addr, addr.BitLen()))
	}
	return out, nil
}

// Listen listens on the endpoint: TCP, or the Unix socket (a stale socket
// file of an earlier run is replaced; the socket is for its owner's group
// only). A local dashboard's TCP address must be loopback.
func (e Endpoint) Listen() (net.Listener, error) {
	socket, onSocket := e.Socket()
	if !onSocket {
		listener, err := net.Listen("tcp", e.Addr)
		if err != nil {
			return nil, fmt.Errorf("listening on %s: %w (pick another with --addr)", e.Addr, err)
		}
		if tcp, ok := listener.Addr().(*net.TCPAddr); !e.Proxy && (!ok || !tcp.IP.IsLoopback()) {
			listener.Close()
			return nil, fmt.Errorf("--addr %s is not a loopback address: plumb ui acts with your rights, so anyone who reaches it would too (serve it on 127.0.0.1, or behind an authenticating proxy with --proxy)", e.Addr)
		}
		return listener, nil
	}
	if info, err := os.Lstat(socket); err == nil && info.Mode()&os.ModeSocket != 0 {
		_ = os.Remove(socket)
	}
	listener, err := net.Listen("unix", socket)
	if err != nil {
		return nil, fmt.Errorf("listening on the Unix socket %s: %w", socket, err)
	}
	if err := os.Chmod(socket, 0o660); err != nil {
		listener.Close()
		return nil, fmt.Errorf("the Unix socket %s: %w", socket, err)
	}
	return listener, nil
}

// AllowedHosts are the Host headers a local dashboard that listens on
// listener answers to (Options.AllowedHosts): its address, and localhost's
// names when that is loopback; none behind a proxy.
func (e Endpoint) AllowedHosts(listener net.Listener) []string {
	if e.Proxy {
		return nil
	}
	host, _, _ := net.SplitHostPort(e.Addr)
	_, port, _ := net.SplitHostPort(listener.Addr().String())
	hosts := []string{net.JoinHostPort(host, port)}
	if ip := net.ParseIP(host); host == "localhost" || (ip != nil && ip.IsLoopback()) {
		hosts = append(hosts, net.JoinHostPort("localhost", port), net.JoinHostPort("127.0.0.1", port), net.JoinHostPort("::1", port))
	}
	return hosts
}

// ProxyKnownBy says how the endpoint knows its proxy's requests, for the
// line plumb ui prints when it starts.
func (e Endpoint) ProxyKnownBy() []string {
	from := slices.Clone(e.TrustedProxies)
	if e.ClientCAFile != "" {
		from = append(from, "client certificates of "+e.ClientCAFile)
	}
	if _, onSocket := e.Socket(); onSocket {
		from = append(from, "the Unix socket")
	}
	if e.ProxySecretFile != "" {
		from = append(from, "requests with the proxy's secret")
	}
	return from
}
