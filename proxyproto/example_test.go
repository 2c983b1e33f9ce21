package proxyproto_test

import (
	"bufio"
	"fmt"
	"io"
	"net/netip"
	"strings"

	"github.com/seed-a07d1050/portcullis/proxyproto"
)

func ExampleReadHeader() {
	stream := strings.NewReader("PROXY TCP4 192.0.2.7 198.51.100.1 51000 443\r\nGET / HTTP/1.1\r\n")
	br := bufio.NewReader(stream)
	h, err := proxyproto.ReadHeader(br, 0)
	if err != nil {
		panic(err)
	}
	fmt.Println(h.Version, h.Command, h.Source, h.Destination)
	rest, _ := io.ReadAll(br) // the application's bytes are intact
	fmt.Printf("%q\n", rest)
	// Output:
	// 1 PROXY 192.0.2.7:51000 198.51.100.1:443
	// "GET / HTTP/1.1\r\n"
}

func ExampleHeader_AppendV2() {
	h := proxyproto.Header{
		Command:     proxyproto.Proxy,
		Transport:   proxyproto.Stream,
		Source:      netip.MustParseAddrPort("[2001:db8::7]:51000"),
		Destination: netip.MustParseAddrPort("[2001:db8::1]:443"),
	}
	b, err := h.AppendV2(nil)
	if err != nil {
		panic(err)
	}
	fmt.Println(len(b), "bytes")
	// Output: 52 bytes
}
