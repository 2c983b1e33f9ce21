package config

// intercept checks the intercept block of a forward listener at p: the fields it must have,
// the files it names (readable), the bounds of its leaves and its timeouts. What the files
// hold (a CA certificate and its key, upstream roots) and what the rules say are checked
// where the daemon builds the interception, in its prepare step, which `portcullis check`
// runs too.
func (v *validator) intercept(ic *Intercept, p string) {
	v.interceptCA(ic, p)
	v.nonNegativeDuration(p+".handshake_timeout", ic.HandshakeTimeout)
	v.nonNegativeDuration(p+".idle_timeout", ic.IdleTimeout)
	v.leaves(&ic.Leaves, p+".leaves")
	up := &ic.Upstream
	if up.CAFile != "" {
		v.readable(p+".upstream.ca_file", up.CAFile)
		if up.InsecureSkipVerifyUpstream {
			v.addf(p+".upstream.insecure_skip_verify_upstream", "turns off the verification that ca_file is for: set one or the other")
		}
	}
	v.nonNegativeDuration(p+".upstream.timeout", up.Timeout)
}

// interceptCA checks that ic names its CA certificate and key, and that both can be read.
func (v *validator) interceptCA(ic *Intercept, p string) {
	if ic.CACert == "" {
		v.addf(p+".ca_cert", "required: the PEM certificate of the interception CA, as `portcullis ca create --out DIR` writes it (DIR/ca.pem)")
	} else {
		v.readable(p+".ca_cert", ic.CACert)
	}
	if ic.CAKey == "" {
		v.addf(p+".ca_key", "required: the PEM private key of the interception CA (DIR/ca-key.pem of `portcullis ca create`)")
	} else {
		v.readable(p+".ca_key", ic.CAKey)
	}
}

// leaves checks the bounds of the leaves block at p.
func (v *validator) leaves(l *InterceptLeaves, p string) {
	switch {
	case l.Validity < 0:
		v.addf(p+".validity", "must be 0 (the default, 24h) or more (got %s)", l.Validity)
	case l.Validity > MaxLeafValidity:
		v.addf(p+".validity", "must be at most 825 days (19800h): Apple's platforms refuse TLS server certificates valid longer, and a short validity makes a leaked leaf key soon worthless (got %s)",
			l.Validity)
	}
	validity := orDefault(l.Validity, DefaultLeafValidity)
	switch {
	case l.RenewBefore < 0:
		v.addf(p+".renew_before", "must be 0 (a quarter of validity) or more (got %s)", l.RenewBefore)
	case l.RenewBefore >= validity && validity > 0:
		v.addf(p+".renew_before", "must be less than validity (%s), or no leaf would be worth caching (got %s)", validity, l.RenewBefore)
	}
	if l.CacheSize < 0 {
		v.addf(p+".cache_size", "must be 0 (the default, 1024) or more (got %d)", l.CacheSize)
	}
	v.atMostMaxCount(p+".cache_size", l.CacheSize)
}
