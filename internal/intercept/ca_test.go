package intercept_test

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/intercept"
)

// selfSigned signs tmpl with key and returns the certificate's PEM.
func selfSigned(t testing.TB, tmpl *x509.Certificate, key crypto.Signer) []byte {
	t.Helper()
	if tmpl.SerialNumber == nil {
		tmpl.SerialNumber = big.NewInt(7)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func caTemplate(cn string) *x509.Certificate {
	return &x509.Certificate{
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
}

func ecKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func pkcs8(t testing.TB, key any) []byte {
	t.Helper()
	b, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: b})
}

func TestParseCA(t *testing.T) {
	good := sharedCA()
	other := newTestCA(t, intercept.CAOptions{})
	ec := ecKey(t)
	sec1, _ := x509.MarshalECPrivateKey(ec)
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	smallRSA, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	_, edKey, _ := ed25519.GenerateKey(rand.Reader)

	notCA := caTemplate("leaf")
	notCA.IsCA = false
	noConstraints := caTemplate("no constraints")
	noConstraints.BasicConstraintsValid, noConstraints.IsCA = false, false
	noCertSign := caTemplate("no certSign")
	noCertSign.KeyUsage = x509.KeyUsageDigitalSignature
	expired := caTemplate("expired")
	expired.NotBefore, expired.NotAfter = time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour)
	future := caTemplate("future")
	future.NotBefore, future.NotAfter = time.Now().Add(24*time.Hour), time.Now().Add(48*time.Hour)

	encrypted := pem.EncodeToMemory(&pem.Block{Type: "ENCRYPTED PRIVATE KEY", Bytes: []byte{1, 2, 3}})
	legacyEncrypted := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Headers: map[string]string{"Proc-Type": "4,ENCRYPTED"}, Bytes: []byte{1}})
	ecParams := pem.EncodeToMemory(&pem.Block{Type: "EC PARAMETERS", Bytes: []byte{6, 8, 42, 134, 72, 206, 61, 3, 1, 7}})

	for _, tc := range []struct {
		name      string
		cert, key []byte
		wantErr   error  // nil: accepted, unless want is set
		want      string // in the error
	}{
		{"ECDSA PKCS #8 from NewCA", good.certPEM, good.keyPEM, nil, ""},
		{"ECDSA SEC 1 after EC PARAMETERS", selfSigned(t, caTemplate("sec1"), ec),
			append(ecParams, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: sec1})...), nil, ""},
		{"RSA PKCS #1", selfSigned(t, caTemplate("rsa"), rsaKey),
			pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(rsaKey)}), nil, ""},
		{"one file for both", append(append([]byte{}, good.certPEM...), good.keyPEM...), append(append([]byte{}, good.certPEM...), good.keyPEM...), nil, ""},
		{"key of another CA", good.certPEM, other.keyPEM, intercept.ErrKeyMismatch, "does not match"},
		{"CA:FALSE", selfSigned(t, notCA, ec), pkcs8(t, ec), intercept.ErrNotCA, "CA:FALSE"},
		{"no basic constraints", selfSigned(t, noConstraints, ec), pkcs8(t, ec), intercept.ErrNotCA, "no basic constraints"},
		{"key usage without certSign", selfSigned(t, noCertSign, ec), pkcs8(t, ec), intercept.ErrNotCA, "keyCertSign"},
		{"expired", selfSigned(t, expired, ec), pkcs8(t, ec), intercept.ErrCAExpired, "expired on"},
		{"not valid yet", selfSigned(t, future, ec), pkcs8(t, ec), intercept.ErrCANotYetValid, "valid from"},
		{"encrypted PKCS #8", good.certPEM, encrypted, nil, "encrypted"},
		{"encrypted legacy PEM", good.certPEM, legacyEncrypted, nil, "encrypted"},
		{"Ed25519", good.certPEM, pkcs8(t, edKey), nil, "Ed25519"},
		{"RSA 1024", selfSigned(t, caTemplate("small"), smallRSA), pkcs8(t, smallRSA), nil, "1024 bits"},
		{"no certificate", good.keyPEM, good.keyPEM, nil, "no PEM CERTIFICATE"},
		{"no key", good.certPEM, good.certPEM, nil, "no PEM private key"},
		{"garbage key", good.certPEM, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte("nope")}), nil, "parse CA key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ca, err := intercept.ParseCA(tc.cert, tc.key)
			if tc.wantErr == nil && tc.want == "" {
				if err != nil {
					t.Fatalf("ParseCA: %v", err)
				}
				if !ca.Certificate().IsCA {
					t.Error("not a CA")
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Errorf("error %v, want %v", err, tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q lacks %q", err, tc.want)
			}
		})
	}
}

