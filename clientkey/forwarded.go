package clientkey

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// ErrObfuscated reports a Forwarded node that is syntactically valid but
// names no address: "unknown" or an obfuscated identifier such as "_hidden"
// (RFC 7239 §6.2, §6.3). A [Resolver] treats such a hop as a broken chain.
var ErrObfuscated = errors.New(`clientkey: node is "unknown" or obfuscated, not an address`)

var (
	errNoFor        = errors.New("no for= parameter")
	errDuplicateFor = errors.New("more than one for= parameter")
	errPairSyntax   = errors.New("want token=value pairs separated by ';'")
	errQuoted       = errors.New("unterminated or invalid quoted-string")
	errNodeSyntax   = errors.New("want IPv4, [IPv6], \"unknown\" or _obfuscated, with optional :port")
	errPortSyntax   = errors.New("want a port of 1 to 5 digits or an _obfuscated port")
)

// ParseForwardedElement parses one forwarded-element of an RFC 7239
// Forwarded header, the text between two top-level commas, and returns the
// address of its for= parameter (see [ParseForwardedNode]).
//
// The element is a list of name=value pairs separated by ';', with optional
// whitespace around each pair. Names are case-insensitive tokens; a value is
// a token or a quoted-string, whose backslash escapes are decoded. Pairs
// other than for= are checked for syntax and otherwise ignored. The error
// names the element when the syntax is wrong, when for= is missing or given
// twice, and when the node is not an address: it wraps [ErrObfuscated] for
// "unknown" and obfuscated identifiers. Note that an IPv6 node or any node
// with a port must be quoted: for="[2001:db8::1]:4711", for="192.0.2.1:80".
func ParseForwardedElement(s string) (netip.Addr, error) {
	a, err := parseForwardedElement(s)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("clientkey: Forwarded element %q: %w", s, err)
	}
	return a, nil
}

// ParseForwardedNode parses the node of a for= or by= parameter (RFC 7239
// §6), after its quotes have been removed:
//
//	192.0.2.43
//	192.0.2.43:4711
//	[2001:db8:cafe::17]
//	[2001:db8:cafe::17]:4711
//
// A port is 1 to 5 digits or an obfuscated port ("_port"), and is discarded.
// "unknown" (any case) and obfuscated identifiers ("_hidden") give an error
// wrapping [ErrObfuscated]. IPv6 without brackets, IPv4 in brackets, zones
// and host names are syntax errors.
func ParseForwardedNode(s string) (netip.Addr, error) {
	a, err := parseForwardedNode(s)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("clientkey: Forwarded node %q: %w", s, err)
	}
	return a, nil
}

func parseForwardedElement(s string) (netip.Addr, error) {
	var node string
	var haveFor bool
	for rest := s; ; {
		name, value, tail, err := nextPair(rest)
		if err != nil {
			return netip.Addr{}, err
		}
		if strings.EqualFold(name, "for") {
			if haveFor {
				return netip.Addr{}, errDuplicateFor
			}
			node, haveFor = value, true
		}
		if tail == "" {
			break
		}
		rest = tail[1:] // drop the ';'
	}
	if !haveFor {
		return netip.Addr{}, errNoFor
	}
	return parseForwardedNode(unquote(node))
}

// nextPair reads an optional "name=value" pair and the whitespace around it
// from the start of s. tail is "" at the end of s, or starts with the ';'
// that ends the pair. value is returned raw, with its quotes if any. An
// empty pair, as in "for=a;;proto=http", gives an empty name.
func nextPair(s string) (name, value, tail string, err error) {
	s = strings.TrimLeft(s, " \t")
	if s == "" || s[0] == ';' {
		return "", "", s, nil
	}
	n := tokenLen(s)
	if n == 0 || n == len(s) || s[n] != '=' {
		return "", "", "", errPairSyntax
	}
	name, s = s[:n], s[n+1:]
	if s != "" && s[0] == '"' {
		if n = quotedLen(s); n == 0 {
			return "", "", "", errQuoted
		}
	} else if n = tokenLen(s); n == 0 {
		return "", "", "", errPairSyntax
	}
	value, s = s[:n], strings.TrimLeft(s[n:], " \t")
	if s != "" && s[0] != ';' {
		return "", "", "", errPairSyntax
	}
	return name, value, s, nil
}

