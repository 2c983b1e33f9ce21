package daemon_test

import (
	"log/slog"
	"os"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/daemon"
)

// configDir is where the fuzzed configurations live, so that their relative
// file names (certificates, keys, passwords) resolve to the test files of
// package config.
const configDir = "../config/testdata/"

// FuzzStartAcceptsValidConfigs checks that `portcullis check` and `run`
// agree: every configuration check accepts (config's Validate, then the
// build pass, daemon.Check) must start (with its addresses moved to free
// loopback ports), since an operator who ran check was promised it would.
// A configuration whose start fails is a gap in Check.
//
// ci:fuzztime 30000x (a valid input starts and stops a daemon)
func FuzzStartAcceptsValidConfigs(f *testing.F) {
	for _, name := range []string{"full.yaml", "minimal.yaml"} {
		data, err := os.ReadFile(configDir + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range []string{
		"listeners:\n  - protocol: http\n    listen: :80\n    max_conns_per_client: 2147483646\n    routes: [{upstreams: [http://a], limit: {permits: 2147483646, queue: {size: 2147483646}}}]\n",
		"listeners:\n  - protocol: tcp\n    listen: :5432\n    upstream: db:5432\n    max_conns: 2147483646\n    enforce_above: 2147483645\n",
		"listeners:\n  - protocol: http\n    listen: :80\n    prefix_levels: [{ipv4_prefix: 1, max: 2147483646}]\n    conn_overrides: [{cidr: 0.0.0.0/0, max: 2147483646}]\n    routes: [{upstreams: [http://a]}]\n",
		"listeners:\n  - protocol: http\n    listen: :3128\n    mode: forward\n    auth: {htpasswd: files/users.htpasswd, cache_size: 2147483646, max_concurrent_checks: 2147483646, failures: {burst: 8760, interval: 1h}}\n    forward:\n      destinations: {allow: [\"::1\"], deny: [0.0.0.0/0], ports: [\"1-65535\"]}\n      max_idle_conns_per_target: -1\n      max_idle_conns: 2147483646\n      limits:\n        - {key: target_host, permits: 2147483646, overrides: {\"[::1]\": -1, \"xn--bcher-kva.example:1\": 1}}\n        - {key: \"header:X-Team\", count_tunnels: false, reclaim_after: none, tunnel_permits: -1}\n",
		"listeners:\n  - protocol: https\n    listen: :443\n    tls: {cert_file: files/server.crt, key_file: files/server.key}\n    auth: {htpasswd: files/users.htpasswd}\n    routes: [{upstreams: [http://a], limit: {key: user, reclaim_after: 1s, response: {body: x, headers: {X-A: b}}}}]\n",
		"listeners:\n  - protocol: http3\n    listen: :443\n    tls: {cert_file: files/server.crt, key_file: files/server.key}\n    quic: {retry: always, max_in_progress: 1, handshake_timeout: 1m}\n    routes: [{upstreams: [http://a]}]\n",
		"listeners:\n  - protocol: http3\n    listen: :443\n    tls: {cert_file: files/server.crt, key_file: files/server.key}\n    quic: {retry_threshold_min: 2147483646, retry_threshold_max: 1, max_in_progress: 3}\n    routes: [{upstreams: [http://a]}]\n",
		"admin: {listen: :9901, token_file: files/admin.token}\nlisteners:\n  - protocol: tcp\n    listen: :5432\n    upstream: db:5432\n    tcp_idle_timeout: 2562047h\n",
		"listeners:\n  - protocol: https\n    listen: :3128\n    mode: forward\n    tls: {cert_file: files/server.crt, key_file: files/server.key}\n    read_timeout: 1ns\n    rate: {rate: 1r/h, key: proxy_user}\n    auth: {htpasswd: files/users.htpasswd}\n    forward:\n      limits: [{key: proxy_user, permits: 1}]\n      intercept: {ca_cert: files/intercept-ca.pem, ca_key: files/intercept-ca-key.pem, intercept: [\"*.example.com\", 10.0.0.0/8, \"[::1]\"], bypass: [\"B\u00fccher.example.\"], handshake_timeout: 2562047h, idle_timeout: 1ns, http2: false, leaves: {validity: 19800h, renew_before: 1ns, cache_size: 2147483646}, upstream: {ca_file: files/server.crt, timeout: 1ns}}\n",
		"listeners:\n  - protocol: http\n    listen: :3128\n    mode: forward\n    forward: {intercept: {ca_cert: files/intercept-ca.pem, ca_key: files/intercept-ca-key.pem, upstream: {insecure_skip_verify_upstream: true}}}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := config.Parse(configDir+"fuzz.yaml", data)
		if err != nil {
			return // refused by check too
		}
		if err := daemon.Check(cfg); err != nil {
			return // check refuses it: what a file holds is read by the build pass
		}
		for i := range cfg.Listeners {
			cfg.Listeners[i].Listen = "127.0.0.1:0"
		}
		if cfg.Admin.Listen != "" {
			cfg.Admin.Listen = "127.0.0.1:0"
		}
		srv, err := daemon.Start(cfg, daemon.Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatalf("check accepted the configuration but Start refused it: %v\n%s", err, data)
		}
		_ = srv.Close()
	})
}

// TestCheckedConfigsStart runs the reference configurations of package
// config through Start as the fuzz target does, also when fuzzing is off.
func TestCheckedConfigsStart(t *testing.T) {
	// full.yaml names a CA key, which the daemon refuses when others can
	// read it, and git checks files out readable by everyone. config's
	// TestMain makes it the owner's alone too, but that package's tests may
	// run after this one's in a fresh clone.
	if err := os.Chmod(configDir+"files/intercept-ca-key.pem", 0o600); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"full.yaml", "minimal.yaml"} {
		cfg, err := config.Load(configDir + name)
		if err != nil {
			t.Fatal(err)
		}
		for i := range cfg.Listeners {
			cfg.Listeners[i].Listen = "127.0.0.1:0"
		}
		cfg.Admin.Listen = "127.0.0.1:0"
		srv, err := daemon.Start(cfg, daemon.Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		_ = srv.Close()
	}
}
