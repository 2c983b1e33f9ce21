package rls

import (
	"strings"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

// match returns the rule of a descriptor in domain, or nil, as the
// reference finds it: level by level, an entry matches the child with
// its key and value, else a child whose value ends in * and prefixes the
// entry's value (in the order written), else the child with its key and
// no value; the rule applies only when the last entry lands on a rule. It
// allocates nothing.
func (c *Config) match(domain string, entries []*rlpb.RateLimitDescriptor_Entry) *Rule {
	n := c.domains[domain]
	if n == nil || len(entries) == 0 {
		return nil
	}
	for i, e := range entries {
		next := n.children[entryKey{key: e.GetKey(), value: e.GetValue(), hasValue: e.GetValue() != ""}]
		if next == nil {
			for _, w := range n.wildcards {
				if w.key == e.GetKey() && strings.HasPrefix(e.GetValue(), w.prefix) {
					next = w.n
					break
				}
			}
		}
		if next == nil {
			next = n.children[entryKey{key: e.GetKey()}]
		}
		if next == nil {
			return nil
		}
		if i == len(entries)-1 {
			return next.rule
		}
		n = next
	}
	return nil
}

// hasDomain reports whether c configures domain.
func (c *Config) hasDomain(domain string) bool { return c.domains[domain] != nil }
