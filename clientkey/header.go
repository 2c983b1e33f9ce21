package clientkey

import (
	"encoding"
	"fmt"
	"strconv"
	"strings"
)

// Header selects the forwarding header a [Resolver] reads. The zero value is
// [HeaderNone].
type Header int

const (
	// HeaderNone ignores forwarding headers: the peer is always the client.
	HeaderNone Header = iota
	// HeaderXForwardedFor reads X-Forwarded-For, a comma-separated list of
	// addresses, one per hop (see [ParseXForwardedForHop]).
	HeaderXForwardedFor
	// HeaderForwarded reads the RFC 7239 Forwarded header and the for=
	// parameter of each element (see [ParseForwardedElement]).
	HeaderForwarded
)

var (
	_ fmt.Stringer             = Header(0)
	_ encoding.TextMarshaler   = Header(0)
	_ encoding.TextUnmarshaler = (*Header)(nil)
)

var headerNames = [...]string{
	HeaderNone:          "none",
	HeaderXForwardedFor: "x-forwarded-for",
	HeaderForwarded:     "forwarded",
}

// ParseHeader returns the Header named s: "none", "x-forwarded-for" or
// "forwarded", in any case. Any other s, the empty string included, returns
// HeaderNone and an error naming s.
func ParseHeader(s string) (Header, error) {
	for h, name := range headerNames {
		if strings.EqualFold(s, name) {
			return Header(h), nil
		}
	}
	return HeaderNone, fmt.Errorf("clientkey: unknown forwarding header %q (want none, x-forwarded-for or forwarded)", s)
}

// String returns the name [ParseHeader] reads, or "Header(n)" for a value
// that is not one of the constants.
func (h Header) String() string {
	if h >= 0 && int(h) < len(headerNames) {
		return headerNames[h]
	}
	return "Header(" + strconv.Itoa(int(h)) + ")"
}

// MarshalText implements [encoding.TextMarshaler] with the String form. It
// fails for a value that is not one of the constants.
func (h Header) MarshalText() ([]byte, error) {
	if h < 0 || int(h) >= len(headerNames) {
		return nil, fmt.Errorf("clientkey: cannot marshal %v", h)
	}
	return []byte(headerNames[h]), nil
}

// UnmarshalText implements [encoding.TextUnmarshaler] with [ParseHeader]. On
// error *h is left unchanged.
func (h *Header) UnmarshalText(text []byte) error {
	parsed, err := ParseHeader(string(text))
	if err != nil {
		return err
	}
	*h = parsed
	return nil
}

// canonicalName is the header's key in an [net/http.Header], or "" for
// HeaderNone and unknown values.
func (h Header) canonicalName() string {
	switch h {
	case HeaderXForwardedFor:
		return "X-Forwarded-For"
	case HeaderForwarded:
		return "Forwarded"
	}
	return ""
}
