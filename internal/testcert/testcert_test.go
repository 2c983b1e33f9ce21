package testcert

import (
	"crypto/tls"
	"net"
	"strings"
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

// A server that requires client certificates from NewClient's Pool
// completes a handshake with a client presenting it, and refuses one
// presenting New's (a server certificate, not one it trusts for clients).
func TestClientCertificate(t *testing.T) {
	server, err := New()
	if err != nil {
		t.Fatal(err)
	}
	client, err := NewClient("envoy")
	if err != nil {
		t.Fatal(err)
	}
	if cn := client.TLS.Leaf.Subject.CommonName; cn != "envoy" {
		t.Errorf("common name %q, want envoy", cn)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{server.TLS},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: client.Pool})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			s, err := ln.Accept()
			if err != nil {
				return
			}
			_ = s.(*tls.Conn).Handshake()
			s.Close()
		}
	}()
	handshake := func(cert tls.Certificate) error {
		d := &net.Dialer{Timeout: 5 * time.Second}
		conn, err := tls.DialWithDialer(d, "tcp", ln.Addr().String(), &tls.Config{RootCAs: server.Pool, Certificates: []tls.Certificate{cert}})
		if err != nil {
			return err
		}
		defer conn.Close()
		// TLS 1.3: the server's verdict on the client's certificate comes
		// with the first read.
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = conn.Read(make([]byte, 1))
		if err != nil && strings.Contains(err.Error(), "EOF") {
			return nil
		}
		return err
	}
	if err := handshake(client.TLS); err != nil {
		t.Errorf("with the client certificate: %v", err)
	}
	if err := handshake(server.TLS); err == nil {
		t.Error("with a certificate the server does not trust for clients: handshake completed")
	}
}
