package notify

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"syscall"
	"time"
)

// DefaultBlockedPrefixes are the addresses no sink may reach by default:
// the link-local ranges and the other addresses where clouds serve
// instance metadata and credentials (a tenant writes a Notification's
// address), loopback (the controller's own metrics, health and profile
// ports), and the unspecified addresses. Private ranges stay open: an
// in-cluster Alertmanager or webhook lives there.
func DefaultBlockedPrefixes() []netip.Prefix {
	var out []netip.Prefix
	for _, p := range []string{"169.254.0.0/16", "fe80::/10", "fd00:ec2::254/128", "100.100.100.200/32",
		"127.0.0.0/8", "::1/128", "0.0.0.0/8", "::/128"} {
		out = append(out, netip.MustParsePrefix(p))
	}
	return out
}

// NewClient is the HTTP client that sinks are reached with: it refuses to
// connect to an address in blocked (checked on the address actually dialled,
// after DNS, so a name cannot smuggle one in), follows no redirect (a
// redirect is the sink's answer, not a new target), and uses no proxy.
func NewClient(blocked []netip.Prefix) *http.Client {
	dialer := &net.Dialer{
		Timeout: 10 * time.Second,
		Control: func(_, address string, _ syscall.RawConn) error {
			host, _, err := net.SplitHostPort(address)
			if err != nil {
				return err
			}
			ip, err := netip.ParseAddr(host)
			if err != nil {
				return err
			}
			if isBlocked(blocked, ip) {
				return fmt.Errorf("%w: %s", errBlocked, ip)
			}
			return nil
		},
	}
	return &http.Client{
		Transport: &http.Transport{
			DialContext:           dialer.DialContext,
			TLSHandshakeTimeout:   10 * time.Second,
			ResponseHeaderTimeout: 10 * time.Second,
			MaxIdleConnsPerHost:   2,
			IdleConnTimeout:       90 * time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// nat64 is the well-known NAT64 prefix (RFC 6052): its addresses carry an
// IPv4 address in their last 4 bytes.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// isBlocked reports whether ip, without its zone and as IPv4 where it is
// an IPv4 address in IPv6 form (mapped, or NAT64), is in a blocked range.
func isBlocked(blocked []netip.Prefix, ip netip.Addr) bool {
	ip = ip.WithZone("").Unmap()
	candidates := []netip.Addr{ip}
	if ip.Is6() && nat64.Contains(ip) {
		b := ip.As16()
		candidates = append(candidates, netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}))
	}
	for _, p := range blocked {
		for _, c := range candidates {
			if p.Contains(c) {
				return true
			}
		}
	}
	return false
}

var errBlocked = errors.New("the sink's address is in a blocked range")

// withoutURL drops the URL from a client error: a sink's URL may carry a
// token (Slack's do), and errors reach logs.
func withoutURL(err error) error {
	var u *url.Error
	if errors.As(err, &u) {
		return fmt.Errorf("%s request: %w", u.Op, u.Err)
	}
	return err
}
