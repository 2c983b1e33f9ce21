package quicadmit

import (
	"crypto/tls"
	"crypto/x509"
)

// DemoTLS returns TLS configurations for the examples in package
// quicadmit_test: a server with the test certificate, a client trusting it.
func DemoTLS() (server, client *tls.Config) {
	cert, err := testCert()
	if err != nil {
		panic(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert.Leaf)
	server = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{testALPN}}
	client = &tls.Config{RootCAs: pool, ServerName: "localhost", NextProtos: []string{testALPN}}
	return server, client
}
