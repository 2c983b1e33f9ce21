package main

import (
	"crypto/sha256"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/intercept"
)

const caSynopsis = `ca create --out DIR [--permit-domain NAME ...] [--permit-network CIDR ...]
                      [--name CN] [--days N]

Makes a new certificate authority for TLS interception by a forward listener:
an ECDSA P-256 key (DIR/ca-key.pem, mode 0600) and a self-signed CA certificate
(DIR/ca.pem) for clients to trust. Existing files are never overwritten.`

func (e env) caCmd(args []string) int {
	if len(args) == 0 || args[0] != "create" {
		if len(args) > 0 && (args[0] == "--help" || args[0] == "-help" || args[0] == "-h" || args[0] == "help") {
			fmt.Fprintf(e.stdout, "Usage: portcullis %s\n", caSynopsis)
			return exitOK
		}
		fmt.Fprintf(e.stderr, "Usage: portcullis %s\n", caSynopsis)
		return exitUsage
	}
	fs := newFlagSet("ca create", caSynopsis)
	out := fs.String("out", "", "write ca.pem and ca-key.pem into this `directory` (made if missing; required)")
	var domains, networks stringList
	fs.Var(&domains, "permit-domain", "let the CA sign only for this DNS `name` and its subdomains (.name: subdomains only); repeatable")
	fs.Var(&networks, "permit-network", "with --permit-domain, let the CA sign for addresses in this `CIDR` too (none otherwise); repeatable")
	name := fs.String("name", "", "the CA's common name, as browsers list it (default \"Portcullis interception CA on HOST\")")
	days := fs.Int("days", int(intercept.DefaultCAValidity/(24*time.Hour)), "how many `days` the CA is valid")
	if code := e.parseFlags(fs, args[1:]); code >= 0 {
		return code
	}
	if *out == "" {
		fmt.Fprintln(e.stderr, "portcullis ca create: --out DIR is required")
		return exitUsage
	}
	if *days < 1 {
		fmt.Fprintf(e.stderr, "portcullis ca create: --days must be at least 1 (got %d)\n", *days)
		return exitUsage
	}
	opts := intercept.CAOptions{CommonName: *name, Validity: time.Duration(*days) * 24 * time.Hour, PermittedDomains: domains}
	for _, n := range networks {
		p, err := netip.ParsePrefix(n)
		if err != nil {
			fmt.Fprintf(e.stderr, "portcullis ca create: --permit-network %q is not a CIDR (10.0.0.0/8, 2001:db8::/32)\n", n)
			return exitUsage
		}
		opts.PermittedNetworks = append(opts.PermittedNetworks, p)
	}
	if len(networks) > 0 && len(domains) == 0 {
		fmt.Fprintln(e.stderr, "portcullis ca create: --permit-network goes with --permit-domain (a CA limited to addresses could intercept no name)")
		return exitUsage
	}
	if err := opts.Validate(); err != nil {
		fmt.Fprintf(e.stderr, "portcullis ca create: %v\n", err)
		return exitUsage
	}
	certFile, keyFile, err := intercept.WriteCA(*out, opts)
	if err != nil {
		fmt.Fprintf(e.stderr, "portcullis ca create: %v\n", err)
		return exitFailure
	}
	ca, err := intercept.LoadCA(certFile, keyFile)
	if err != nil {
		fmt.Fprintf(e.stderr, "portcullis ca create: reading back what was written: %v\n", err)
		return exitFailure
	}
	e.printCA(ca, certFile, keyFile)
	return exitOK
}

func (e env) printCA(ca *intercept.CA, certFile, keyFile string) {
	if abs, err := filepath.Abs(certFile); err == nil {
		certFile = abs
	}
	if abs, err := filepath.Abs(keyFile); err == nil {
		keyFile = abs
	}
	c := ca.Certificate()
	sum := sha256.Sum256(c.Raw)
	hex := make([]string, len(sum))
	for i, b := range sum {
		hex[i] = fmt.Sprintf("%02X", b)
	}
	constraints := "none: it can sign for any name"
	if len(c.PermittedDNSDomains) > 0 {
		constraints = strings.Join(c.PermittedDNSDomains, ", ")
		if len(c.PermittedIPRanges) > 0 {
			var nets []string
			for _, n := range c.PermittedIPRanges {
				nets = append(nets, n.String())
			}
			constraints += "; addresses " + strings.Join(nets, ", ")
		} else {
			constraints += "; no IP address"
		}
	}
	w := e.stdout
	fmt.Fprintf(w, "Wrote a new interception CA.\n\n")
	fmt.Fprintf(w, "  certificate   %s (public: install it in the clients)\n", certFile)
	fmt.Fprintf(w, "  private key   %s (mode 0600: keep it secret, it can impersonate sites to those clients)\n", keyFile)
	fmt.Fprintf(w, "  subject       %s\n", c.Subject)
	fmt.Fprintf(w, "  valid until   %s\n", c.NotAfter.UTC().Format(time.RFC3339))
	fmt.Fprintf(w, "  signs for     %s\n", constraints)
	fmt.Fprintf(w, "  SHA-256       %s\n\n", strings.Join(hex, ":"))
	fmt.Fprintf(w, "Trust it in the clients whose traffic is intercepted:\n")
	fmt.Fprintf(w, "  curl           curl --cacert %s -x http://PROXY:PORT https://example.com/\n", certFile)
	fmt.Fprintf(w, "  Python, Go     REQUESTS_CA_BUNDLE=%s (requests), SSL_CERT_FILE=%s (Go, OpenSSL)\n", certFile, certFile)
	fmt.Fprintf(w, "  Firefox        Settings > Privacy & Security > Certificates > View Certificates > Authorities > Import,\n")
	fmt.Fprintf(w, "                 then tick \"Trust this CA to identify websites\"\n")
	fmt.Fprintf(w, "  Chrome (Linux) certutil -d sql:$HOME/.pki/nssdb -A -t C,, -n portcullis -i %s\n", certFile)
	fmt.Fprintf(w, "  Debian, Ubuntu sudo cp %s /usr/local/share/ca-certificates/portcullis.crt && sudo update-ca-certificates\n", certFile)
	fmt.Fprintf(w, "  macOS          sudo security add-trusted-cert -d -r trustRoot -k /Library/Keychains/System.keychain %s\n", certFile)
	fmt.Fprintf(w, "  Windows        certutil -addstore -f Root %s\n\n", certFile)
	fmt.Fprintf(w, "Then name both files in a forward listener's intercept block (docs/forward.md, \"Interception\").\n")
}
