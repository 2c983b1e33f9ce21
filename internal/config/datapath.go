package config

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
)

// DataPath is how the daemon serves the HTTP/1.1 requests of a route.
type DataPath string

const (
	// PathEventLoops: the event loops read each request's head, admit it
	// and relay it as bytes, on plain http listeners (Linux).
	PathEventLoops DataPath = "event_loops"
	// PathLean: the same byte path (the lean path), on the listener's
	// goroutines in Go's poller rather than on the event loops: https
	// listeners (after the TLS handshake), upstreams named by host name.
	PathLean DataPath = "lean"
	// PathFull: the full server (net/http's, or internal/http1's) and
	// the handler chain, request by request: what the byte path does not
	// do for the route.
	PathFull DataPath = "full_server"
)

// RoutePath says how one route's requests are served and why.
type RoutePath struct {
	Listener, Route string
	Path            DataPath
	// Why names the setting that keeps the route off the event loops;
	// empty for PathEventLoops.
	Why string
}

// String writes p as one line, as the daemon logs it and check prints it.
func (p RoutePath) String() string {
	s := fmt.Sprintf("listener %s route %s: %s", p.Listener, p.Route, p.Path)
	if p.Why != "" {
		s += " (" + p.Why + ")"
	}
	return s
}

// RoutePaths returns, for every route of every reverse HTTP listener of c
// (effective: Effective's result), how its HTTP/1.1 requests are served on
// the system goos (runtime.GOOS): on the event loops, on the lean path,
// or through the full server, and the setting that decides it. Whatever
// the route's path, some requests always take the full server: HTTP/2
// ones, requests with a body, upgrades, and those the byte path declines
// one by one (docs/daemon.md, "The lean path"), among them, with a
// cluster, a request whose permit only Redis can grant. Listeners that share
// another's routes (routes_from) have no entries of their own, except
// http3 ones.
func (c *Config) RoutePaths(goos string) []RoutePath {
	var out []RoutePath
	advertised := c.advertisedHTTP3()
	for i := range c.Listeners {
		l := &c.Listeners[i]
		if !l.Protocol.IsHTTP() || l.IsForward() {
			continue
		}
		routes := l.Routes
		if l.RoutesFrom != "" {
			if l.Protocol != ProtocolHTTP3 {
				continue
			}
			if src := c.listenerNamed(l.RoutesFrom); src != nil {
				routes = src.Routes
			}
		}
		for j := range routes {
			path, why := routePath(c, l, &routes[j], goos, advertised[l.Name])
			out = append(out, RoutePath{Listener: l.Name, Route: routes[j].Name, Path: path, Why: why})
		}
	}
	return out
}

// routePath decides one route's path: the first setting that takes it
// off the byte path, else the first that keeps it off the event loops.
func routePath(c *Config, l *Listener, r *Route, goos string, advertisesH3 bool) (DataPath, string) {
	switch {
	case l.Protocol == ProtocolHTTP3:
		return PathFull, "HTTP/3: quic-go's server"
	case !l.HTTP1Server.Lean():
		return PathFull, "http1_server is net/http"
	case !unixLike(goos):
		return PathFull, "no byte path on " + goos
	case l.Auth != nil:
		return PathFull, "the listener authenticates (auth)"
	case l.Rate != nil:
		return PathFull, "the listener has a rate"
	case advertisesH3:
		return PathFull, "the listener advertises HTTP/3 (Alt-Svc), which the byte path does not add"
	case r.Rate != nil && c.Cluster != nil:
		return PathFull, "the route's rate counts in the cluster (Redis)"
	case r.Rate != nil && r.Rate.Headers == RateHeadersAlways:
		return PathFull, "the route's rate sends its RateLimit fields with every answer (headers: always)"
	}
	if u := firstUpstreamWith(r.Upstreams, isHTTPS); u != "" {
		return PathFull, "an https upstream, " + u
	}
	if goos != "linux" {
		return PathLean, "no event loops on " + goos
	}
	if u := firstUpstreamWith(r.Upstreams, namedByHost); u != "" {
		return PathLean, "an upstream named by host name, " + u + ": the event loops connect to IP addresses only"
	}
	return PathEventLoops, ""
}

// advertisedHTTP3 returns the names of the listeners whose routes an
// http3 listener shares: they advertise it in Alt-Svc.
func (c *Config) advertisedHTTP3() map[string]bool {
	out := map[string]bool{}
	for i := range c.Listeners {
		if l := &c.Listeners[i]; l.Protocol == ProtocolHTTP3 && l.RoutesFrom != "" {
			out[l.RoutesFrom] = true
		}
	}
	return out
}

func (c *Config) listenerNamed(name string) *Listener {
	for i := range c.Listeners {
		if c.Listeners[i].Name == name {
			return &c.Listeners[i]
		}
	}
	return nil
}

// unixLike reports whether the upstream transport can send a request head
// as bytes on goos (it needs a non-blocking peek at its connections).
func unixLike(goos string) bool {
	switch goos {
	case "windows", "plan9", "js", "wasip1":
		return false
	}
	return true
}

func firstUpstreamWith(upstreams []string, pred func(*url.URL) bool) string {
	for _, raw := range upstreams {
		if u, err := url.Parse(raw); err == nil && pred(u) {
			return raw
		}
	}
	return ""
}

func isHTTPS(u *url.URL) bool { return u.Scheme == "https" }

// namedByHost reports whether u's host is a name rather than an IP
// address (a zoned IPv6 address counts as a name: the loops dial neither).
func namedByHost(u *url.URL) bool {
	host := u.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	ip, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
	return err != nil || ip.Zone() != ""
}
