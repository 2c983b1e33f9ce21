package proxyproto

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net/netip"
	"strconv"
)

var (
	v1Prefix    = []byte("PROXY ")
	v2Signature = []byte("\r\n\r\n\x00\r\nQUIT\n")
)

// ReadHeader reads one PROXY protocol header, version 1 or 2, from the start
// of r, and nothing after it: the bytes that follow the header are still in
// r, buffered or not yet read. maxV2 bounds the address-and-TLV block of a
// version 2 header; zero or negative means [DefaultMaxV2Length], and values
// above 65535 (the most the format can say) act as 65535.
//
// ReadHeader reads the version 1 line one byte at a time from r's buffer, so
// it never waits for bytes beyond the header: a client that sends its
// header and then waits for the server to speak first is not stuck. It
// waits for as long as r does; callers bound it with a read deadline.
//
// On success it returns the header. On failure it returns the zero Header
// and an error:
//   - wrapping [ErrNoHeader] when the first bytes are not a signature; r has
//     then been peeked at but nothing was consumed;
//   - wrapping [ErrInvalid] (or [ErrTooLong], which matches ErrInvalid) when
//     a signature is followed by a malformed or oversized header;
//   - wrapping the reader's error (io.EOF when the stream ended before any
//     byte, io.ErrUnexpectedEOF when it ended inside the header, a timeout
//     when a deadline passed). Everything read so far is consumed.
func ReadHeader(r *bufio.Reader, maxV2 int) (Header, error) {
	version, err := detect(r)
	if err != nil {
		return Header{}, err
	}
	var h Header
	if version == 1 {
		h, err = readV1(r)
	} else {
		h, err = readV2(r, v2Limit(maxV2))
	}
	if err != nil {
		return Header{}, err
	}
	return h, nil
}

func v2Limit(maxV2 int) int {
	switch {
	case maxV2 <= 0:
		return DefaultMaxV2Length
	case maxV2 > 0xFFFF:
		return 0xFFFF
	}
	return maxV2
}

// detect peeks at the first bytes and reports the version whose signature
// they carry. It asks for one more byte only while every byte so far
// matches a signature, so a client speaking another protocol is told apart
// after its first differing byte, without waiting for more.
func detect(r *bufio.Reader) (int, error) {
	for n := 1; ; n++ {
		b, err := r.Peek(n)
		if err != nil {
			if n == 1 && err == io.EOF {
				return 0, fmt.Errorf("proxyproto: read header: %w", io.EOF)
			}
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return 0, fmt.Errorf("proxyproto: read header signature: %w", err)
		}
		v1 := bytes.HasPrefix(v1Prefix, b)
		v2 := bytes.HasPrefix(v2Signature, b)
		switch {
		case v1 && n == len(v1Prefix):
			return 1, nil
		case v2 && n == len(v2Signature):
			return 2, nil
		case !v1 && !v2:
			return 0, ErrNoHeader
		}
	}
}

// readV1 reads a version 1 line after detect saw its prefix.
func readV1(r *bufio.Reader) (Header, error) {
	var line [MaxV1Length]byte
	n := 0
	for {
		c, err := r.ReadByte()
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return Header{}, fmt.Errorf("proxyproto: read v1 header: %w", err)
		}
		line[n] = c
		n++
		if c == '\n' {
			break
		}
		if n == MaxV1Length {
			return Header{}, fmt.Errorf("%w: v1 line has no CRLF within %d bytes", ErrTooLong, MaxV1Length)
		}
	}
	return parseV1(line[:n])
}

// parseV1 parses a complete version 1 line, "\r\n" included.
func parseV1(line []byte) (Header, error) {
	body, ok := bytes.CutSuffix(line, []byte("\r\n"))
	if !ok {
		return Header{}, fmt.Errorf("%w: v1 line does not end in CRLF", ErrInvalid)
	}
	body = body[len(v1Prefix):]
	if rest, ok := bytes.CutPrefix(body, []byte("UNKNOWN")); ok && (len(rest) == 0 || rest[0] == ' ') {
		// The specification: for UNKNOWN the rest of the line is ignored.
		return Header{Version: 1, Command: Proxy}, nil
	}
	fields := bytes.Split(body, []byte(" "))
	if len(fields) != 5 {
		return Header{}, fmt.Errorf("%w: v1 line has %d fields after PROXY, want 5", ErrInvalid, len(fields))
	}
	want4 := false
	switch string(fields[0]) {
	case "TCP4":
		want4 = true
	case "TCP6":
	default:
		return Header{}, fmt.Errorf("%w: v1 protocol %q is not TCP4, TCP6 or UNKNOWN", ErrInvalid, fields[0])
	}
	src, err := parseV1Addr(fields[1], want4)
	if err != nil {
		return Header{}, err
	}
	dst, err := parseV1Addr(fields[2], want4)
	if err != nil {
		return Header{}, err
	}
	sport, err := parseV1Port(fields[3])
	if err != nil {
		return Header{}, err
	}
	dport, err := parseV1Port(fields[4])
	if err != nil {
		return Header{}, err
	}
	return Header{
		Version: 1, Command: Proxy, Transport: Stream,
		Source: netip.AddrPortFrom(src, sport), Destination: netip.AddrPortFrom(dst, dport),
	}, nil
}

