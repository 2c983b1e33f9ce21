package route

import (
	"net"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzPick checks that any Host header and path are routed without panic,
// to a route whose host and path prefix do match.
func FuzzPick(f *testing.F) {
	for _, seed := range [][2]string{
		{"example.com", "/"}, {"[2001:db8::1]:443", "/api/x"}, {"A.Example.NET.", "/apix"},
		{"", ""}, {"[", "//"}, {"*.example.net", "/api/"}, {"x:y:z", "/api"},
	} {
		f.Add(seed[0], seed[1])
	}
	routes := []*route{
		{name: "root", prefix: "/"},
		{name: "api", prefix: "/api"},
		{name: "wild", prefix: "/api", hosts: []hostPattern{parseHostPattern("*.example.net")}},
		{name: "exact", prefix: "/", hosts: []hostPattern{parseHostPattern("example.com"), parseHostPattern("2001:db8::1")}},
	}
	f.Fuzz(func(t *testing.T, host, path string) {
		wantHost, _, err := net.SplitHostPort(host)
		if got, ok := hostOfHostPort(host); ok != (err == nil) || (ok && got != wantHost) {
			t.Fatalf("hostOfHostPort(%q) = %q, %v; net.SplitHostPort gives %q, %v", host, got, ok, wantHost, err)
		}
		req := httptest.NewRequest("GET", "/", nil)
		req.Host = host
		h := requestHost(req)
		if hasUpper(h) {
			t.Fatalf("requestHost(%q) = %q has upper-case letters", host, h)
		}
		r := pick(routes, h, path)
		if r == nil {
			if strings.HasPrefix(path, "/") {
				t.Fatalf("no route for %q %q despite the catch-all", host, path)
			}
			return
		}
		if r.matchHost(h) == hostNoMatch || !r.matchPath(path) {
			t.Fatalf("route %s picked for %q %q without matching", r.name, host, path)
		}
	})
}
