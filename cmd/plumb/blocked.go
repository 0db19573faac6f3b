package main

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/spf13/pflag"

	"github.com/plumb-dev/plumb/internal/egress"
)

// blockedRanges are the flags that name the address ranges a tenant's
// target (a sink, a destination's API server) may not be at: egress's
// defaults, unless switched off, and the ranges given.
type blockedRanges struct {
	flag     string // the ranges' flag, e.g. notification-blocked-cidrs
	extra    []string
	defaults bool
}

// register adds --<prefix>-blocked-cidrs and --<prefix>-block-default-cidrs
// to flags; target says what the ranges keep a tenant from reaching.
func (b *blockedRanges) register(flags *pflag.FlagSet, prefix, target, usage string) {
	b.flag = prefix + "-blocked-cidrs"
	flags.StringSliceVar(&b.extra, b.flag, nil,
		"more address ranges no "+target+" may be at (a tenant writes its address), blocked besides the defaults: "+usage+" (repeatable, comma-separated)")
	flags.BoolVar(&b.defaults, prefix+"-block-default-cidrs", true,
		"block the default ranges for "+target+"s too: "+strings.Join(defaultBlockedCIDRs(), ", ")+
			" (link-local and the other cloud metadata addresses, loopback, the unspecified addresses); false only where a "+target+" must be reached on one of them")
}

// prefixes are the blocked ranges: the defaults (unless switched off) and
// those given. Not nil: nothing is blocked when the defaults are off and
// no range is given.
func (b blockedRanges) prefixes() ([]netip.Prefix, error) {
	trimmed := make([]string, len(b.extra))
	for i, v := range b.extra {
		trimmed[i] = strings.TrimSpace(v)
	}
	extra, err := egress.ParsePrefixes(trimmed)
	if err != nil {
		return nil, fmt.Errorf("--%s: want CIDRs such as 169.254.0.0/16: %w", b.flag, err)
	}
	out := []netip.Prefix{}
	if b.defaults {
		out = append(out, egress.DefaultBlockedPrefixes()...)
	}
	return append(out, extra...), nil
}

// defaultBlockedCIDRs are egress.DefaultBlockedPrefixes as flag values.
func defaultBlockedCIDRs() []string {
	var out []string
	for _, p := range egress.DefaultBlockedPrefixes() {
		out = append(out, p.String())
	}
	return out
}
