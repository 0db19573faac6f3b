package notify

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
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
// address): AWS's IPv6 fd00:ec2::254, Google's fd20:ce::254, Alibaba's
// 100.100.100.200 and Azure's wire server 168.63.129.16; 169.254.169.254
// in the IPv6 forms that carry it (translated and compatible, besides the
// mapped and NAT64 forms isBlocked sees through); loopback (the
// controller's own metrics, health and profile ports); and the unspecified
// addresses. Private ranges stay open: an in-cluster Alertmanager or
// webhook lives there.
func DefaultBlockedPrefixes() []netip.Prefix {
	var out []netip.Prefix
	for _, p := range []string{"169.254.0.0/16", "fe80::/10", "fd00:ec2::254/128", "fd20:ce::254/128",
		"100.100.100.200/32", "168.63.129.16/32", "::ffff:0:a9fe:a9fe/128", "::a9fe:a9fe/128",
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
				return errBlocked // the address is not named: errors reach logs
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

// Prefixes of IPv6 addresses that carry an IPv4 address in their last 4
// bytes: NAT64's well-known prefix (RFC 6052), IPv4-translated addresses
// (RFC 2765) and the deprecated IPv4-compatible ones (RFC 4291).
var (
	nat64      = netip.MustParsePrefix("64:ff9b::/96")
	translated = netip.MustParsePrefix("::ffff:0:0:0/96")
	compatible = netip.MustParsePrefix("::/96")
)

// isBlocked reports whether ip, without its zone and as IPv4 where it is
// an IPv4 address in IPv6 form (mapped, translated, compatible or NAT64),
// is in a blocked range.
func isBlocked(blocked []netip.Prefix, ip netip.Addr) bool {
	ip = ip.WithZone("").Unmap()
	candidates := []netip.Addr{ip}
	if ip.Is6() && (nat64.Contains(ip) || translated.Contains(ip) || compatible.Contains(ip)) {
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

// transportError describes a failed request by what went wrong, naming
// neither the sink's URL nor its host nor its address: a sink's URL may
// carry a token (Slack's do) and comes from a Secret, and errors reach
// logs and the Notification's status. DNS, dial and TLS errors all name
// the host, so none is passed on as it is.
func transportError(err error) error {
	var (
		dnsErr      *net.DNSError
		hostnameErr x509.HostnameError
		authority   x509.UnknownAuthorityError
		invalid     x509.CertificateInvalidError
		verify      *tls.CertificateVerificationError
		record      tls.RecordHeaderError
		alert       tls.AlertError
	)
	switch {
	case errors.Is(err, errBlocked):
		return &permanentError{err: errBlocked}
	case errors.As(err, &dnsErr):
		if dnsErr.IsTimeout {
			return errors.New("resolving the sink's host name timed out")
		}
		return errors.New("could not resolve the sink's host name")
	case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
		return errors.New("the sink did not answer in time")
	case errors.Is(err, syscall.ECONNREFUSED):
		return errors.New("the sink refused the connection")
	case errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return errors.New("the sink closed the connection")
	case errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH):
		return errors.New("the sink's address cannot be reached")
	case errors.As(err, &hostnameErr):
		return errors.New("TLS: the sink's certificate is not valid for its host name")
	case errors.As(err, &authority):
		return errors.New("TLS: the sink's certificate is signed by an unknown authority")
	case errors.As(err, &invalid):
		return errors.New("TLS: the sink's certificate is not valid (expired, or not for serving)")
	case errors.As(err, &verify):
		return errors.New("TLS: the sink's certificate could not be verified")
	case errors.As(err, &record):
		return errors.New("TLS: the sink does not speak TLS")
	case errors.As(err, &alert):
		return fmt.Errorf("TLS: the sink refused the handshake (%s)", alert.Error())
	}
	var u *url.Error
	if errors.As(err, &u) {
		return fmt.Errorf("the %s request to the sink failed", u.Op)
	}
	return errors.New("the request to the sink failed")
}

// isTimeout reports whether err says it is a timeout.
func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}
