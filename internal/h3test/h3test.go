// Package h3test gives tests an HTTP/3 client whose QUIC connections come
// from a chosen loopback address, so that per-client limits can be driven
// from many clients on one machine.
package h3test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// Client returns an HTTP/3 client trusting pool whose QUIC connections
// come from ip (127.0.0.X), each request bounded by timeout, and its
// transport, closed when the test ends.
func Client(t testing.TB, ip string, pool *x509.CertPool, timeout time.Duration) (*http.Client, *http3.Transport) {
	t.Helper()
	tr := &http3.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool},
		Dial: func(ctx context.Context, addr string, tlsCfg *tls.Config, cfg *quic.Config) (*quic.Conn, error) {
			return dialFrom(ctx, ip, addr, tlsCfg, cfg)
		},
	}
	t.Cleanup(func() { _ = tr.Close() })
	return &http.Client{Transport: tr, Timeout: timeout}, tr
}

// dialFrom opens a QUIC connection to addr from a UDP socket bound to ip;
// the socket is closed when the connection ends.
func dialFrom(ctx context.Context, ip, addr string, tlsCfg *tls.Config, cfg *quic.Config) (*quic.Conn, error) {
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(ip)})
	if err != nil {
		return nil, err
	}
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		udp.Close()
		return nil, err
	}
	c, err := quic.DialEarly(ctx, udp, ua, tlsCfg, cfg)
	if err != nil {
		udp.Close()
		return nil, err
	}
	go func() { <-c.Context().Done(); udp.Close() }()
	return c, nil
}
