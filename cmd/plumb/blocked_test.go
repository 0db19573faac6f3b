package main

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/plumb-dev/plumb/internal/egress"
)

// TestBlockedRangesAddToTheDefaults: a range given with
// --notification-blocked-cidrs (or --destination-blocked-cidrs) is
// blocked besides the defaults (cloud metadata, loopback), never instead
// of them; only --notification-block-default-cidrs=false drops the
// defaults. The two sets of flags are independent.
func TestBlockedRangesAddToTheDefaults(t *testing.T) {
	metadata := []string{"169.254.169.254", "fd00:ec2::254", "fd20:ce::254", "168.63.129.16", "100.100.100.200",
		"::ffff:0:a9fe:a9fe", "::a9fe:a9fe", "127.0.0.1", "::1"}
	for _, tc := range []struct {
		name        string
		args        []string
		blocked     []string
		open        []string
		wantInvalid bool
	}{
		{"the defaults", nil, metadata, []string{"10.1.2.3", "192.168.1.1"}, false},
		{"a cluster's range added", []string{"--notification-blocked-cidrs=10.0.0.0/8"}, append([]string{"10.1.2.3"}, metadata...), []string{"192.168.1.1"}, false},
		{"two ranges added", []string{"--notification-blocked-cidrs=10.0.0.0/8", "--notification-blocked-cidrs=192.168.0.0/16"},
			append([]string{"10.1.2.3", "192.168.1.1"}, metadata...), []string{"172.16.0.1"}, false},
		{"the defaults switched off", []string{"--notification-block-default-cidrs=false", "--notification-blocked-cidrs=10.0.0.0/8"},
			[]string{"10.1.2.3"}, []string{"169.254.169.254", "127.0.0.1"}, false},
		{"nothing blocked at all", []string{"--notification-block-default-cidrs=false"}, nil, []string{"169.254.169.254", "127.0.0.1", "10.1.2.3"}, false},
		{"a range in IPv4-mapped form", []string{"--notification-blocked-cidrs=::ffff:10.0.0.0/104"}, []string{"10.1.2.3"}, []string{"192.168.1.1"}, false},
		{"not a CIDR", []string{"--notification-blocked-cidrs=10.0.0.0"}, nil, nil, true},
	} {
		for _, set := range []struct {
			prefix    string
			mine      func(controllerFlags) blockedRanges
			theirs    func(controllerFlags) blockedRanges
			theirFlag string
		}{
			{"notification", func(f controllerFlags) blockedRanges { return f.sinks }, func(f controllerFlags) blockedRanges { return f.destinations }, "destination"},
			{"destination", func(f controllerFlags) blockedRanges { return f.destinations }, func(f controllerFlags) blockedRanges { return f.sinks }, "notification"},
		} {
			t.Run(set.prefix+"/"+tc.name, func(t *testing.T) {
				var f controllerFlags
				flags := pflag.NewFlagSet("controller", pflag.ContinueOnError)
				f.register(flags)
				var args []string
				for _, a := range tc.args {
					args = append(args, strings.Replace(a, "--notification-", "--"+set.prefix+"-", 1))
				}
				if err := flags.Parse(args); err != nil {
					t.Fatal(err)
				}
				if theirs, err := set.theirs(f).prefixes(); err != nil || !slices.Equal(theirs, egress.DefaultBlockedPrefixes()) {
					t.Errorf("the %s ranges %v (%v), want the defaults alone", set.theirFlag, theirs, err)
				}
				prefixes, err := set.mine(f).prefixes()
				if tc.wantInvalid {
					if err == nil {
						t.Fatalf("blocked %v, want an error", prefixes)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				contains := func(addr string) bool {
					a := netip.MustParseAddr(addr)
					return slices.ContainsFunc(prefixes, func(p netip.Prefix) bool { return p.Contains(a) })
				}
				for _, addr := range tc.blocked {
					if !contains(addr) {
						t.Errorf("%s is not blocked by %v", addr, prefixes)
					}
				}
				for _, addr := range tc.open {
					if contains(addr) {
						t.Errorf("%s is blocked by %v, want it open", addr, prefixes)
					}
				}
			})
		}
	}
}
