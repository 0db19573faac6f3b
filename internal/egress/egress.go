// Package egress guards the connections plumb opens to addresses that a
// tenant wrote (a Notification's sink, a destination cluster's API
// server): a dialer that refuses address ranges, checked on the address
// actually dialled, after DNS, so that no host name can smuggle one in.
package egress

import (
	"errors"
	"net"
	"net/netip"
	"syscall"
	"time"
)

// DefaultBlockedPrefixes are the addresses a tenant's target may not be at
// by default: the link-local ranges and the other addresses where clouds
// serve instance metadata and credentials (AWS's IPv6 fd00:ec2::254,
// Google's fd20:ce::254, Alibaba's 100.100.100.200 and Azure's wire
// server 168.63.129.16; 169.254.169.254 in the IPv6 forms that carry it,
// translated and compatible, besides the mapped and NAT64 forms Blocked
// sees through); loopback (the controller's own metrics, health and
// profile ports); and the unspecified addresses. Private ranges stay
// open: in-cluster services and other clusters live there.
func DefaultBlockedPrefixes() []netip.Prefix {
	var out []netip.Prefix
	for _, p := range []string{"169.254.0.0/16", "fe80::/10", "fd00:ec2::254/128", "fd20:ce::254/128",
		"100.100.100.200/32", "168.63.129.16/32", "::ffff:0:a9fe:a9fe/128", "::a9fe:a9fe/128",
		"127.0.0.0/8", "::1/128", "0.0.0.0/8", "::/128"} {
		out = append(out, netip.MustParsePrefix(p))
	}
	return out
}

// ErrBlocked is the error of a dial to a blocked address. It names no
// address: dial errors reach logs and statuses.
var ErrBlocked = errors.New("the address is in a blocked range")

// NewDialer is a dialer that refuses to connect to an address in blocked
// (none when blocked is empty), with ErrBlocked.
func NewDialer(blocked []netip.Prefix, timeout time.Duration) *net.Dialer {
	return &net.Dialer{
		Timeout: timeout,
		Control: func(_, address string, _ syscall.RawConn) error {
			host, _, err := net.SplitHostPort(address)
			if err != nil {
				return err
			}
			ip, err := netip.ParseAddr(host)
			if err != nil {
				return err
			}
			if Blocked(blocked, ip) {
				return ErrBlocked
			}
			return nil
		},
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

// Blocked reports whether ip, without its zone and as IPv4 where it is an
// IPv4 address in IPv6 form (mapped, translated, compatible or NAT64), is
// in a range of blocked.
func Blocked(blocked []netip.Prefix, ip netip.Addr) bool {
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

// ParsePrefixes parses address ranges given as CIDRs (a flag's values); an
// IPv4 range in IPv4-mapped IPv6 form is taken as the IPv4 range, since
// addresses are checked as the IPv4 address they carry.
func ParsePrefixes(values []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(values))
	for _, v := range values {
		p, err := netip.ParsePrefix(v)
		if err != nil {
			return nil, err
		}
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}