func TestLoadCANamesFiles(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, err := intercept.WriteCA(dir, intercept.CAOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := intercept.LoadCA(certFile, keyFile); err != nil {
		t.Fatalf("LoadCA of WriteCA's files: %v", err)
	}
	other := newTestCA(t, intercept.CAOptions{})
	otherKey := filepath.Join(dir, "other-key.pem")
	os.WriteFile(otherKey, other.keyPEM, 0o600)
	_, err = intercept.LoadCA(certFile, otherKey)
	if !errors.Is(err, intercept.ErrKeyMismatch) || !strings.Contains(err.Error(), certFile) || !strings.Contains(err.Error(), otherKey) {
		t.Errorf("error %v, want a mismatch naming both files", err)
	}
	if _, err := intercept.LoadCA(filepath.Join(dir, "missing.pem"), keyFile); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

func TestNewCA(t *testing.T) {
	certPEM, keyPEM, err := intercept.NewCA(intercept.CAOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ca, err := intercept.ParseCA(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	c := ca.Certificate()
	host, _ := os.Hostname()
	if !c.IsCA || !c.MaxPathLenZero || c.MaxPathLen != 0 || c.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Errorf("CA %v, pathlen %d (zero %v), key usage %v", c.IsCA, c.MaxPathLen, c.MaxPathLenZero, c.KeyUsage)
	}
	if pub, ok := c.PublicKey.(*ecdsa.PublicKey); !ok || pub.Curve != elliptic.P256() {
		t.Errorf("public key %T, want ECDSA P-256", c.PublicKey)
	}
	if !strings.Contains(c.Subject.CommonName, "Portcullis") || !strings.Contains(c.Subject.CommonName, host[:min(len(host), 20)]) {
		t.Errorf("subject %q names neither Portcullis nor the host %q", c.Subject, host)
	}
	if life := time.Until(c.NotAfter); life < intercept.DefaultCAValidity-time.Minute || life > intercept.DefaultCAValidity {
		t.Errorf("valid for %s more", life)
	}
	if len(c.PermittedDNSDomains)+len(c.ExcludedIPRanges) != 0 {
		t.Errorf("constraints without asking: %v %v", c.PermittedDNSDomains, c.ExcludedIPRanges)
	}
	for _, bad := range []intercept.CAOptions{
		{Validity: -time.Hour},
		{PermittedDomains: []string{"not a name"}},
		{PermittedDomains: []string{"192.0.2.1"}},
		{PermittedNetworks: []netip.Prefix{netip.MustParsePrefix("10.1.2.3/8")}},
	} {
		if _, _, err := intercept.NewCA(bad); err == nil || !strings.Contains(err.Error(), "CAOptions.") {
			t.Errorf("NewCA(%+v): %v, want an error naming the field", bad, err)
		}
	}
}

// A CA made with name constraints signs leaves clients accept only for
// those names; Permits says so before minting, and Leaves refuses the rest.
func TestNameConstraints(t *testing.T) {
	ca := newTestCA(t, intercept.CAOptions{PermittedDomains: []string{"Example.COM", ".corp.test"}})
	c := ca.ca.Certificate()
	if !c.PermittedDNSDomainsCritical || len(c.ExcludedIPRanges) != 2 {
		t.Errorf("constraints critical %v, excluded IP ranges %v (want all addresses)", c.PermittedDNSDomainsCritical, c.ExcludedIPRanges)
	}
	leaves, err := intercept.NewLeaves(intercept.LeavesConfig{CA: ca.ca})
	if err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]bool{
		"example.com": true, "www.example.com": true, "a.corp.test": true,
		"corp.test": false, "example.org": false, "badexample.com": false, "192.0.2.1": false,
	} {
		if got := ca.ca.Permits(host); got != want {
			t.Errorf("Permits(%q) = %v, want %v", host, got, want)
		}
		cert, err := leaves.Get(host)
		if !want {
			if !errors.Is(err, intercept.ErrNotPermitted) {
				t.Errorf("Get(%q): %v, want ErrNotPermitted", host, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("Get(%q): %v", host, err)
		}
		if _, err := cert.Leaf.Verify(x509.VerifyOptions{Roots: ca.pool, DNSName: host}); err != nil {
			t.Errorf("leaf for %s: %v", host, err)
		}
	}
	// With networks too, those addresses are permitted.
	withNet := newTestCA(t, intercept.CAOptions{PermittedDomains: []string{"example.com"}, PermittedNetworks: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}})
	if !withNet.ca.Permits("192.0.2.7") || withNet.ca.Permits("198.51.100.1") {
		t.Error("IP constraints not applied")
	}
}

func TestWriteCA(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	certFile, keyFile, err := intercept.WriteCA(dir, intercept.CAOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for file, mode := range map[string]os.FileMode{certFile: 0o644, keyFile: 0o600, dir: 0o700 | fs.ModeDir} {
		fi, err := os.Stat(file)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode(); got&^0o022 != mode&^0o022 || got.Perm()&0o077 > mode.Perm()&0o077 {
			t.Errorf("%s: mode %v, want %v", file, got, mode)
		}
	}
	before, _ := os.ReadFile(keyFile)
	_, _, err = intercept.WriteCA(dir, intercept.CAOptions{})
	if !errors.Is(err, intercept.ErrExists) || !errors.Is(err, fs.ErrExist) || !strings.Contains(err.Error(), "never overwritten") {
		t.Errorf("second WriteCA: %v, want a refusal", err)
	}
	if after, _ := os.ReadFile(keyFile); !bytes.Equal(before, after) {
		t.Error("the key was overwritten")
	}
	// Only the certificate there: still refused, and the key not written.
	dir2 := t.TempDir()
	os.WriteFile(filepath.Join(dir2, intercept.CACertFile), []byte("x"), 0o644)
	if _, _, err := intercept.WriteCA(dir2, intercept.CAOptions{}); !errors.Is(err, intercept.ErrExists) {
		t.Errorf("WriteCA over a certificate: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir2, intercept.CAKeyFile)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a key was written beside the existing certificate: %v", err)
	}
}

// A CA key that its group or others may read is refused with the file and
// its mode in the error, as ssh refuses such a private key; one only its
// owner may read passes. WriteCA writes 0600.
func TestCheckKeyFile(t *testing.T) {
	_, keyFile, err := intercept.WriteCA(t.TempDir(), intercept.CAOptions{CommonName: "perm test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := intercept.CheckKeyFile(keyFile); err != nil {
		t.Fatalf("key as WriteCA wrote it: %v", err)
	}
	for _, mode := range []os.FileMode{0o640, 0o604, 0o644} {
		if err := os.Chmod(keyFile, mode); err != nil {
			t.Fatal(err)
		}
		err := intercept.CheckKeyFile(keyFile)
		if !errors.Is(err, intercept.ErrKeyReadable) || !strings.Contains(err.Error(), keyFile) || !strings.Contains(err.Error(), fmt.Sprintf("%#o", mode)) {
			t.Errorf("mode %#o: %v, want ErrKeyReadable naming the file and the mode", mode, err)
		}
	}
	if err := os.Chmod(keyFile, 0o400); err != nil {
		t.Fatal(err)
	}
	if err := intercept.CheckKeyFile(keyFile); err != nil {
		t.Errorf("mode 0400: %v", err)
	}
}
