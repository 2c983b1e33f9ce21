package forward

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/idna"
)

// Default ports of the targets whose authority names none.
const (
	DefaultHTTPPort    = 80
	DefaultConnectPort = 443
)

// maxAuthority bounds the length of an authority accepted for parsing; a
// host name is at most 253 bytes.
const maxAuthority = 512

var (
	// ErrBadTarget is matched by the error of a request target that cannot
	// be proxied: a malformed authority, a scheme other than http, userinfo.
	// The error is a [*TargetError] naming the reason.
	ErrBadTarget = errors.New("forward: bad request target")

	// ErrOriginForm is returned for a request sent to the proxy as if it
	// were the server (GET /path), which a forward proxy does not serve.
	ErrOriginForm = errors.New("forward: origin-form request to a forward proxy")
)

// A TargetError says why a request target was refused. It matches
// [ErrBadTarget].
type TargetError struct {
	Target string // as the client sent it, truncated
	Reason string
}

func (e *TargetError) Error() string {
	return fmt.Sprintf("forward: bad request target %q: %s", e.Target, e.Reason)
}

// Is makes a TargetError match [ErrBadTarget].
func (e *TargetError) Is(target error) bool { return target == ErrBadTarget }

func badTarget(s, reason string) error {
	if len(s) > 80 {
		s = strings.ToValidUTF8(s[:80], "") + "…"
	}
	return &TargetError{Target: s, Reason: reason}
}

// A Target is a normalised request target: a host and a port. Its String
// form is the key of a target_host limit: lower case, no trailing dot,
// internationalised names in their ASCII (punycode) form, the port always
// written, and IP literals in their canonical form ("example.com:443",
// "192.0.2.1:80", "[2001:db8::1]:80"; an IPv4-mapped IPv6 literal is
// written as its IPv4 address). Two spellings of one target give equal
// Targets. The zero Target is invalid.
type Target struct {
	s       string     // host:port
	hostEnd int        // s[:hostEnd] is the host, brackets included for IPv6
	addr    netip.Addr // valid when the host is an IP literal
	port    uint16
}

// IsValid reports whether t is a parsed target rather than the zero Target.
func (t Target) IsValid() bool { return t.port != 0 }

// String returns "host:port".
func (t Target) String() string { return t.s }

// Host returns the host without port or brackets: a lower-case ASCII name
// or the canonical text of an address.
func (t Target) Host() string {
	h := t.s[:t.hostEnd]
	if strings.HasPrefix(h, "[") {
		return h[1 : len(h)-1]
	}
	return h
}

// Port returns the port.
func (t Target) Port() uint16 { return t.port }

// Addr returns the target's address when its host is an IP literal, and
// the invalid Addr when it is a name.
func (t Target) Addr() netip.Addr { return t.addr }

// hostHeader is the Host header for the target: the port is left out when
// it is the scheme's default, as clients write it.
func (t Target) hostHeader(defaultPort uint16) string {
	if t.port == defaultPort {
		return t.s[:t.hostEnd]
	}
	return t.s
}

// ParseTarget parses an authority, "host[:port]", and normalises it (see
// [Target]). A missing or empty port means defaultPort. It refuses, with a
// [*TargetError] saying why: an empty host; a port that is not a number in
// 1..65535; an IPv6 address without brackets, with a zone, or brackets
// around anything else; a name with characters other than letters, digits,
// '-', '_' and '.', an empty label, a label longer than 63 bytes or
// starting or ending with '-', or longer than 253 bytes; an invalid
// internationalised name or punycode label; and a host that looks numeric
// but is not a dotted-quad IPv4 address ("127.1", "0x7f.0.0.1",
// "2130706433"), which resolvers read in different ways.
func ParseTarget(authority string, defaultPort uint16) (Target, error) {
	if authority == "" {
		return Target{}, badTarget(authority, "empty authority")
	}
	if len(authority) > maxAuthority {
		return Target{}, badTarget(authority, "authority too long")
	}
	host, portStr, err := splitAuthority(authority)
	if err != nil {
		return Target{}, badTarget(authority, err.Error())
	}
	port := defaultPort
	if portStr != "" {
		if port, err = parsePort(portStr); err != nil {
			return Target{}, badTarget(authority, err.Error())
		}
	}
	if port == 0 {
		return Target{}, badTarget(authority, "port 0")
	}
	var t Target
	t.port = port
	switch {
	case strings.HasPrefix(host, "["):
		a, err := parseBracketed(host)
		if err != nil {
			return Target{}, badTarget(authority, err.Error())
		}
		t.addr = a
	default:
		if a, err := netip.ParseAddr(host); err == nil && a.Is4() {
			t.addr = a
			break
		}
		name, err := normaliseName(host)
		if err != nil {
			return Target{}, badTarget(authority, err.Error())
		}
		host = name
	}
	if t.addr.IsValid() {
		t.addr = t.addr.Unmap()
		if t.addr.Is4() {
			host = t.addr.String()
		} else {
			host = "[" + t.addr.String() + "]"
		}
	}
	t.hostEnd = len(host)
	t.s = host + ":" + strconv.FormatUint(uint64(port), 10)
	return t, nil
}

// splitAuthority splits "host[:port]" with IPv6 in brackets.
func splitAuthority(s string) (host, port string, err error) {
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", "", errors.New("'[' without ']'")
		}
		host, rest := s[:end+1], s[end+1:]
		switch {
		case rest == "":
			return host, "", nil
		case rest[0] == ':':
			return host, rest[1:], nil
		default:
			return "", "", errors.New("unexpected characters after ']'")
		}
	}
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return s, "", nil
	}
	if strings.IndexByte(s[:i], ':') >= 0 {
		return "", "", errors.New("an IPv6 address must be in brackets")
	}
	if i == 0 {
		return "", "", errors.New("empty host")
	}
	return s[:i], s[i+1:], nil
}

