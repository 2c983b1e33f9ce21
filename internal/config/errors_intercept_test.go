package config_test

// interceptBase is fwdBase with an intercept block naming the test CA; its lines are 1 to 8,
// and the cases below add fields of the intercept block from line 9.
const interceptBase = fwdBase + `    forward:
      intercept:
        ca_cert: testdata/files/intercept-ca.pem
        ca_key: testdata/files/intercept-ca-key.pem
`

// interceptBadConfigs are the bad cases of the intercept block, one per kind of mistake.
var interceptBadConfigs = []struct{ name, yaml, want string }{
	{"intercept without ca_cert", fwdBase + "    forward: {intercept: {ca_key: testdata/files/intercept-ca-key.pem}}\n",
		"portcullis.yaml:5:26: listeners[0].forward.intercept.ca_cert: required: the PEM certificate of the interception CA, as `portcullis ca create --out DIR` writes it (DIR/ca.pem)"},
	{"intercept without ca_key", fwdBase + "    forward: {intercept: {ca_cert: testdata/files/intercept-ca.pem}}\n",
		"portcullis.yaml:5:26: listeners[0].forward.intercept.ca_key: required: the PEM private key of the interception CA (DIR/ca-key.pem of `portcullis ca create`)"},
	{"intercept ca_cert missing", fwdBase + "    forward: {intercept: {ca_cert: testdata/files/missing.pem, ca_key: testdata/files/intercept-ca-key.pem}}\n",
		`portcullis.yaml:5:36: listeners[0].forward.intercept.ca_cert: cannot read: no such file or directory (got "$FILES/missing.pem")`},
	{"intercept handshake_timeout negative", interceptBase + "        handshake_timeout: -1s\n",
		`portcullis.yaml:9:28: listeners[0].forward.intercept.handshake_timeout: must be 0 or more (got -1s)`},
	{"intercept idle_timeout negative", interceptBase + "        idle_timeout: -1s\n",
		`portcullis.yaml:9:23: listeners[0].forward.intercept.idle_timeout: must be 0 or more (got -1s)`},
	{"intercept allow_readable_ca_key not a bool", interceptBase + "        allow_readable_ca_key: yes\n",
		`portcullis.yaml:9:32: listeners[0].forward.intercept.allow_readable_ca_key: must be true or false (got "yes")`},
	{"intercept http2 not a bool", interceptBase + "        http2: yes\n",
		`portcullis.yaml:9:16: listeners[0].forward.intercept.http2: must be true or false (got "yes")`},
	{"leaf validity negative", interceptBase + "        leaves: {validity: -1h}\n",
		`portcullis.yaml:9:28: listeners[0].forward.intercept.leaves.validity: must be 0 (the default, 24h) or more (got -1h0m0s)`},
	{"leaf validity above 825 days", interceptBase + "        leaves: {validity: 20000h}\n",
		`portcullis.yaml:9:28: listeners[0].forward.intercept.leaves.validity: must be at most 825 days (19800h): Apple's platforms refuse TLS server certificates valid longer, and a short validity makes a leaked leaf key soon worthless (got 20000h0m0s)`},
	{"leaf renew_before not below validity", interceptBase + "        leaves: {validity: 12h, renew_before: 12h}\n",
		`portcullis.yaml:9:47: listeners[0].forward.intercept.leaves.renew_before: must be less than validity (12h0m0s), or no leaf would be worth caching (got 12h0m0s)`},
	{"leaf cache_size negative", interceptBase + "        leaves: {cache_size: -1}\n",
		`portcullis.yaml:9:30: listeners[0].forward.intercept.leaves.cache_size: must be 0 (the default, 1024) or more (got -1)`},
	{"upstream ca_file with verification off", interceptBase + "        upstream: {ca_file: testdata/files/server.crt, insecure_skip_verify_upstream: true}\n",
		`portcullis.yaml:9:87: listeners[0].forward.intercept.upstream.insecure_skip_verify_upstream: turns off the verification that ca_file is for: set one or the other`},
	{"upstream ca_file missing", interceptBase + "        upstream: {ca_file: testdata/files/nope.pem}\n",
		`portcullis.yaml:9:29: listeners[0].forward.intercept.upstream.ca_file: cannot read: no such file or directory (got "$FILES/nope.pem")`},
	{"upstream timeout negative", interceptBase + "        upstream: {timeout: -1s}\n",
		`portcullis.yaml:9:29: listeners[0].forward.intercept.upstream.timeout: must be 0 or more (got -1s)`},
}

func init() {
	badConfigs = append(badConfigs, interceptBadConfigs...)
}