func parseV1Addr(b []byte, want4 bool) (netip.Addr, error) {
	a, err := netip.ParseAddr(string(b))
	switch {
	case err != nil:
		return netip.Addr{}, fmt.Errorf("%w: v1 address: %w", ErrInvalid, err)
	case a.Zone() != "":
		return netip.Addr{}, fmt.Errorf("%w: v1 address %q has a zone", ErrInvalid, b)
	case want4 && !a.Is4():
		return netip.Addr{}, fmt.Errorf("%w: v1 TCP4 address %q is not IPv4", ErrInvalid, b)
	case !want4 && !a.Is6():
		return netip.Addr{}, fmt.Errorf("%w: v1 TCP6 address %q is not IPv6", ErrInvalid, b)
	}
	return a, nil
}

func parseV1Port(b []byte) (uint16, error) {
	if len(b) == 0 || len(b) > 5 || (b[0] == '0' && len(b) > 1) {
		return 0, fmt.Errorf("%w: v1 port %q", ErrInvalid, b)
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%w: v1 port %q", ErrInvalid, b)
		}
	}
	n, err := strconv.ParseUint(string(b), 10, 16)
	if err != nil {
		return 0, fmt.Errorf("%w: v1 port %q out of range", ErrInvalid, b)
	}
	return uint16(n), nil
}

// Version 2 address families, the high nibble of the family byte.
const (
	familyUnspec = 0x0
	familyInet   = 0x1
	familyInet6  = 0x2
	familyUnix   = 0x3
)

// addrLen is the length of each family's address block.
var addrLen = [...]int{familyUnspec: 0, familyInet: 12, familyInet6: 36, familyUnix: 216}

// readV2 reads a version 2 header after detect saw its signature.
func readV2(r *bufio.Reader, limit int) (Header, error) {
	var fixed [v2FixedLength]byte
	if _, err := io.ReadFull(r, fixed[:]); err != nil {
		return Header{}, fmt.Errorf("proxyproto: read v2 header: %w", unexpected(err))
	}
	verCmd, fam := fixed[12], fixed[13]
	length := int(binary.BigEndian.Uint16(fixed[14:16]))
	if verCmd>>4 != 2 {
		return Header{}, fmt.Errorf("%w: v2 version nibble %d, want 2", ErrInvalid, verCmd>>4)
	}
	cmd := Command(verCmd & 0x0F)
	if cmd != Local && cmd != Proxy {
		return Header{}, fmt.Errorf("%w: v2 command %d", ErrInvalid, cmd)
	}
	family, transport := int(fam>>4), Transport(fam&0x0F)
	if family > familyUnix || transport > Datagram {
		return Header{}, fmt.Errorf("%w: v2 family/transport byte 0x%02x", ErrInvalid, fam)
	}
	if length > limit {
		return Header{}, fmt.Errorf("%w: v2 block of %d bytes, limit %d", ErrTooLong, length, limit)
	}
	block := make([]byte, length)
	if _, err := io.ReadFull(r, block); err != nil {
		return Header{}, fmt.Errorf("proxyproto: read v2 block: %w", unexpected(err))
	}
	return parseV2Block(cmd, family, transport, block)
}

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// parseV2Block parses the address block and TLVs that follow the fixed
// part of a version 2 header.
func parseV2Block(cmd Command, family int, transport Transport, block []byte) (Header, error) {
	h := Header{Version: 2, Command: cmd, Transport: transport}
	n := addrLen[family]
	if cmd == Local {
		// LOCAL: the receiver uses the real endpoints and ignores the
		// address block, whatever it announces; a block too short for its
		// family is still a malformed header.
		n = min(n, len(block))
	}
	if len(block) < n {
		return Header{}, fmt.Errorf("%w: v2 block of %d bytes is too short for its family (%d)", ErrInvalid, len(block), n)
	}
	if cmd == Proxy {
		h.Source, h.Destination = v2Addrs(family, block)
	}
	tlvs, err := parseTLVs(block[n:])
	if err != nil {
		return Header{}, err
	}
	h.TLVs = tlvs
	return h, nil
}

func v2Addrs(family int, b []byte) (src, dst netip.AddrPort) {
	switch family {
	case familyInet:
		s := netip.AddrFrom4([4]byte(b[0:4]))
		d := netip.AddrFrom4([4]byte(b[4:8]))
		return netip.AddrPortFrom(s, binary.BigEndian.Uint16(b[8:])), netip.AddrPortFrom(d, binary.BigEndian.Uint16(b[10:]))
	case familyInet6:
		s := netip.AddrFrom16([16]byte(b[0:16]))
		d := netip.AddrFrom16([16]byte(b[16:32]))
		return netip.AddrPortFrom(s, binary.BigEndian.Uint16(b[32:])), netip.AddrPortFrom(d, binary.BigEndian.Uint16(b[34:]))
	}
	// AF_UNSPEC and AF_UNIX name no IP client.
	return netip.AddrPort{}, netip.AddrPort{}
}

// parseTLVs splits b into TLVs, which must fill it exactly.
func parseTLVs(b []byte) ([]TLV, error) {
	var tlvs []TLV
	for len(b) > 0 {
		if len(b) < 3 {
			return nil, fmt.Errorf("%w: v2 TLV header truncated (%d bytes left)", ErrInvalid, len(b))
		}
		n := int(binary.BigEndian.Uint16(b[1:3]))
		if len(b)-3 < n {
			return nil, fmt.Errorf("%w: v2 TLV 0x%02x of %d bytes overruns the header", ErrInvalid, b[0], n)
		}
		tlvs = append(tlvs, TLV{Type: b[0], Value: b[3 : 3+n : 3+n]})
		b = b[3+n:]
	}
	return tlvs, nil
}
