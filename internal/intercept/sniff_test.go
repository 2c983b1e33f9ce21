package intercept_test

import (
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/intercept"
)

func TestSniffFirstBytes(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    []byte
		want intercept.FirstBytes
	}{
		{"nothing", nil, intercept.NeedMore},
		{"TLS 1.0 record, ClientHello", []byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0, 0}, intercept.TLSClientHello},
		{"TLS 1.2 record", []byte{0x16, 0x03, 0x03, 0x00, 0x40, 0x01}, intercept.TLSClientHello},
		{"TLS, 5 bytes", []byte{0x16, 0x03, 0x01, 0x02, 0x00}, intercept.NeedMore},
		{"TLS, version 2", []byte{0x16, 0x02}, intercept.Other},
		{"TLS, version 3.5", []byte{0x16, 0x03, 0x05}, intercept.Other},
		{"TLS, empty record", []byte{0x16, 0x03, 0x01, 0x00, 0x00, 0x01}, intercept.Other},
		{"TLS, record too long", []byte{0x16, 0x03, 0x01, 0x48, 0x01, 0x01}, intercept.Other},
		{"TLS, ServerHello", []byte{0x16, 0x03, 0x03, 0x00, 0x40, 0x02}, intercept.Other},
		{"TLS alert", []byte{0x15, 0x03, 0x03, 0x00, 0x02}, intercept.Other},
		{"SSLv2 hello", []byte{0x80, 0x2e, 0x01}, intercept.Other},
		{"GET", []byte("GET / HT"), intercept.PlainHTTP},
		{"CONNECT", []byte("CONNECT "), intercept.PlainHTTP},
		{"HTTP/2 preface", []byte("PRI * HT"), intercept.PlainHTTP},
		{"partial method", []byte("GE"), intercept.NeedMore},
		{"seven letters", []byte("OPTIONS"), intercept.NeedMore},
		{"method too long", []byte("ABCDEFGH"), intercept.Other},
		{"lower case", []byte("get / HT"), intercept.Other},
		{"space first", []byte(" GET"), intercept.Other},
		{"binary", []byte{0, 1, 2}, intercept.Other},
	} {
		if got := intercept.SniffFirstBytes(tc.b); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
