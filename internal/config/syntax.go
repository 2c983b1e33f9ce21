package config

import (
	"errors"
	"net"
	"net/netip"
	"net/url"
	"path"
	"strconv"
	"strings"
)

// This file checks the syntax of the strings the schema holds: addresses, host names,
// URLs, paths, names and header names. Each check returns an error whose text completes
// "field: ...", without the offending value (the caller adds "(got X)").

// checkHostPort checks "host:port" with a numeric port. A listen address may have an empty
// host (every interface) and port 0 (a free port); an address to dial may not.
func checkHostPort(s string, listen bool) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		if strings.Count(s, ":") > 1 && !strings.HasPrefix(s, "[") {
			return errors.New("must be host:port with an IPv6 address in brackets, such as [::1]:8080")
		}
		return errors.New("must be host:port, such as 127.0.0.1:8080")
	}
	n, err := strconv.ParseUint(port, 10, 16)
	switch {
	case err != nil && listen:
		return errors.New("port must be a number from 0 to 65535")
	case err != nil || (n == 0 && !listen):
		return errors.New("port must be a number from 1 to 65535")
	}
	if host == "" {
		if listen {
			return nil
		}
		return errors.New("must name a host, such as 127.0.0.1:6379")
	}
	if strings.HasPrefix(s, "[") {
		if a, err := netip.ParseAddr(host); err != nil || !a.Is6() {
			return errors.New("only an IPv6 address goes in brackets")
		}
		return nil
	}
	if _, err := netip.ParseAddr(host); err == nil || isHostname(host) {
		return nil
	}
	return errors.New("host must be an IP address or a host name")
}

// isHostname reports whether h is a DNS host name: dot-separated labels of letters, digits,
// '-' and '_' (not starting or ending with '-'), at most 63 bytes each and 253 in all,
// whose last label is not all digits (that would be a malformed IPv4 address).
func isHostname(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	labels := strings.Split(h, ".")
	for _, label := range labels {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !isAlnum(c) && c != '-' && c != '_' {
				return false
			}
		}
	}
	return strings.Trim(labels[len(labels)-1], "0123456789") != ""
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// checkHostPattern checks a route host: a host name, "*." and a host name, or an IP address.
func checkHostPattern(h string) error {
	switch {
	case h == "":
		return errors.New("must not be empty")
	case h == "*":
		return errors.New("a lone * is not a host: leave host out to take any host")
	case strings.HasPrefix(h, "["):
		return errors.New("write an IPv6 address without brackets")
	}
	if _, err := netip.ParseAddr(h); err == nil {
		return nil
	}
	if strings.Contains(h, ":") {
		return errors.New("must not include a port")
	}
	rest, _ := strings.CutPrefix(h, "*.")
	if strings.Contains(rest, "*") {
		return errors.New("a wildcard must be the whole first label, as in *.example.com")
	}
	if !isHostname(rest) {
		return errors.New("must be a host name, *. and a host name, or an IP address")
	}
	return nil
}

// checkUpstreamURL checks an HTTP upstream: an absolute http or https URL with a host and
// nothing that the proxy would have to merge into requests (path, query, user).
func checkUpstreamURL(s string) error {
	const want = "must be an absolute http or https URL such as http://127.0.0.1:9000"
	u, err := url.Parse(s)
	if err != nil || u.Scheme == "" {
		return errors.New(want)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return errors.New("scheme must be http or https")
	case u.Opaque != "" || u.Host == "":
		return errors.New("must name a host, as in http://127.0.0.1:9000")
	case u.User != nil:
		return errors.New("must not hold a user or password")
	case u.Path != "" && u.Path != "/":
		return errors.New("must have no path: the request path is forwarded unchanged")
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return errors.New("must have no query or fragment")
	}
	if port := u.Port(); port != "" {
		if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
			return errors.New("port must be a number from 1 to 65535")
		}
	}
	if _, err := netip.ParseAddr(u.Hostname()); err != nil && !isHostname(u.Hostname()) {
		return errors.New("host must be an IP address or a host name")
	}
	return nil
}

// checkPathPrefix checks a route path prefix: absolute, clean, no query or fragment.
func checkPathPrefix(p string) error {
	if !strings.HasPrefix(p, "/") {
		return errors.New(`must start with "/"`)
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c <= ' ' || c == 0x7f || c == '?' || c == '#' {
			return errors.New("must not contain spaces, control characters, '?' or '#'")
		}
	}
	trimmed := strings.TrimSuffix(p, "/")
	if strings.Contains(p, "//") || (trimmed != "" && path.Clean(trimmed) != trimmed) {
		return errors.New(`must be a clean path, without "//", "." or ".." segments`)
	}
	return nil
}

// isName reports whether s is a valid listener or route name: 1 to 64 letters, digits,
// '.', '_' and '-', starting with a letter or digit.
func isName(s string) bool {
	if s == "" || len(s) > 64 || !isAlnum(s[0]) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isAlnum(c) && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

// isHeaderName reports whether s is an HTTP field name (an RFC 9110 token).
func isHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isAlnum(c) && !strings.ContainsRune("!#$%&'*+-.^_`|~", rune(c)) {
			return false
		}
	}
	return true
}
