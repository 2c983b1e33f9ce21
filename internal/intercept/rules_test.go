package intercept_test

import (
	"errors"
	"github.com/seed-a07d1050/portcullis/internal/proxytest"
	"net/netip"
	"strings"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/forward"
	"github.com/seed-a07d1050/portcullis/internal/intercept"
)

func TestParseRulesRefuses(t *testing.T) {
	for _, tc := range []struct {
		entry, want string
	}{
		{"", "empty rule"},
		{"  ", "empty rule"},
		{"https://example.com", "without a scheme"},
		{"example.com:443", "names no port"},
		{"*", "wildcard"},
		{"a.*.example.com", "wildcard"},
		{"*example.com", "wildcard"},
		{"*.", "not a host name"},
		{"*.192.0.2.1", "not an address"},
		{"10.1.2.3/8", "did you mean 10.0.0.0/8"},
		{"2001:db8::1/32", "did you mean 2001:db8::/32"},
		{"::ffff:10.0.0.0/104", "IPv4"},
		{"10.0.0.0/33", "not a network"},
		{"fe80::1%eth0", "zone"},
		{"[192.0.2.1]", "brackets"},
		{"exa mple.com", "not a host name"},
		{"-bad.example", "not a host name"},
		{"127.1", "not a host name"},
	} {
		_, err := intercept.ParseRules([]string{"ok.example", tc.entry})
		var re *intercept.RuleError
		if !errors.As(err, &re) || !errors.Is(err, intercept.ErrBadRule) {
			t.Errorf("%q: %v, want a RuleError", tc.entry, err)
			continue
		}
		if re.Index != 1 || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v (index %d), want %q", tc.entry, err, re.Index, tc.want)
		}
	}
	// Every bad entry is reported at once.
	_, err := intercept.ParseRules([]string{"", "ok.example", "a:1", "*"})
	if n := strings.Count(err.Error(), "intercept: rule"); n != 3 {
		t.Errorf("%d problems reported, want 3:\n%v", n, err)
	}
}

func TestRulesMatch(t *testing.T) {
	r := intercept.MustParseRules("Example.COM.", "*.pinned.test", "Bücher.example", "10.0.0.0/8", "2001:db8::/32", "192.0.2.7", "[2001:db8:ffff::1]")
	if r.Len() != 7 || !r.HasNetworks() {
		t.Errorf("Len %d, HasNetworks %v", r.Len(), r.HasNetworks())
	}
	for _, tc := range []struct {
		target string
		addrs  []string
		want   bool
	}{
		{"example.com:443", nil, true},
		{"EXAMPLE.com:8443", nil, true},
		{"www.example.com:443", nil, false}, // exact, not a suffix
		{"a.pinned.test:443", nil, true},
		{"a.b.pinned.test:443", nil, true},
		{"pinned.test:443", nil, false}, // *. is subdomains only
		{"xpinned.test:443", nil, false},
		{"xn--bcher-kva.example:443", nil, true},
		{"10.1.2.3:443", nil, true},
		{"[::ffff:10.1.2.3]:443", nil, true},
		{"11.0.0.1:443", nil, false},
		{"[2001:db8::5]:443", nil, true},
		{"192.0.2.7:443", nil, true},
		{"192.0.2.8:443", nil, false},
		{"other.test:443", []string{"10.9.9.9"}, true}, // through its address
		{"other.test:443", []string{"11.9.9.9"}, false},
		{"other.test:443", nil, false},
	} {
		tg, err := forward.ParseTarget(tc.target, 443)
		if err != nil {
			t.Fatal(err)
		}
		var addrs []netip.Addr
		for _, a := range tc.addrs {
			addrs = append(addrs, netip.MustParseAddr(a))
		}
		if got := r.MatchTarget(tg, addrs); got != tc.want {
			t.Errorf("MatchTarget(%s, %v) = %v, want %v", tc.target, tc.addrs, got, tc.want)
		}
	}
	var none *intercept.Rules
	if none.MatchHost("example.com") || none.MatchAddr(netip.MustParseAddr("10.0.0.1")) || none.Len() != 0 || none.HasNetworks() {
		t.Error("a nil Rules matched")
	}
}

// Intercept and Bypass together: Bypass wins, Intercept narrows, and a
// name meets address rules through the resolver.
func TestInterceptDecision(t *testing.T) {
	s := newStack(t, stackOptions{intercept: intercept.Config{
		Intercept: intercept.MustParseRules("*.corp.test", "127.0.0.0/8"),
		Bypass:    intercept.MustParseRules("pinned.corp.test"),
		Resolver:  proxytest.Resolver{Names: map[string][]netip.Addr{"app.corp.test": {netip.MustParseAddr("10.0.0.1")}, "lo.example": {netip.MustParseAddr("127.0.0.9")}}, LoopbackSuffix: ".test"},
	}})
	for target, want := range map[string]bool{
		"app.corp.test:443":    true,
		"pinned.corp.test:443": false,
		"example.com:443":      false,
		"127.0.0.1:443":        true,
		"lo.example:443":       true,  // by its address
		"app.corp.test:25":     false, // the policy refuses the port: the proxy answers it
	} {
		tg, _ := forward.ParseTarget(target, 443)
		if got := s.ic.Intercepts(t.Context(), tg); got != want {
			t.Errorf("Intercepts(%s) = %v, want %v", target, got, want)
		}
	}
}
