package proxyproto_test

import (
	"bufio"
	"bytes"
	"errors"
	"net/netip"
	"testing"

	"github.com/seed-a07d1050/portcullis/proxyproto"
)

func TestAppend(t *testing.T) {
	src4, dst4 := netip.MustParseAddrPort("192.0.2.7:1234"), netip.MustParseAddrPort("198.51.100.1:443")
	src6, dst6 := netip.MustParseAddrPort("[2001:db8::7]:1234"), netip.MustParseAddrPort("[2001:db8::1]:443")
	tests := []struct {
		name   string
		h      proxyproto.Header
		v1, v2 []byte
	}{
		{"tcp4", proxyproto.Header{Command: proxyproto.Proxy, Transport: proxyproto.Stream, Source: src4, Destination: dst4},
			[]byte("PROXY TCP4 192.0.2.7 198.51.100.1 1234 443\r\n"), v2(0x21, 0x11, v4Block...)},
		{"tcp6", proxyproto.Header{Command: proxyproto.Proxy, Transport: proxyproto.Stream, Source: src6, Destination: dst6},
			[]byte("PROXY TCP6 2001:db8::7 2001:db8::1 1234 443\r\n"), v2(0x21, 0x21, v6Block...)},
		{"local", proxyproto.Header{Command: proxyproto.Local, Source: src4, Destination: dst4},
			[]byte("PROXY UNKNOWN\r\n"), v2(0x20, 0x00)},
		{"no client", proxyproto.Header{Command: proxyproto.Proxy, Transport: proxyproto.Stream},
			[]byte("PROXY UNKNOWN\r\n"), v2(0x21, 0x01)},
		{"tlv", proxyproto.Header{Command: proxyproto.Proxy, Transport: proxyproto.Stream, Source: src4, Destination: dst4,
			TLVs: []proxyproto.TLV{{Type: 0x02, Value: []byte("a.b")}}},
			[]byte("PROXY TCP4 192.0.2.7 198.51.100.1 1234 443\r\n"), v2(0x21, 0x11, cat(v4Block, []byte{0x02, 0, 3, 'a', '.', 'b'})...)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got1, err := tc.h.AppendV1([]byte("x"))
			if err != nil || !bytes.Equal(got1, append([]byte("x"), tc.v1...)) {
				t.Fatalf("AppendV1 = %q, %v; want %q", got1, err, tc.v1)
			}
			got2, err := tc.h.AppendV2(nil)
			if err != nil || !bytes.Equal(got2, tc.v2) {
				t.Fatalf("AppendV2 = %q, %v; want %q", got2, err, tc.v2)
			}
			// What was written reads back as the header it came from.
			back, err := proxyproto.ReadHeader(bufio.NewReader(bytes.NewReader(got2)), 0)
			want := tc.h
			want.Version = 2
			if tc.h.Command == proxyproto.Local {
				want.Source, want.Destination = netip.AddrPort{}, netip.AddrPort{}
			}
			if err != nil || !back.Equal(want) {
				t.Fatalf("ReadHeader(AppendV2) = %+v, %v; want %+v", back, err, want)
			}
		})
	}
}

func TestAppendErrors(t *testing.T) {
	src4, src6 := netip.MustParseAddrPort("192.0.2.7:1"), netip.MustParseAddrPort("[2001:db8::7]:1")
	zoned := netip.AddrPortFrom(netip.MustParseAddr("fe80::1%eth0"), 1)
	tests := []struct {
		name   string
		h      proxyproto.Header
		onlyV2 bool
	}{
		{"mixed families", proxyproto.Header{Command: proxyproto.Proxy, Source: src4, Destination: src6}, false},
		{"missing destination", proxyproto.Header{Command: proxyproto.Proxy, Source: src4}, false},
		{"zone", proxyproto.Header{Command: proxyproto.Proxy, Source: zoned, Destination: zoned}, false},
		{"bad command", proxyproto.Header{Command: 7}, true},
		{"bad transport", proxyproto.Header{Command: proxyproto.Proxy, Transport: 9}, true},
		{"tlvs over 64 KiB", proxyproto.Header{Command: proxyproto.Local, TLVs: []proxyproto.TLV{
			{Value: make([]byte, 40000)}, {Value: make([]byte, 40000)}}}, true},
		{"tlv value over 64 KiB", proxyproto.Header{Command: proxyproto.Local, TLVs: []proxyproto.TLV{{Value: make([]byte, 70000)}}}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := []byte("keep")
			out, err := tc.h.AppendV2(in)
			if !errors.Is(err, proxyproto.ErrUnencodable) || string(out) != "keep" {
				t.Fatalf("AppendV2 = %q, %v; want %q and ErrUnencodable", out, err, "keep")
			}
			if tc.onlyV2 {
				return
			}
			out, err = tc.h.AppendV1(in)
			if !errors.Is(err, proxyproto.ErrUnencodable) || string(out) != "keep" {
				t.Fatalf("AppendV1 = %q, %v; want %q and ErrUnencodable", out, err, "keep")
			}
		})
	}
}
