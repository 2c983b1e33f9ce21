package proxyproto_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net/netip"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/seed-a07d1050/portcullis/proxyproto"
)

// v2 builds a version 2 header by hand, independently of AppendV2.
func v2(verCmd, fam byte, block ...byte) []byte {
	b := []byte("\r\n\r\n\x00\r\nQUIT\n")
	b = append(b, verCmd, fam)
	b = binary.BigEndian.AppendUint16(b, uint16(len(block)))
	return append(b, block...)
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

var (
	v4Block = []byte{192, 0, 2, 7, 198, 51, 100, 1, 0x04, 0xD2, 0x01, 0xBB} // 192.0.2.7:1234 -> 198.51.100.1:443
	v6Block = cat(netip.MustParseAddr("2001:db8::7").AsSlice(), netip.MustParseAddr("2001:db8::1").AsSlice(), []byte{0x04, 0xD2, 0x01, 0xBB})
)

func TestReadHeader(t *testing.T) {
	src4, dst4 := netip.MustParseAddrPort("192.0.2.7:1234"), netip.MustParseAddrPort("198.51.100.1:443")
	src6, dst6 := netip.MustParseAddrPort("[2001:db8::7]:1234"), netip.MustParseAddrPort("[2001:db8::1]:443")
	tests := []struct {
		name string
		in   []byte
		want proxyproto.Header
	}{
		{"v1 tcp4", []byte("PROXY TCP4 192.0.2.7 198.51.100.1 1234 443\r\n"),
			proxyproto.Header{Version: 1, Command: proxyproto.Proxy, Transport: proxyproto.Stream, Source: src4, Destination: dst4}},
		{"v1 tcp6", []byte("PROXY TCP6 2001:db8::7 2001:db8::1 1234 443\r\n"),
			proxyproto.Header{Version: 1, Command: proxyproto.Proxy, Transport: proxyproto.Stream, Source: src6, Destination: dst6}},
		{"v1 tcp6 mapped", []byte("PROXY TCP6 ::ffff:192.0.2.7 ::ffff:198.51.100.1 1234 443\r\n"),
			proxyproto.Header{Version: 1, Command: proxyproto.Proxy, Transport: proxyproto.Stream,
				Source: netip.MustParseAddrPort("[::ffff:192.0.2.7]:1234"), Destination: netip.MustParseAddrPort("[::ffff:198.51.100.1]:443")}},
		{"v1 ports 0 and 65535", []byte("PROXY TCP4 192.0.2.7 198.51.100.1 0 65535\r\n"),
			proxyproto.Header{Version: 1, Command: proxyproto.Proxy, Transport: proxyproto.Stream,
				Source: netip.AddrPortFrom(src4.Addr(), 0), Destination: netip.AddrPortFrom(dst4.Addr(), 65535)}},
		{"v1 unknown", []byte("PROXY UNKNOWN\r\n"), proxyproto.Header{Version: 1, Command: proxyproto.Proxy}},
		{"v1 unknown with junk", []byte("PROXY UNKNOWN ffff::1 whatever\r\n"), proxyproto.Header{Version: 1, Command: proxyproto.Proxy}},
		{"v2 proxy tcp4", v2(0x21, 0x11, v4Block...),
			proxyproto.Header{Version: 2, Command: proxyproto.Proxy, Transport: proxyproto.Stream, Source: src4, Destination: dst4}},
		{"v2 proxy udp6", v2(0x21, 0x22, v6Block...),
			proxyproto.Header{Version: 2, Command: proxyproto.Proxy, Transport: proxyproto.Datagram, Source: src6, Destination: dst6}},
		{"v2 local ignores addresses", v2(0x20, 0x11, v4Block...),
			proxyproto.Header{Version: 2, Command: proxyproto.Local, Transport: proxyproto.Stream}},
		{"v2 local unspec empty", v2(0x20, 0x00), proxyproto.Header{Version: 2, Command: proxyproto.Local}},
		{"v2 proxy unspec", v2(0x21, 0x00), proxyproto.Header{Version: 2, Command: proxyproto.Proxy}},
		{"v2 unix names no client", v2(0x21, 0x31, make([]byte, 216)...),
			proxyproto.Header{Version: 2, Command: proxyproto.Proxy, Transport: proxyproto.Stream}},
		{"v2 tlvs", v2(0x21, 0x11, cat(v4Block, []byte{0x02, 0, 3, 'a', '.', 'b', 0x04, 0, 0})...),
			proxyproto.Header{Version: 2, Command: proxyproto.Proxy, Transport: proxyproto.Stream, Source: src4, Destination: dst4,
				TLVs: []proxyproto.TLV{{Type: proxyproto.TLVTypeAuthority, Value: []byte("a.b")}, {Type: proxyproto.TLVTypeNoop, Value: []byte{}}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, mode := range []string{"whole", "one byte at a time"} {
				var r io.Reader = bytes.NewReader(append(tc.in, "app bytes"...))
				if mode != "whole" {
					r = iotest.OneByteReader(r)
				}
				br := bufio.NewReader(r)
				got, err := proxyproto.ReadHeader(br, 0)
				if err != nil {
					t.Fatalf("%s: ReadHeader: %v", mode, err)
				}
				if !got.Equal(tc.want) {
					t.Fatalf("%s: got %+v, want %+v", mode, got, tc.want)
				}
				rest, _ := io.ReadAll(br)
				if string(rest) != "app bytes" {
					t.Fatalf("%s: bytes after the header = %q, want %q", mode, rest, "app bytes")
				}
			}
		})
	}
}

func TestReadHeaderErrors(t *testing.T) {
	long := "PROXY TCP6 " + strings.Repeat("1", 100) + "\r\n"
	tests := []struct {
		name string
		in   []byte
		max  int
		want error
	}{
		{"http request", []byte("GET / HTTP/1.1\r\n"), 0, proxyproto.ErrNoHeader},
		{"POST shares the P", []byte("POST / HTTP/1.1\r\n"), 0, proxyproto.ErrNoHeader},
		{"TLS client hello", []byte{0x16, 0x03, 0x01, 0x00}, 0, proxyproto.ErrNoHeader},
		{"CR but not v2", []byte("\r\n\r\nHELLO"), 0, proxyproto.ErrNoHeader},
		{"empty stream", nil, 0, io.EOF},
		{"eof inside signature", []byte("PROX"), 0, io.ErrUnexpectedEOF},
		{"eof inside v1 line", []byte("PROXY TCP4 1.2.3.4"), 0, io.ErrUnexpectedEOF},
		{"eof inside v2 block", v2(0x21, 0x11, v4Block...)[:20], 0, io.ErrUnexpectedEOF},
		{"v1 too long", []byte(long), 0, proxyproto.ErrTooLong},
		{"v1 too long is invalid", []byte(long), 0, proxyproto.ErrInvalid},
		{"v1 LF only", []byte("PROXY TCP4 192.0.2.7 198.51.100.1 1234 443\n"), 0, proxyproto.ErrInvalid},
		{"v1 bad protocol", []byte("PROXY UDP4 192.0.2.7 198.51.100.1 1234 443\r\n"), 0, proxyproto.ErrInvalid},
		{"v1 UNKNOWNX", []byte("PROXY UNKNOWNX\r\n"), 0, proxyproto.ErrInvalid},
		{"v1 family mismatch", []byte("PROXY TCP4 2001:db8::7 198.51.100.1 1234 443\r\n"), 0, proxyproto.ErrInvalid},
		{"v1 tcp6 with ipv4", []byte("PROXY TCP6 192.0.2.7 198.51.100.1 1234 443\r\n"), 0, proxyproto.ErrInvalid},
		{"v1 zone", []byte("PROXY TCP6 fe80::1%eth0 fe80::2 1234 443\r\n"), 0, proxyproto.ErrInvalid},
		{"v1 double space", []byte("PROXY TCP4  192.0.2.7 198.51.100.1 1234 443\r\n"), 0, proxyproto.ErrInvalid},
		{"v1 port too big", []byte("PROXY TCP4 192.0.2.7 198.51.100.1 65536 443\r\n"), 0, proxyproto.ErrInvalid},
		{"v1 port leading zero", []byte("PROXY TCP4 192.0.2.7 198.51.100.1 01234 443\r\n"), 0, proxyproto.ErrInvalid},
		{"v1 port sign", []byte("PROXY TCP4 192.0.2.7 198.51.100.1 +1234 443\r\n"), 0, proxyproto.ErrInvalid},
		{"v1 ipv4 leading zero", []byte("PROXY TCP4 192.0.2.07 198.51.100.1 1234 443\r\n"), 0, proxyproto.ErrInvalid},
		{"v1 missing field", []byte("PROXY TCP4 192.0.2.7 198.51.100.1 1234\r\n"), 0, proxyproto.ErrInvalid},
		{"v2 version 1", v2(0x11, 0x11, v4Block...), 0, proxyproto.ErrInvalid},
		{"v2 command 2", v2(0x22, 0x11, v4Block...), 0, proxyproto.ErrInvalid},
		{"v2 family 4", v2(0x21, 0x41, v4Block...), 0, proxyproto.ErrInvalid},
		{"v2 transport 3", v2(0x21, 0x13, v4Block...), 0, proxyproto.ErrInvalid},
		{"v2 block short for inet", v2(0x21, 0x11, v4Block[:11]...), 0, proxyproto.ErrInvalid},
		{"v2 block short for inet6", v2(0x21, 0x21, v4Block...), 0, proxyproto.ErrInvalid},
		{"v2 tlv truncated header", v2(0x21, 0x11, cat(v4Block, []byte{0x02, 0})...), 0, proxyproto.ErrInvalid},
		{"v2 tlv overrun", v2(0x21, 0x11, cat(v4Block, []byte{0x02, 0, 9, 'a'})...), 0, proxyproto.ErrInvalid},
		{"v2 over default limit", v2(0x21, 0x00, make([]byte, proxyproto.DefaultMaxV2Length+1)...), 0, proxyproto.ErrTooLong},
		{"v2 over caller limit", v2(0x21, 0x11, cat(v4Block, []byte{0x04, 0, 1, 0})...), 15, proxyproto.ErrTooLong},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			br := bufio.NewReader(bytes.NewReader(tc.in))
			h, err := proxyproto.ReadHeader(br, tc.max)
			if !errors.Is(err, tc.want) {
				t.Fatalf("ReadHeader error = %v, want %v", err, tc.want)
			}
			if !h.Equal(proxyproto.Header{}) {
				t.Fatalf("failed ReadHeader returned %+v, want the zero Header", h)
			}
			if !strings.HasPrefix(err.Error(), "proxyproto: ") {
				t.Fatalf("error %q lacks the package prefix", err)
			}
		})
	}
}