func parsePort(s string) (uint16, error) {
	if len(s) > 5 {
		return 0, errors.New("port out of range 1..65535")
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("port %q is not a number", s)
		}
		n = n*10 + int(c-'0')
	}
	if n < 1 || n > 65535 {
		return 0, errors.New("port out of range 1..65535")
	}
	return uint16(n), nil
}

func parseBracketed(host string) (netip.Addr, error) {
	inner := host[1 : len(host)-1]
	if strings.IndexByte(inner, '%') >= 0 {
		return netip.Addr{}, errors.New("an IPv6 zone has no meaning at a proxy")
	}
	a, err := netip.ParseAddr(inner)
	if err != nil || !a.Is6() {
		return netip.Addr{}, errors.New("brackets hold no IPv6 address")
	}
	return a, nil
}

// normaliseName returns the lower-case ASCII form of a host name without
// its trailing dot, or why it is not a host name.
func normaliseName(host string) (string, error) {
	if !isASCII(host) {
		if !utf8.ValidString(host) {
			return "", errors.New("host is not valid UTF-8")
		}
		ascii, err := idna.Lookup.ToASCII(host)
		if err != nil {
			return "", fmt.Errorf("not a valid internationalised domain name: %w", err)
		}
		host = ascii
	}
	host = strings.TrimSuffix(lowerASCII(host), ".")
	if host == "" {
		return "", errors.New("empty host")
	}
	if len(host) > 253 {
		return "", errors.New("host name longer than 253 bytes")
	}
	last := ""
	for label := range strings.SplitSeq(host, ".") {
		if err := checkLabel(label); err != nil {
			return "", err
		}
		last = label
	}
	if looksNumeric(last) {
		return "", errors.New("numeric host that is not a dotted-quad IPv4 address")
	}
	return host, nil
}

func checkLabel(label string) error {
	switch {
	case label == "":
		return errors.New("empty label in host name")
	case len(label) > 63:
		return errors.New("label longer than 63 bytes in host name")
	case label[0] == '-' || label[len(label)-1] == '-':
		return fmt.Errorf("label %q starts or ends with '-'", label)
	}
	for i := 0; i < len(label); i++ {
		c := label[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("character %q not allowed in a host name", c)
		}
	}
	if strings.HasPrefix(label, "xn--") {
		if _, err := idna.Lookup.ToUnicode(label); err != nil {
			return fmt.Errorf("invalid punycode label %q: %w", label, err)
		}
	}
	return nil
}

// looksNumeric reports whether the last label of a name would make some
// resolver read the whole name as an IPv4 address: all digits, or a 0x
// hexadecimal number (WHATWG URL, inet_aton).
func looksNumeric(last string) bool {
	if strings.HasPrefix(last, "0x") {
		return true
	}
	return strings.Trim(last, "0123456789") == ""
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

func lowerASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; 'A' <= c && c <= 'Z' {
			return strings.ToLower(s) // s is ASCII here
		}
	}
	return s
}

// TargetOf returns the target of a forward-proxy request:
//
//   - CONNECT host:port (HTTP/1.1 authority-form, or HTTP/2's
//     :authority): the authority, default port 443;
//   - an absolute-form HTTP/1.x request (GET http://host/path): the URL's
//     authority, default port 80.
//
// It returns [ErrOriginForm] for a request in origin-form (GET /path), and
// a [*TargetError] (matching [ErrBadTarget]) for a CONNECT without an
// authority, an extended CONNECT (RFC 8441), a URL scheme other than http
// (https goes through CONNECT), userinfo in the URL, a malformed authority,
// and a non-CONNECT HTTP/2 request (whose :scheme net/http does not pass
// on, so the proxy could not tell http from https).
func TargetOf(r *http.Request) (Target, error) {
	if r.Method == http.MethodConnect {
		if p := r.Header.Get(":protocol"); p != "" {
			return Target{}, badTarget(r.URL.Host, "extended CONNECT (:protocol "+p+") is not proxied")
		}
		if r.URL.Host == "" {
			return Target{}, badTarget(r.RequestURI, "CONNECT needs an authority-form target, host:port")
		}
		return ParseTarget(r.URL.Host, DefaultConnectPort)
	}
	if r.ProtoMajor >= 2 {
		return Target{}, badTarget(r.Host, "over HTTP/2 only CONNECT is proxied; send http:// requests over HTTP/1.1")
	}
	if r.URL.Scheme == "" && r.URL.Host == "" {
		return Target{}, ErrOriginForm
	}
	switch {
	case !strings.EqualFold(r.URL.Scheme, "http"):
		if strings.EqualFold(r.URL.Scheme, "https") {
			return Target{}, badTarget(r.URL.Scheme+"://"+r.URL.Host, "https targets go through CONNECT")
		}
		return Target{}, badTarget(r.URL.Scheme+"://"+r.URL.Host, "only http:// targets are proxied")
	case r.URL.User != nil:
		return Target{}, badTarget("http://"+r.URL.Host, "userinfo in the request target is not allowed")
	case r.URL.Host == "":
		return Target{}, badTarget(r.RequestURI, "no host in the URL")
	}
	return ParseTarget(r.URL.Host, DefaultHTTPPort)
}
