package proxyproto_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/seed-a07d1050/portcullis/proxyproto"
)

// FuzzReadHeader checks that ReadHeader never panics, never consumes more
// than the header, and that every header it returns is written back by the
// encoder of its version into bytes that read as the same header.
// ci:fuzztime 100000x: it reads what a client or load balancer sends.
func FuzzReadHeader(f *testing.F) {
	f.Add([]byte("PROXY TCP4 192.0.2.7 198.51.100.1 1234 443\r\nGET /"))
	f.Add([]byte("PROXY TCP6 2001:db8::7 2001:db8::1 1234 443\r\n"))
	f.Add([]byte("PROXY UNKNOWN whatever\r\n"))
	f.Add(v2(0x21, 0x11, cat(v4Block, []byte{0x02, 0, 3, 'a', '.', 'b'})...))
	f.Add(v2(0x21, 0x21, v6Block...))
	f.Add(v2(0x20, 0x00))
	f.Add(v2(0x21, 0x31, make([]byte, 216)...))
	f.Fuzz(func(t *testing.T, in []byte) {
		br := bufio.NewReader(bytes.NewReader(in))
		h, err := proxyproto.ReadHeader(br, 512)
		if err != nil {
			if errors.Is(err, proxyproto.ErrNoHeader) {
				if all, _ := io.ReadAll(br); !bytes.Equal(all, in) {
					t.Fatalf("ErrNoHeader after consuming input")
				}
			}
			return
		}
		rest, _ := io.ReadAll(br)
		consumed := in[:len(in)-len(rest)]
		if !bytes.Equal(rest, in[len(consumed):]) {
			t.Fatalf("bytes after the header were altered")
		}
		var enc []byte
		switch h.Version {
		case 1:
			enc, err = h.AppendV1(nil)
		case 2:
			enc, err = h.AppendV2(nil)
		default:
			t.Fatalf("parsed header has version %d", h.Version)
		}
		if err != nil {
			t.Fatalf("parsed header %+v does not encode: %v", h, err)
		}
		if h.Version == 2 && h.Source.IsValid() && !bytes.Equal(enc, consumed) {
			t.Fatalf("v2 header with a client re-encodes as %q, read from %q", enc, consumed)
		}
		back, err := proxyproto.ReadHeader(bufio.NewReader(bytes.NewReader(enc)), 512)
		if err != nil {
			t.Fatalf("re-encoded %q does not read: %v", enc, err)
		}
		if !back.Equal(h) {
			t.Fatalf("re-encoded header reads as %+v, want %+v", back, h)
		}
	})
}