func TestReadHeaderNoHeaderConsumesNothing(t *testing.T) {
	const in = "PUT /x HTTP/1.1\r\n"
	br := bufio.NewReader(iotest.OneByteReader(strings.NewReader(in)))
	if _, err := proxyproto.ReadHeader(br, 0); !errors.Is(err, proxyproto.ErrNoHeader) {
		t.Fatalf("ReadHeader error = %v, want ErrNoHeader", err)
	}
	rest, _ := io.ReadAll(br)
	if string(rest) != in {
		t.Fatalf("after ErrNoHeader the stream reads %q, want %q", rest, in)
	}
}

// A client that sends its header and then waits for the server must not
// leave ReadHeader waiting for more bytes.
func TestReadHeaderDoesNotWaitPastHeader(t *testing.T) {
	for _, in := range [][]byte{
		[]byte("PROXY TCP4 192.0.2.7 198.51.100.1 1234 443\r\n"),
		v2(0x21, 0x11, v4Block...),
	} {
		r := &stallAfter{data: in}
		if _, err := proxyproto.ReadHeader(bufio.NewReader(r), 0); err != nil {
			t.Fatalf("ReadHeader(%q): %v", in, err)
		}
		if r.stalled {
			t.Fatalf("ReadHeader(%q) asked for bytes past the header", in)
		}
	}
}

// stallAfter yields data, then records that it was asked for more (a
// real connection would block there) and fails.
type stallAfter struct {
	data    []byte
	stalled bool
}

func (s *stallAfter) Read(p []byte) (int, error) {
	if len(s.data) == 0 {
		s.stalled = true
		return 0, errors.New("would block")
	}
	n := copy(p, s.data)
	s.data = s.data[n:]
	return n, nil
}
