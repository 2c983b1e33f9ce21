package config

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/seed-a07d1050/portcullis/internal/intercept"
)

// intercept checks the intercept block of a forward listener at p, building what the daemon
// will build from it (the CA, the rules, the leaves, the upstream roots), so that a block
// that validates is one the daemon can run.
func (v *validator) intercept(ic *Intercept, p string) {
	ca := v.interceptCA(ic, p)
	v.interceptRules(ic.Intercept, p+".intercept")
	v.interceptRules(ic.Bypass, p+".bypass")
	v.nonNegativeDuration(p+".handshake_timeout", ic.HandshakeTimeout)
	v.nonNegativeDuration(p+".idle_timeout", ic.IdleTimeout)
	v.leaves(&ic.Leaves, ca, p+".leaves")
	up := &ic.Upstream
	if up.CAFile != "" {
		if _, err := intercept.LoadRoots(up.CAFile); err != nil {
			v.rootsProblem(p+".upstream.ca_file", up.CAFile, err)
		}
		if up.InsecureSkipVerifyUpstream {
			v.addf(p+".upstream.insecure_skip_verify_upstream", "turns off the verification that ca_file is for: set one or the other")
		}
	}
	v.nonNegativeDuration(p+".upstream.timeout", up.Timeout)
}

// rootsProblem reports why intercept.LoadRoots refused file.
func (v *validator) rootsProblem(p, file string, err error) {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		v.fileProblem(p, file, err, "")
		return
	}
	msg := strings.TrimPrefix(err.Error(), "intercept: upstream CA file "+file)
	msg = strings.TrimPrefix(strings.TrimPrefix(msg, ":"), " ")
	v.add(p, err, "does not load: "+msg+quoteGot(file))
}

// interceptCA loads the CA of ic, reporting each problem at the file it is about. It
// returns nil when the CA does not load.
func (v *validator) interceptCA(ic *Intercept, p string) *intercept.CA {
	if ic.CACert == "" {
		v.addf(p+".ca_cert", "required: the PEM certificate of the interception CA, as `portcullis ca create --out DIR` writes it (DIR/ca.pem)")
	}
	if ic.CAKey == "" {
		v.addf(p+".ca_key", "required: the PEM private key of the interception CA (DIR/ca-key.pem of `portcullis ca create`)")
	}
	if ic.CACert == "" || ic.CAKey == "" {
		return nil
	}
	certPEM, cerr := os.ReadFile(ic.CACert)
	if cerr != nil {
		v.fileProblem(p+".ca_cert", ic.CACert, cerr, "")
	}
	keyPEM, kerr := os.ReadFile(ic.CAKey)
	if kerr != nil {
		v.fileProblem(p+".ca_key", ic.CAKey, kerr, "")
	}
	if cerr != nil || kerr != nil {
		return nil
	}
	ca, err := intercept.ParseCA(certPEM, keyPEM)
	if err != nil {
		field, file := ".ca_key", ic.CAKey
		if caCertProblem(certPEM, err) {
			field, file = ".ca_cert", ic.CACert
		}
		v.add(p+field, err, "does not load: "+strings.TrimPrefix(err.Error(), "intercept: ")+quoteGot(file))
		return nil
	}
	if !ic.AllowReadableCAKey {
		if err := intercept.CheckKeyFile(ic.CAKey); errors.Is(err, intercept.ErrKeyReadable) {
			v.add(p+".ca_key", err, strings.TrimPrefix(err.Error(), "intercept: ")+quoteGot(ic.CAKey))
		}
	}
	return ca
}

// caCertProblem reports whether err, from intercept.ParseCA, is about the certificate rather
// than the key. ParseCA reads the first certificate, then the key, then checks that they
// match (a key problem), then that the certificate is a CA valid now.
func caCertProblem(certPEM []byte, err error) bool {
	if errors.Is(err, intercept.ErrNotCA) || errors.Is(err, intercept.ErrCAExpired) || errors.Is(err, intercept.ErrCANotYetValid) {
		return true
	}
	for rest := certPEM; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			return true // no certificate at all
		}
		if b.Type == "CERTIFICATE" {
			_, perr := x509.ParseCertificate(b.Bytes)
			return perr != nil
		}
	}
}

// interceptRules checks a list of intercept or bypass rules at p, each bad entry at its own
// index.
func (v *validator) interceptRules(entries []string, p string) {
	_, err := intercept.ParseRules(entries)
	if err == nil {
		return
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	for _, e := range errs {
		var re *intercept.RuleError
		if !errors.As(e, &re) {
			v.add(p, e, strings.TrimPrefix(e.Error(), "intercept: "))
			continue
		}
		v.add(indexPath(p, re.Index), e, re.Reason+quoteGot(entries[re.Index]))
	}
}

// leaves checks the leaves block at p, then builds it with ca (when the CA loaded) as the
// daemon will.
func (v *validator) leaves(l *InterceptLeaves, ca *intercept.CA, p string) {
	ok := true
	switch {
	case l.Validity < 0:
		v.addf(p+".validity", "must be 0 (the default, 24h) or more (got %s)", l.Validity)
		ok = false
	case l.Validity > MaxLeafValidity:
		v.addf(p+".validity", "must be at most 825 days (19800h): Apple's platforms refuse TLS server certificates valid longer, and a short validity makes a leaked leaf key soon worthless (got %s)",
			l.Validity)
		ok = false
	}
	validity := orDefault(l.Validity, DefaultLeafValidity)
	switch {
	case l.RenewBefore < 0:
		v.addf(p+".renew_before", "must be 0 (a quarter of validity) or more (got %s)", l.RenewBefore)
		ok = false
	case l.RenewBefore >= validity && validity > 0:
		v.addf(p+".renew_before", "must be less than validity (%s), or no leaf would be worth caching (got %s)", validity, l.RenewBefore)
		ok = false
	}
	if l.CacheSize < 0 {
		v.addf(p+".cache_size", "must be 0 (the default, 1024) or more (got %d)", l.CacheSize)
		ok = false
	}
	v.atMostMaxCount(p+".cache_size", l.CacheSize)
	if !ok || ca == nil {
		return
	}
	if _, err := l.Build(ca); err != nil {
		v.add(p, err, fmt.Sprintf("does not build: %s", strings.TrimPrefix(err.Error(), "intercept: ")))
	}
}

// Build returns the leaves l describes, signed by ca, as the daemon mints them: zero fields
// take the package's defaults, which are the block's. It fails for what Validate refuses.
func (l *InterceptLeaves) Build(ca *intercept.CA) (*intercept.Leaves, error) {
	return intercept.NewLeaves(intercept.LeavesConfig{CA: ca, Validity: l.Validity, RenewBefore: l.RenewBefore, CacheSize: l.CacheSize})
}

// Rules returns the parsed intercept and bypass lists of i. It fails for what Validate
// refuses.
func (i *Intercept) Rules() (only, bypass *intercept.Rules, err error) {
	if only, err = intercept.ParseRules(i.Intercept); err != nil {
		return nil, nil, fmt.Errorf("config: intercept: %w", err)
	}
	if bypass, err = intercept.ParseRules(i.Bypass); err != nil {
		return nil, nil, fmt.Errorf("config: bypass: %w", err)
	}
	return only, bypass, nil
}
