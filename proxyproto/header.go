package proxyproto

import (
	"errors"
	"net/netip"
	"slices"
	"strconv"
)

// Sentinel errors of [ReadHeader]. Compare with [errors.Is]: the errors
// returned wrap them with what was wrong.
var (
	// ErrNoHeader means the stream does not start with a PROXY protocol
	// signature. ReadHeader consumed nothing from the reader.
	ErrNoHeader = errors.New("proxyproto: no PROXY protocol header")

	// ErrInvalid means the stream starts with a PROXY protocol signature
	// but what follows is not a valid header.
	ErrInvalid = errors.New("proxyproto: invalid header")

	// ErrTooLong means the header is longer than the bound: a version 1
	// line with no "\r\n" within [MaxV1Length] bytes, or a version 2 block
	// over the caller's limit. It matches [ErrInvalid] under errors.Is.
	ErrTooLong error = tooLong{}
)

type tooLong struct{}

func (tooLong) Error() string        { return "proxyproto: header too long" }
func (tooLong) Is(target error) bool { return target == ErrInvalid }

// Limits of the format.
const (
	// MaxV1Length is the longest version 1 header, "\r\n" included, as
	// the specification fixes it.
	MaxV1Length = 107

	// DefaultMaxV2Length bounds the address-and-TLV block of a version 2
	// header when the caller of [ReadHeader] gives no limit. Addresses
	// take at most 216 bytes (AF_UNIX); the rest is TLVs, which real load
	// balancers keep to a few hundred bytes.
	DefaultMaxV2Length = 4096

	// v2FixedLength is the signature, version/command, family and length.
	v2FixedLength = 16
)

// Command says whether a header relays a client (Proxy) or was sent by the
// proxy on its own behalf, such as a health check (Local). Version 1 has no
// LOCAL: it always reads as Proxy.
type Command uint8

// Commands of the version 2 header, with their wire values.
const (
	Local Command = 0x0
	Proxy Command = 0x1
)

// String returns "LOCAL" or "PROXY", or "Command(n)" for other values.
func (c Command) String() string {
	switch c {
	case Local:
		return "LOCAL"
	case Proxy:
		return "PROXY"
	}
	return "Command(" + strconv.Itoa(int(c)) + ")"
}

// Transport is the transport protocol a header announces.
type Transport uint8

// Transports with their version 2 wire values. Version 1 "TCP4" and "TCP6"
// read as Stream and "UNKNOWN" as TransportUnspec.
const (
	TransportUnspec Transport = 0x0
	Stream          Transport = 0x1 // TCP
	Datagram        Transport = 0x2 // UDP
)

// String returns "UNSPEC", "STREAM" or "DGRAM", or "Transport(n)".
func (t Transport) String() string {
	switch t {
	case TransportUnspec:
		return "UNSPEC"
	case Stream:
		return "STREAM"
	case Datagram:
		return "DGRAM"
	}
	return "Transport(" + strconv.Itoa(int(t)) + ")"
}

// A TLV is one type-length-value extension of a version 2 header. Value
// refers to the header's own memory.
type TLV struct {
	Type  uint8
	Value []byte
}

// Well-known TLV types (specification section 2.2), for callers that look
// for one in [Header.TLVs].
const (
	TLVTypeALPN      uint8 = 0x01
	TLVTypeAuthority uint8 = 0x02
	TLVTypeCRC32C    uint8 = 0x03
	TLVTypeNoop      uint8 = 0x04
	TLVTypeUniqueID  uint8 = 0x05
	TLVTypeSSL       uint8 = 0x20
	TLVTypeNetNS     uint8 = 0x30
)

// Header is a parsed PROXY protocol header. The zero Header is a version 0
// LOCAL header naming no client; it is not a header ReadHeader returns.
type Header struct {
	// Version is 1 (text) or 2 (binary): the version that was read. The
	// encoders ignore it.
	Version int

	// Command is Proxy when the header relays a client and Local when the
	// proxy speaks for itself. Version 1 headers are always Proxy.
	Command Command

	// Transport is the announced transport protocol.
	Transport Transport

	// Source is the client's address and port, and Destination the
	// address and port the client connected to. Both are the zero
	// AddrPort when the header names no client (LOCAL, AF_UNSPEC, AF_UNIX,
	// version 1 UNKNOWN); otherwise both are valid and of one family
	// (an IPv4-mapped IPv6 address counts as IPv6, as it was sent).
	Source, Destination netip.AddrPort

	// TLVs are the version 2 extensions in the order they were sent; nil
	// for version 1 and when there are none.
	TLVs []TLV
}

// HasClient reports whether h names a client: the command is Proxy and
// Source is valid.
func (h Header) HasClient() bool { return h.Command == Proxy && h.Source.IsValid() }

// Equal reports whether h and o are the same header: every field equal,
// TLVs compared by type and value.
func (h Header) Equal(o Header) bool {
	if h.Version != o.Version || h.Command != o.Command || h.Transport != o.Transport ||
		h.Source != o.Source || h.Destination != o.Destination || len(h.TLVs) != len(o.TLVs) {
		return false
	}
	return slices.EqualFunc(h.TLVs, o.TLVs, func(a, b TLV) bool {
		return a.Type == b.Type && string(a.Value) == string(b.Value)
	})
}
