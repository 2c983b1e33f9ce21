package testcert

import (
	"crypto/tls"
	"net"
	"testing"
	"time"
)

// A client trusting Pool completes a handshake with a server using TLS,
// and the written files load back as the same certificate.
func TestHandshakeAndFiles(t *testing.T) {
	c, err := New()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{c.TLS}})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		s, err := ln.Accept()
		if err == nil {
			_ = s.(*tls.Conn).Handshake()
			s.Close()
		}
	}()
	d := &net.Dialer{Timeout: 5 * time.Second}
	conn, err := tls.DialWithDialer(d, "tcp", ln.Addr().String(), &tls.Config{RootCAs: c.Pool})
	if err != nil {
		t.Fatalf("handshake: %v", err)
	}
	conn.Close()

	certFile, keyFile, err := c.WriteFiles(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if string(loaded.Certificate[0]) != string(c.TLS.Certificate[0]) {
		t.Fatal("files hold another certificate")
	}
}
