package egress

import (
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"
)

// An address is checked without its IPv6 zone and as the IPv4 address it
// may carry (mapped, translated, compatible or NAT64), so none of those
// forms slips past a range; every cloud's metadata address is blocked.
func TestBlockedRangesSeeThroughIPv6Forms(t *testing.T) {
	blocked := DefaultBlockedPrefixes()
	for _, addr := range []string{"fe80::1%eth0", "::ffff:169.254.169.254", "64:ff9b::a9fe:a9fe", "::ffff:127.0.0.1", "169.254.169.254",
		"::ffff:0:a9fe:a9fe", "::a9fe:a9fe", "::ffff:0:7f00:1", "::7f00:1", "fd00:ec2::254", "fd20:ce::254", "168.63.129.16", "100.100.100.200"} {
		if !Blocked(blocked, netip.MustParseAddr(addr)) {
			t.Errorf("%s is not blocked", addr)
		}
	}
	for _, addr := range []string{"10.0.0.1", "64:ff9b::a00:1", "::ffff:0:a00:1", "2001:db8::1", "168.63.129.17"} {
		if Blocked(blocked, netip.MustParseAddr(addr)) {
			t.Errorf("%s is blocked, want it open (a private or public address)", addr)
		}
	}
}

// The dialer refuses a blocked address before connecting, also when a
// host name resolves to it, and connects to the others.
func TestTheDialerRefusesBlockedAddresses(t *testing.T) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { listener.Close() })
	accepted := make(chan struct{}, 10)
	go func() {
		for {
			conn, err := listener.Accept()
			if err != nil {
				return
			}
			accepted <- struct{}{}
			conn.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(listener.Addr().String())
	blocked := NewDialer([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, 5*time.Second)
	for _, host := range []string{"127.0.0.1", "localhost"} {
		conn, err := blocked.Dial("tcp4", net.JoinHostPort(host, port))
		if err == nil {
			conn.Close()
			t.Fatalf("%s: a dial to a blocked range connected", host)
		}
		if !errors.Is(err, ErrBlocked) {
			t.Errorf("%s: err = %v, want ErrBlocked", host, err)
		}
	}
	open := NewDialer(nil, 5*time.Second)
	conn, err := open.Dial("tcp4", listener.Addr().String())
	if err != nil {
		t.Fatalf("a dial with nothing blocked: %v", err)
	}
	conn.Close()
	<-accepted
	if n := len(accepted); n != 0 {
		t.Errorf("the listener accepted %d connections from blocked dials", n)
	}
}

// A range in IPv4-mapped form is the IPv4 range; a value that is no CIDR
// is an error.
func TestParsePrefixes(t *testing.T) {
	got, err := ParsePrefixes([]string{"::ffff:10.0.0.0/104", "192.168.1.7/16"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.168.0.0/16")}; got[0] != want[0] || got[1] != want[1] {
		t.Errorf("ParsePrefixes = %v, want %v", got, want)
	}
	if _, err := ParsePrefixes([]string{"10.0.0.0"}); err == nil {
		t.Error("10.0.0.0 (no length) parsed, want an error")
	}
}
