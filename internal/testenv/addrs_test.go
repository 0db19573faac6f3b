package testenv

import (
	"net"
	"testing"
)

// TestFreeAddrsAreDistinctAndFree picks many addresses at once: none twice
// (the kernel hands a released port out again, which once gave plumb's
// health and webhook servers the same address in CI), each free to listen
// on once returned.
func TestFreeAddrsAreDistinctAndFree(t *testing.T) {
	const n = 200
	addrs, err := FreeAddrs(n)
	if err != nil {
		t.Fatal(err)
	}
	if len(addrs) != n {
		t.Fatalf("got %d addresses, want %d", len(addrs), n)
	}
	seen := map[string]bool{}
	for _, addr := range addrs {
		if seen[addr] {
			t.Fatalf("%s was given twice", addr)
		}
		seen[addr] = true
	}
	for _, addr := range addrs[:10] {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("listening on %s, which FreeAddrs gave: %v", addr, err)
		}
		l.Close()
	}
}
