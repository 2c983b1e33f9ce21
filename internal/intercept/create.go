package intercept

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/forward"
)

// DefaultCAValidity is how long a CA made by [NewCA] is valid.
const DefaultCAValidity = 730 * 24 * time.Hour

// File names [WriteCA] writes in its directory.
const (
	CACertFile = "ca.pem"
	CAKeyFile  = "ca-key.pem"
)

// CAOptions configures [NewCA]. The zero CAOptions is valid: a CA named
// after Portcullis and this host, valid for two years, without name
// constraints.
type CAOptions struct {
	// CommonName is the CA's subject common name, what browsers show in
	// their list of authorities. Empty means "Portcullis interception CA
	// on HOST", HOST being this machine's host name.
	CommonName string

	// Validity is how long the CA is valid, from an hour ago (for clocks
	// that lag). Zero means DefaultCAValidity (two years); negative is
	// invalid.
	Validity time.Duration

	// PermittedDomains are DNS name constraints (RFC 5280 §4.2.1.10): the
	// CA may then sign only for these names, so that a stolen key cannot
	// impersonate any other site to the clients that trust it.
	// "example.com" permits it and its subdomains, ".example.com" the
	// subdomains only. Names are normalised as proxy targets are (lower
	// case, IDNA to ASCII). Empty means no DNS constraint.
	PermittedDomains []string

	// PermittedNetworks are IP address constraints. With PermittedDomains
	// and no PermittedNetworks, the CA may sign no IP address at all (an
	// address certificate would escape the domain constraints). Empty with
	// no PermittedDomains means no IP constraint.
	PermittedNetworks []netip.Prefix
}

// NewCA makes a new interception CA: an ECDSA P-256 key and a self-signed
// certificate with CA:TRUE, path length 0 (it signs leaves only), key
// usage certificate and CRL signing, and the name constraints of opts
// (critical, as RFC 5280 requires). It returns both in PEM, the key in
// PKCS #8. It fails for invalid options (naming the field) and if the
// system's random source fails.
func NewCA(opts CAOptions) (certPEM, keyPEM []byte, err error) {
	tmpl, err := caTemplate(opts, time.Now())
	if err != nil {
		return nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("intercept: generate CA key: %w", err)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("intercept: sign CA certificate: %w", err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("intercept: encode CA key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), nil
}

// Validate reports the first invalid field of o, as [NewCA] would.
func (o CAOptions) Validate() error {
	if o.Validity < 0 {
		return fmt.Errorf("intercept: CAOptions.Validity must not be negative (got %s)", o.Validity)
	}
	if _, err := normaliseDomains(o.PermittedDomains); err != nil {
		return err
	}
	_, err := permittedNetworks(o.PermittedNetworks)
	return err
}

func caTemplate(opts CAOptions, now time.Time) (*x509.Certificate, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	validity := opts.Validity
	if validity == 0 {
		validity = DefaultCAValidity
	}
	domains, _ := normaliseDomains(opts.PermittedDomains)
	networks, _ := permittedNetworks(opts.PermittedNetworks)
	cn := opts.CommonName
	if cn == "" {
		host, _ := os.Hostname()
		if host == "" {
			host = "unknown host"
		}
		cn = "Portcullis interception CA on " + host
	}
	if len(cn) > 64 { // ub-common-name, RFC 5280 Appendix A
		cn = cn[:64]
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: cn, Organization: []string{"Portcullis"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            0,
		MaxPathLenZero:        true,
	}
	if len(domains) > 0 || len(networks) > 0 {
		tmpl.PermittedDNSDomainsCritical = true
		tmpl.PermittedDNSDomains = domains
		tmpl.PermittedIPRanges = networks
		if len(networks) == 0 {
			// No address may be signed: exclude them all.
			tmpl.ExcludedIPRanges = []*net.IPNet{
				{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)},
				{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)},
			}
		}
	}
	return tmpl, nil
}

func normaliseDomains(in []string) ([]string, error) {
	out := make([]string, 0, len(in))
	for _, d := range in {
		dot := strings.HasPrefix(d, ".")
		t, err := forward.ParseTarget(strings.TrimPrefix(d, "."), 443)
		if err != nil || t.Addr().IsValid() {
			return nil, fmt.Errorf("intercept: CAOptions.PermittedDomains: %q is not a DNS name (example.com, or .example.com for its subdomains only)", d)
		}
		name := t.Host()
		if dot {
			name = "." + name
		}
		out = append(out, name)
	}
	return out, nil
}

func permittedNetworks(in []netip.Prefix) ([]*net.IPNet, error) {
	out := make([]*net.IPNet, 0, len(in))
	for _, p := range in {
		if !p.IsValid() || p.Addr().Zone() != "" || p.Masked() != p {
			return nil, fmt.Errorf("intercept: CAOptions.PermittedNetworks: %s is not a network address with its prefix length (did you mean %s?)", p, p.Masked())
		}
		a := p.Addr().Unmap()
		bits := p.Bits()
		if p.Addr().Is4In6() {
			bits -= 96
		}
		out = append(out, &net.IPNet{IP: net.IP(a.AsSlice()), Mask: net.CIDRMask(bits, a.BitLen())})
	}
	return out, nil
}

func randomSerial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("intercept: serial number: %w", err)
	}
	return n.Add(n, big.NewInt(1)), nil // positive, as RFC 5280 §4.1.2.2 requires
}

// ErrExists is returned by [WriteCA] when a file it would write is there
// already.
var ErrExists = errors.New("intercept: file exists")

// WriteCA makes a new CA with [NewCA] and writes it into dir (made, mode
// 0700, if missing): the certificate as CACertFile (mode 0644: it is
// public, clients install it) and the key as CAKeyFile (mode 0600). It
// never overwrites: when either file exists it writes nothing and returns
// an error matching [ErrExists] (and fs.ErrExist) naming it. On any other
// failure it removes what it wrote.
func WriteCA(dir string, opts CAOptions) (certFile, keyFile string, err error) {
	certPEM, keyPEM, err := NewCA(opts)
	if err != nil {
		return "", "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", fmt.Errorf("intercept: make CA directory: %w", err)
	}
	certFile, keyFile = filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile)
	for _, f := range []string{keyFile, certFile} {
		if _, err := os.Lstat(f); err == nil {
			return "", "", existsError(f)
		}
	}
	if err := writeNew(keyFile, keyPEM, 0o600); err != nil {
		return "", "", err
	}
	if err := writeNew(certFile, certPEM, 0o644); err != nil {
		os.Remove(keyFile)
		return "", "", err
	}
	return certFile, keyFile, nil
}

// writeNew creates file with data and mode, failing if it exists.
func writeNew(file string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if errors.Is(err, fs.ErrExist) {
		return existsError(file)
	}
	if err != nil {
		return fmt.Errorf("intercept: write %s: %w", file, err)
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(file)
		return fmt.Errorf("intercept: write %s: %w", file, err)
	}
	return nil
}

func existsError(file string) error {
	return fmt.Errorf("%w: %s (a CA is never overwritten: move it away or choose another directory)", errExistsBoth, file)
}

// errExistsBoth matches both ErrExists and fs.ErrExist.
var errExistsBoth = existsBoth{}

type existsBoth struct{}

func (existsBoth) Error() string { return ErrExists.Error() }

func (existsBoth) Is(target error) bool { return target == ErrExists || target == fs.ErrExist }
