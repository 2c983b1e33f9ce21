package clientkey

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// Reasons a hop is rejected. They are static so that a malformed header
// costs the walk no allocation of its own.
var (
	errEmpty       = errors.New("empty")
	errZone        = errors.New("an address in a header has no zone")
	errNotIPv4     = errors.New("not an IPv4 address")
	errNotIPv6     = errors.New("brackets hold an IPv6 address")
	errBadBrackets = errors.New("unbalanced brackets")
)

// ParseXForwardedForHop parses one element of an X-Forwarded-For list, the
// text between two commas; optional whitespace (spaces and tabs) around it
// is ignored. It accepts these forms and returns the address without port:
//
//	192.0.2.1
//	192.0.2.1:8080
//	2001:db8::1
//	[2001:db8::1]
//	[2001:db8::1]:8080
//
// It rejects, with an error naming the element: an empty element, IPv6 with
// a port but without brackets (ambiguous), IPv4 in brackets, a zone
// (fe80::1%eth0 means nothing on another host), a port that is not a decimal
// number up to 65535, host names, "unknown", quoted values and anything
// else. An IPv4-mapped IPv6 address is returned as written; [Keyer] and
// [ProxySet] unmap it.
func ParseXForwardedForHop(s string) (netip.Addr, error) {
	a, err := parseXFFHop(s)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("clientkey: X-Forwarded-For hop %q: %w", s, err)
	}
	return a, nil
}

func parseXFFHop(s string) (netip.Addr, error) {
	s = trimOWS(s)
	var a netip.Addr
	var err error
	switch {
	case s == "":
		return netip.Addr{}, errEmpty
	case s[0] == '[':
		a, err = parseBracketedHop(s)
	case strings.Count(s, ":") == 1:
		a, err = parseIPv4Port(s)
	default:
		// No colon: IPv4. Two or more: IPv6 without port.
		a, err = netip.ParseAddr(s)
	}
	if err != nil {
		return netip.Addr{}, err
	}
	if a.Zone() != "" {
		return netip.Addr{}, errZone
	}
	return a, nil
}

// parseBracketedHop reads "[IPv6]" or "[IPv6]:port".
func parseBracketedHop(s string) (netip.Addr, error) {
	if s[len(s)-1] == ']' {
		a, err := netip.ParseAddr(s[1 : len(s)-1])
		if err == nil && !a.Is6() {
			err = errNotIPv6
		}
		return a, err
	}
	if !strings.Contains(s, "]:") {
		return netip.Addr{}, errBadBrackets
	}
	// ParseAddrPort checks the brackets hold IPv6 and the port fits 16 bits.
	ap, err := netip.ParseAddrPort(s)
	return ap.Addr(), err
}

// parseIPv4Port reads "IPv4:port".
func parseIPv4Port(s string) (netip.Addr, error) {
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		return netip.Addr{}, err
	}
	if !ap.Addr().Is4() {
		return netip.Addr{}, errNotIPv4
	}
	return ap.Addr(), nil
}

// trimOWS removes the optional whitespace (SP and HTAB) that RFC 9110 allows
// around list elements.
func trimOWS(s string) string {
	return strings.Trim(s, " \t")
}