// unquote returns a token as is and the content of a quoted-string with its
// quoted-pairs decoded. It allocates only when there is a backslash.
func unquote(v string) string {
	if v == "" || v[0] != '"' {
		return v
	}
	v = v[1 : len(v)-1]
	if strings.IndexByte(v, '\\') < 0 {
		return v
	}
	var b strings.Builder
	b.Grow(len(v))
	for i := 0; i < len(v); i++ {
		if v[i] == '\\' {
			i++ // quotedLen guarantees a character follows
		}
		b.WriteByte(v[i])
	}
	return b.String()
}

func parseForwardedNode(s string) (netip.Addr, error) {
	if !strings.HasPrefix(s, "[") && strings.Count(s, ":") > 1 {
		return netip.Addr{}, errNodeSyntax // IPv6 must be in brackets
	}
	name, port := splitNodePort(s)
	if port != "" && !validPort(port) {
		return netip.Addr{}, errPortSyntax
	}
	switch {
	case name == "":
		return netip.Addr{}, errNodeSyntax
	case strings.EqualFold(name, "unknown"), isObfuscated(name):
		return netip.Addr{}, ErrObfuscated
	case name[0] == '[':
		a, err := netip.ParseAddr(name[1 : len(name)-1])
		if err != nil {
			return netip.Addr{}, err
		}
		if !a.Is6() {
			return netip.Addr{}, errNotIPv6
		}
		if a.Zone() != "" {
			return netip.Addr{}, errZone
		}
		return a, nil
	default:
		a, err := netip.ParseAddr(name)
		if err != nil {
			return netip.Addr{}, err
		}
		if !a.Is4() {
			return netip.Addr{}, errNodeSyntax // IPv6 must be in brackets
		}
		return a, nil
	}
}

// splitNodePort splits "name:port" into name and port (without the colon).
// A name in brackets ends at the first ']'. A node with nothing after a
// colon gets a port of ":" so that the port check rejects it.
func splitNodePort(s string) (name, port string) {
	end := 0
	if strings.HasPrefix(s, "[") {
		end = strings.IndexByte(s, ']') + 1
		if end == 0 {
			return "", ""
		}
	}
	i := strings.IndexByte(s[end:], ':')
	if i < 0 {
		return s, ""
	}
	i += end
	if i == len(s)-1 {
		return s[:i], ":"
	}
	return s[:i], s[i+1:]
}

func validPort(p string) bool {
	if isObfuscated(p) {
		return true
	}
	if len(p) > 5 {
		return false
	}
	for i := range len(p) {
		if p[i] < '0' || p[i] > '9' {
			return false
		}
	}
	return p != ""
}

// isObfuscated reports whether s is an obfnode or obfport:
// "_" 1*(ALPHA / DIGIT / "." / "_" / "-").
func isObfuscated(s string) bool {
	if len(s) < 2 || s[0] != '_' {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !isAlnum(c) && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// tokenLen returns the length of the RFC 9110 token at the start of s.
func tokenLen(s string) int {
	for i := range len(s) {
		if !isTchar(s[i]) {
			return i
		}
	}
	return len(s)
}

func isTchar(c byte) bool {
	return isAlnum(c) || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// quotedLen returns the length of the RFC 9110 quoted-string at the start
// of s, quotes included, or 0 if s does not start with a complete one.
func quotedLen(s string) int {
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"':
			return i + 1
		case c == '\\':
			if i+1 == len(s) || !isQuotedPairChar(s[i+1]) {
				return 0
			}
			i++
		case !isQdtext(c):
			return 0
		}
	}
	return 0
}

func isQdtext(c byte) bool {
	return c == '\t' || c == ' ' || c == 0x21 || 0x23 <= c && c <= 0x5b || 0x5d <= c && c <= 0x7e || c >= 0x80
}

func isQuotedPairChar(c byte) bool {
	return c == '\t' || c == ' ' || 0x21 <= c && c <= 0x7e || c >= 0x80
}

// nextForwardedElement returns the text up to the first comma of s that is
// not inside a quoted-string, and the rest after that comma; more is false
// when s held no such comma. An unterminated quoted-string runs to the end
// of s, which makes that element malformed.
func nextForwardedElement(s string) (elem, rest string, more bool) {
	inQuote := false
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			if inQuote {
				i++
			}
		case '"':
			inQuote = !inQuote
		case ',':
			if !inQuote {
				return s[:i], s[i+1:], true
			}
		}
	}
	return s, "", false
}
