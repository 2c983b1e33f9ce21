// Package testcert makes self-signed TLS certificates for tests on
// loopback, so that every package's TLS tests share one way to make them.
package testcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// A Cert is a self-signed ECDSA P-256 certificate valid for 127.0.0.1,
// ::1 and localhost from an hour ago for a day. It signs itself, so Pool
// trusts it as a root.
type Cert struct {
	TLS             tls.Certificate // with Leaf set
	Pool            *x509.CertPool  // trusts the certificate
	CertPEM, KeyPEM []byte
}

// New makes a Cert. It fails only if the system's random source does.
func New() (*Cert, error) {
	return build(&x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "portcullis test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	})
}

// NewClient makes a Cert for a TLS client (mutual TLS): self-signed like
// New's, for client authentication only, with the common name name and no
// address. A server trusts it by putting Pool in its ClientCAs. It fails
// only if the system's random source does.
func NewClient(name string) (*Cert, error) {
	return build(&x509.Certificate{
		SerialNumber:          big.NewInt(2),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	})
}

// build signs tmpl with a new P-256 key of its own.
func build(tmpl *x509.Certificate) (*Cert, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("testcert: key: %w", err)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("testcert: certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("testcert: certificate: %w", err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("testcert: key: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return &Cert{
		TLS:     tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf},
		Pool:    pool,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}),
	}, nil
}

// WriteFiles writes the certificate and key as PEM files cert.pem and
// key.pem into dir and returns their paths.
func (c *Cert) WriteFiles(dir string) (certFile, keyFile string, err error) {
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, c.CertPEM, 0o600); err != nil {
		return "", "", fmt.Errorf("testcert: %w", err)
	}
	if err := os.WriteFile(keyFile, c.KeyPEM, 0o600); err != nil {
		return "", "", fmt.Errorf("testcert: %w", err)
	}
	return certFile, keyFile, nil
}
