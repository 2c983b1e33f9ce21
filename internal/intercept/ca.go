package intercept

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"
)

// Errors of [ParseCA] and [LoadCA] that callers may branch on; each is
// wrapped in an error that says more.
var (
	// ErrNotCA: the certificate may not sign other certificates (no basic
	// constraints, CA:FALSE, or a key usage without certificate signing).
	ErrNotCA = errors.New("intercept: the certificate is not a CA")

	// ErrKeyMismatch: the private key is not the key of the certificate.
	ErrKeyMismatch = errors.New("intercept: the private key does not match the CA certificate")

	// ErrCAExpired: the CA certificate's validity ended.
	ErrCAExpired = errors.New("intercept: the CA certificate has expired")

	// ErrCANotYetValid: the CA certificate's validity has not begun.
	ErrCANotYetValid = errors.New("intercept: the CA certificate is not valid yet")

	// ErrKeyReadable is matched by the error of [CheckKeyFile] for a key
	// file that users other than its owner may read.
	ErrKeyReadable = errors.New("intercept: the CA key file is readable by group or others")
)

// minRSABits is the least RSA modulus accepted for a CA key.
const minRSABits = 2048

// A CA is the certificate authority that signs the leaf certificates an
// intercepting proxy shows its clients. Clients must trust its certificate.
// A CA is immutable and safe for concurrent use; make it with [LoadCA] or
// [ParseCA].
type CA struct {
	cert  *x509.Certificate
	key   crypto.Signer
	chain [][]byte // DER: the CA certificate, then the certificates after it in its file
}

// CheckKeyFile returns an error matching [ErrKeyReadable], naming the file
// and its mode, when the CA key file (a symbolic link's target) may be read
// by its group or by others, as ssh refuses such a private key: whoever
// reads the key can mint certificates every client of the proxy trusts. It
// returns the error of os.Stat when the file cannot be examined, and nil
// for a file only its owner may read (0600, 0400, as `portcullis ca
// create` writes it).
func CheckKeyFile(file string) error {
	fi, err := os.Stat(file)
	if err != nil {
		return fmt.Errorf("intercept: CA key: %w", err)
	}
	if mode := fi.Mode().Perm(); mode&0o044 != 0 {
		return fmt.Errorf("%w: %s has mode %#o; chmod 600 it (or set intercept.allow_readable_ca_key: true)", ErrKeyReadable, file, mode)
	}
	return nil
}

// LoadCA reads a CA certificate and its private key from PEM files (they
// may be one file) and checks them as [ParseCA] does. Its errors name the
// files.
func LoadCA(certFile, keyFile string) (*CA, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("intercept: read CA certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("intercept: read CA key: %w", err)
	}
	ca, err := ParseCA(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("CA %s (key %s): %w", certFile, keyFile, err)
	}
	return ca, nil
}

// ParseCA parses a CA from PEM: certPEM holds the CA certificate first,
// then optionally the intermediate certificates that chain it to a root
// (they are sent to clients after each leaf); keyPEM holds its private
// key, ECDSA or RSA (at least 2048 bits) in PKCS #8, SEC 1 ("EC PRIVATE
// KEY") or PKCS #1 ("RSA PRIVATE KEY") form, unencrypted. Blocks of other
// types are skipped, so one file may hold both.
//
// It refuses, with an error saying why: no certificate or no key; an
// encrypted key; an Ed25519 key (browsers do not accept Ed25519
// certificates); a key that is not the certificate's ([ErrKeyMismatch]);
// a certificate that is not a CA ([ErrNotCA]); and a certificate outside
// its validity now ([ErrCAExpired], [ErrCANotYetValid]).
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	chain, err := parseCertificates(certPEM)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(chain[0])
	if err != nil {
		return nil, fmt.Errorf("intercept: parse CA certificate: %w", err)
	}
	key, err := parseKey(keyPEM)
	if err != nil {
		return nil, err
	}
	if err := checkPair(cert, key); err != nil {
		return nil, err
	}
	if err := checkCA(cert, time.Now()); err != nil {
		return nil, err
	}
	return &CA{cert: cert, key: key, chain: chain}, nil
}

func parseCertificates(data []byte) ([][]byte, error) {
	var chain [][]byte
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			break
		}
		if b.Type == "CERTIFICATE" {
			chain = append(chain, b.Bytes)
		}
	}
	if len(chain) == 0 {
		return nil, errors.New("intercept: no PEM CERTIFICATE block in the CA certificate file")
	}
	return chain, nil
}

