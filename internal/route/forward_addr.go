package route

import (
	"net/netip"

	"github.com/seed-a07d1050/portcullis/internal/config"
)

// countsTargetAddr reports whether a rate or forward limit of the listener
// counts by target_addr, which needs forward.Proxy.ResolveTargets in front
// of the limiters.
func (b *tableBuilder) countsTargetAddr() bool {
	if b.lc.Rate != nil && b.lc.Rate.Key == config.KeyTargetAddr {
		return true
	}
	for i := range b.lc.Forward.Limits {
		if b.lc.Forward.Limits[i].Key == config.KeyTargetAddr {
			return true
		}
	}
	return false
}

// addrLookup turns target_addr overrides, written as addresses or CIDRs,
// into a lookup over forward.ByTargetAddr keys ("192.0.2.7:443"): the
// longest prefix holding the key's address wins, whatever its port. Nil
// when there is no override.
func addrLookup[V any](overrides map[string]V) func(string) (V, bool) {
	lookup := cidrLookup(overrides)
	if lookup == nil {
		return nil
	}
	return func(key string) (V, bool) {
		ap, err := netip.ParseAddrPort(key)
		if err != nil {
			var zero V
			return zero, false
		}
		return lookup(ap.Addr().String())
	}
}

// addrPermits is addrLookup for limits: 0 (the limit's own count) when no
// override holds the key's address.
func addrPermits(overrides map[string]int) func(string) int {
	lookup := addrLookup(overrides)
	if lookup == nil {
		return nil
	}
	return func(key string) int {
		n, _ := lookup(key)
		return n
	}
}
