package proxyproto

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
)

// ErrUnencodable means a Header cannot be written in the asked version.
var ErrUnencodable = errors.New("proxyproto: header cannot be encoded")

// AppendV1 appends h as a version 1 line to b and returns the extended
// buffer. A header that names no client ([Header.HasClient] false, LOCAL
// included) is written "PROXY UNKNOWN\r\n"; otherwise "TCP4" when Source is
// IPv4 and "TCP6" when it is IPv6, whatever h.Transport says, since version
// 1 knows only TCP. TLVs are dropped: version 1 has none.
//
// It fails, returning b unchanged and an error wrapping [ErrUnencodable],
// when Source and Destination are not both valid and of one family, or an
// address carries a zone.
func (h Header) AppendV1(b []byte) ([]byte, error) {
	if !h.HasClient() {
		return append(b, "PROXY UNKNOWN\r\n"...), nil
	}
	if err := h.checkAddrs(); err != nil {
		return b, err
	}
	proto := "TCP6"
	if h.Source.Addr().Is4() {
		proto = "TCP4"
	}
	out := append(b, "PROXY "...)
	out = append(out, proto...)
	out = append(out, ' ')
	out = h.Source.Addr().AppendTo(out)
	out = append(out, ' ')
	out = h.Destination.Addr().AppendTo(out)
	out = append(out, ' ')
	out = strconv.AppendUint(out, uint64(h.Source.Port()), 10)
	out = append(out, ' ')
	out = strconv.AppendUint(out, uint64(h.Destination.Port()), 10)
	return append(out, "\r\n"...), nil
}

// AppendV2 appends h as a version 2 header to b and returns the extended
// buffer. h.Command and h.Transport are written as they are; the family is
// AF_INET for an IPv4 Source, AF_INET6 for an IPv6 one (IPv4-mapped
// included) and AF_UNSPEC, with no address block, when the header names no
// client or is LOCAL. TLVs follow in order.
//
// It fails, returning b unchanged and an error wrapping [ErrUnencodable],
// when Command or Transport is not a defined value, the addresses of a
// header naming a client are not both valid and of one family or carry a
// zone, or the address block and TLVs exceed 65535 bytes (a TLV value over
// 65535 bytes included).
func (h Header) AppendV2(b []byte) ([]byte, error) {
	if h.Command != Local && h.Command != Proxy {
		return b, fmt.Errorf("%w: command %v", ErrUnencodable, h.Command)
	}
	if h.Transport > Datagram {
		return b, fmt.Errorf("%w: transport %v", ErrUnencodable, h.Transport)
	}
	family := familyUnspec
	if h.HasClient() {
		if err := h.checkAddrs(); err != nil {
			return b, err
		}
		family = familyInet6
		if h.Source.Addr().Is4() {
			family = familyInet
		}
	}
	length := addrLen[family]
	for _, t := range h.TLVs {
		if len(t.Value) > 0xFFFF {
			return b, fmt.Errorf("%w: TLV 0x%02x of %d bytes", ErrUnencodable, t.Type, len(t.Value))
		}
		length += 3 + len(t.Value)
	}
	if length > 0xFFFF {
		return b, fmt.Errorf("%w: v2 block of %d bytes", ErrUnencodable, length)
	}
	out := append(b, v2Signature...)
	out = append(out, 0x20|byte(h.Command), byte(family)<<4|byte(h.Transport))
	out = binary.BigEndian.AppendUint16(out, uint16(length))
	out = appendV2Addrs(out, family, h)
	for _, t := range h.TLVs {
		out = append(out, t.Type)
		out = binary.BigEndian.AppendUint16(out, uint16(len(t.Value)))
		out = append(out, t.Value...)
	}
	return out, nil
}

func appendV2Addrs(b []byte, family int, h Header) []byte {
	switch family {
	case familyInet:
		s, d := h.Source.Addr().As4(), h.Destination.Addr().As4()
		b = append(append(b, s[:]...), d[:]...)
	case familyInet6:
		s, d := h.Source.Addr().As16(), h.Destination.Addr().As16()
		b = append(append(b, s[:]...), d[:]...)
	default:
		return b
	}
	b = binary.BigEndian.AppendUint16(b, h.Source.Port())
	return binary.BigEndian.AppendUint16(b, h.Destination.Port())
}

// checkAddrs reports whether the addresses of a header naming a client can
// be written: both valid, of one family, without zone.
func (h Header) checkAddrs() error {
	s, d := h.Source.Addr(), h.Destination.Addr()
	switch {
	case !s.IsValid() || !d.IsValid():
		return fmt.Errorf("%w: source %v and destination %v must both be valid", ErrUnencodable, h.Source, h.Destination)
	case s.Is4() != d.Is4():
		return fmt.Errorf("%w: source %v and destination %v are of different families", ErrUnencodable, s, d)
	case s.Zone() != "" || d.Zone() != "":
		return fmt.Errorf("%w: addresses with a zone", ErrUnencodable)
	}
	return nil
}