func parseKey(data []byte) (crypto.Signer, error) {
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return nil, errors.New("intercept: no PEM private key block (PRIVATE KEY, EC PRIVATE KEY or RSA PRIVATE KEY) in the CA key file")
		}
		if !strings.HasSuffix(b.Type, "PRIVATE KEY") {
			continue // EC PARAMETERS, CERTIFICATE, ...
		}
		if b.Type == "ENCRYPTED PRIVATE KEY" || b.Headers["Proc-Type"] == "4,ENCRYPTED" {
			return nil, errors.New("intercept: the CA key is encrypted; give it unencrypted (openssl pkey -in KEY -out PLAIN), in a file only the proxy can read")
		}
		return signerOf(b)
	}
}

func signerOf(b *pem.Block) (crypto.Signer, error) {
	var key any
	var err error
	switch b.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(b.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(b.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(b.Bytes)
	default:
		return nil, fmt.Errorf("intercept: CA key: PEM block %q is not a supported private key (PRIVATE KEY, EC PRIVATE KEY or RSA PRIVATE KEY)", b.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("intercept: parse CA key (%s): %w", b.Type, err)
	}
	switch k := key.(type) {
	case *ecdsa.PrivateKey:
		return k, nil
	case *rsa.PrivateKey:
		if bits := k.N.BitLen(); bits < minRSABits {
			return nil, fmt.Errorf("intercept: the CA's RSA key has %d bits; at least %d are needed", bits, minRSABits)
		}
		return k, nil
	case ed25519.PrivateKey:
		return nil, errors.New("intercept: the CA key is Ed25519, whose certificates browsers do not accept; use ECDSA (portcullis ca create) or RSA")
	default:
		return nil, fmt.Errorf("intercept: the CA key is a %T; use ECDSA or RSA", key)
	}
}

// checkPair reports whether key is the private key of cert.
func checkPair(cert *x509.Certificate, key crypto.Signer) error {
	pub, ok := cert.PublicKey.(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(key.Public()) {
		return fmt.Errorf("%w (the certificate is for %s)", ErrKeyMismatch, describeSubject(cert))
	}
	return nil
}

// checkCA reports whether cert may sign leaf certificates at now.
func checkCA(cert *x509.Certificate, now time.Time) error {
	who := describeSubject(cert)
	switch {
	case !cert.BasicConstraintsValid:
		return fmt.Errorf("%w: %s has no basic constraints extension (a CA needs CA:TRUE)", ErrNotCA, who)
	case !cert.IsCA:
		return fmt.Errorf("%w: %s has CA:FALSE in its basic constraints", ErrNotCA, who)
	case cert.KeyUsage != 0 && cert.KeyUsage&x509.KeyUsageCertSign == 0:
		return fmt.Errorf("%w: the key usage of %s does not allow certificate signing (keyCertSign)", ErrNotCA, who)
	case now.After(cert.NotAfter):
		return fmt.Errorf("%w: %s expired on %s", ErrCAExpired, who, cert.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(cert.NotBefore):
		return fmt.Errorf("%w: %s is valid from %s", ErrCANotYetValid, who, cert.NotBefore.UTC().Format(time.RFC3339))
	}
	return nil
}

func describeSubject(cert *x509.Certificate) string {
	if cn := cert.Subject.CommonName; cn != "" {
		return fmt.Sprintf("%q", cn)
	}
	return fmt.Sprintf("%q", cert.Subject.String())
}

// Certificate returns the CA certificate. The caller must not modify it.
func (ca *CA) Certificate() *x509.Certificate { return ca.cert }

// Permits reports whether the CA's name constraints (RFC 5280 §4.2.1.10)
// let it sign a certificate for host, a DNS name in lower-case ASCII or an
// IP address. A CA without name constraints permits every host. Clients
// refuse a leaf outside the constraints, so an interceptor leaves such
// hosts as plain tunnels.
func (ca *CA) Permits(host string) bool {
	c := ca.cert
	if a, err := netip.ParseAddr(host); err == nil {
		a = a.Unmap()
		for _, n := range c.ExcludedIPRanges {
			if n.Contains(a.AsSlice()) {
				return false
			}
		}
		if len(c.PermittedIPRanges) == 0 {
			return true
		}
		for _, n := range c.PermittedIPRanges {
			if n.Contains(a.AsSlice()) {
				return true
			}
		}
		return false
	}
	for _, d := range c.ExcludedDNSDomains {
		if domainMatches(d, host) {
			return false
		}
	}
	if len(c.PermittedDNSDomains) == 0 {
		return true
	}
	for _, d := range c.PermittedDNSDomains {
		if domainMatches(d, host) {
			return true
		}
	}
	return false
}

// domainMatches applies a DNS name constraint as RFC 5280 and crypto/x509
// do: "example.com" holds example.com and its subdomains, ".example.com"
// its subdomains only, "" every name.
func domainMatches(constraint, name string) bool {
	constraint = strings.ToLower(constraint)
	if constraint == "" {
		return true
	}
	if strings.HasPrefix(constraint, ".") {
		return strings.HasSuffix(name, constraint)
	}
	return name == constraint || strings.HasSuffix(name, "."+constraint)
}
