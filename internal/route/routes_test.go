package route

import (
	"net/http/httptest"
	"testing"
)

func TestPickRoute(t *testing.T) {
	mk := func(name, prefix string, hosts ...string) *route {
		r := &route{name: name, prefix: prefix}
		for _, h := range hosts {
			r.hosts = append(r.hosts, parseHostPattern(h))
		}
		return r
	}
	routes := []*route{
		mk("root", "/"),
		mk("api", "/api"),
		mk("api-v2", "/api/v2"),
		mk("shop-root", "/", "shop.example.com"),
		mk("wild", "/", "*.example.net"),
		mk("wild-api", "/api", "*.example.net"),
		mk("ip", "/", "192.0.2.1", "2001:db8::1"),
		mk("ws", "/ws/"),
	}
	tests := []struct {
		name, host, path, want string
	}{
		{"any host, root", "a.test", "/", "root"},
		{"longest prefix wins", "a.test", "/api/v2/users", "api-v2"},
		{"prefix by whole segments", "a.test", "/apix", "root"},
		{"prefix itself", "a.test", "/api", "api"},
		{"trailing-slash prefix takes what is below it", "a.test", "/ws/chat", "ws"},
		{"trailing-slash prefix itself", "a.test", "/ws/", "ws"},
		{"trailing-slash prefix not without its slash", "a.test", "/ws", "root"},
		{"exact host beats a longer prefix", "shop.example.com", "/api/x", "shop-root"},
		{"host is case-insensitive", "SHOP.Example.COM", "/", "shop-root"},
		{"wildcard below its suffix", "a.example.net", "/x", "wild"},
		{"wildcard with longer prefix", "a.example.net", "/api/x", "wild-api"},
		{"wildcard not the suffix itself", "example.net", "/x", "root"},
		{"IPv4 host", "192.0.2.1", "/x", "ip"},
		{"IPv6 host", "2001:db8::1", "/x", "ip"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := pick(routes, requestHostOf(tt.host), tt.path)
			if r == nil || r.name != tt.want {
				t.Fatalf("got %v, want %s", r, tt.want)
			}
		})
	}
	if r := pick(routes[3:4], "other.test", "/"); r != nil {
		t.Fatalf("a host-only route took another host: %s", r.name)
	}
}

// requestHostOf runs requestHost on a request for host h with a port.
func requestHostOf(h string) string {
	req := httptest.NewRequest("GET", "/", nil)
	if len(h) > 0 && h[0] != '[' && contains(h, ':') {
		h = "[" + h + "]"
	}
	req.Host = h + ":8080"
	return requestHost(req)
}

func contains(s string, c byte) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return true
		}
	}
	return false
}

func TestRequestHost(t *testing.T) {
	tests := []struct{ in, want string }{
		{"example.com", "example.com"},
		{"Example.COM:443", "example.com"},
		{"example.com.", "example.com"},
		{"[2001:DB8::1]:443", "2001:db8::1"},
		{"[2001:db8::1]", "2001:db8::1"},
		{"localhost", "localhost"},
		{"localhost:", "localhost"},
		{"2001:db8::1", "2001:db8::1"},
		{"a:b:c", "a:b:c"},
		{"", ""},
	}
	for _, tt := range tests {
		req := httptest.NewRequest("GET", "/", nil)
		req.Host = tt.in
		if got := requestHost(req); got != tt.want {
			t.Errorf("requestHost(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	// The usual Host, a lower-case name without a port, costs nothing.
	req := httptest.NewRequest("GET", "/", nil)
	req.Host = "example.com"
	if n := testing.AllocsPerRun(100, func() { requestHost(req) }); n != 0 {
		t.Errorf("requestHost(%q): %v allocations, want 0", req.Host, n)
	}
}

func TestCIDRPermits(t *testing.T) {
	f := cidrPermits(map[string]int{"10.0.0.0/8": 10, "10.1.0.0/16": 20, "192.0.2.7": -1, "2001:db8::/32": 5})
	tests := []struct {
		key  string
		want int
	}{
		{"10.2.3.4", 10},
		{"10.1.3.4", 20},
		{"192.0.2.7", -1},
		{"192.0.2.8", 0},
		{"2001:db8:1:2::/64", 5},
		{"invalid", 0},
	}
	for _, tt := range tests {
		if got := f(tt.key); got != tt.want {
			t.Errorf("permits(%s) = %d, want %d", tt.key, got, tt.want)
		}
	}
	if cidrPermits(nil) != nil {
		t.Error("no overrides should give a nil func")
	}
}
