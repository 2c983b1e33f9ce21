package config_test

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/seed-a07d1050/portcullis/internal/config"
)

// TestRoundTrip checks that the effective output of each example parses back to the same
// effective Config, and that printing that again gives the same bytes.
func TestRoundTrip(t *testing.T) {
	for _, file := range []string{"testdata/full.yaml", "testdata/minimal.yaml"} {
		t.Run(file, func(t *testing.T) {
			c, err := config.Load(file)
			if err != nil {
				t.Fatal(err)
			}
			eff := c.Effective()
			out, err := eff.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			back, err := config.Parse("effective.yaml", out)
			if err != nil {
				t.Fatalf("Parse of the effective output: %v\n%s", err, out)
			}
			if !sameConfig(back, eff) {
				t.Errorf("round trip changed the config:\n%s", out)
			}
			if !sameConfig(back.Effective(), eff) {
				t.Errorf("Effective is not idempotent")
			}
			again, err := back.Effective().Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(again, out) {
				t.Errorf("second effective output differs:\n%s\nfirst:\n%s", again, out)
			}
			viaYAML, err := yaml.Marshal(eff)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := config.Parse("via-yaml.yaml", viaYAML); err != nil {
				t.Errorf("yaml.Marshal output does not parse: %v", err)
			}
		})
	}
}

// sameConfig compares two Configs field by field, ignoring where they were parsed from.
func sameConfig(a, b *config.Config) bool {
	ao, err1 := a.Marshal()
	bo, err2 := b.Marshal()
	return err1 == nil && err2 == nil && bytes.Equal(ao, bo) && reflect.DeepEqual(strip(a), strip(b))
}

// strip copies the exported fields of c, leaving its source positions behind.
func strip(c *config.Config) config.Config {
	return config.Config{Log: c.Log, Admin: c.Admin, ShutdownTimeout: c.ShutdownTimeout,
		Cluster: c.Cluster, Listeners: c.Listeners}
}

var update = flag.Bool("update", false, "rewrite testdata/minimal.effective.yaml")

// TestEffectiveMinimal pins the effective form of the minimal example: every default the
// daemon relies on, as `portcullis check` prints it.
func TestEffectiveMinimal(t *testing.T) {
	c, err := config.Load("testdata/minimal.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Effective().Marshal()
	if err != nil {
		t.Fatal(err)
	}
	const golden = "testdata/minimal.effective.yaml"
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("effective minimal config:\n%s\nwant (testdata/minimal.effective.yaml):\n%s", got, want)
	}
}

func TestEffectiveDefaults(t *testing.T) {
	c := mustParse(t, `listeners:
  - protocol: https
    listen: :443
    tls: {cert_file: testdata/files/server.crt, key_file: testdata/files/server.key}
    client_limit: {}
    routes:
      - upstreams: [http://a]
        limit: {}
        shadow_limit: {}
        rate: {rate: 10r/s}
  - protocol: http3
    listen: :443
    tls: {cert_file: testdata/files/server.crt, key_file: testdata/files/server.key}
    routes_from: https-0
  - protocol: tcp
    listen: :5432
    upstream: db:5432
cluster: {redis: {addrs: ["r:6379"]}}
`)
	e := c.Effective()
	l0, l1, l2 := e.Listeners[0], e.Listeners[1], e.Listeners[2]
	checks := []struct {
		name      string
		got, want any
	}{
		{"log format", e.Log.Format, config.LogText},
		{"log level", e.Log.Level, config.LevelInfo},
		{"shutdown", e.ShutdownTimeout, config.DefaultShutdownTimeout},
		{"prefix", e.Cluster.Prefix, "portcullis:"},
		{"lease", e.Cluster.Lease, 15 * time.Second},
		{"timeout", e.Cluster.Timeout, 50 * time.Millisecond},
		{"on_error", e.Cluster.OnError, config.OnErrorOpen},
		{"node share", e.Cluster.NodeShare, 1.0},
		{"local share", e.Cluster.LocalShare, 0.0},
		{"rate lease", e.Cluster.RateLease, 32},
		{"spare share", e.Cluster.SpareShare, 0.1},
		{"flush interval", e.Cluster.FlushInterval, 10 * time.Millisecond},
		{"rate", *l0.Routes[0].Rate, config.Rate{Rate: config.PerSecondRate(10), Key: config.KeyClientIP, Status: 429, Headers: config.RateHeadersRefusal}},
		{"listener name", l0.Name, "https-0"},
		{"http3 name", l1.Name, "http3-1"},
		{"tcp name", l2.Name, "tcp-2"},
		{"per client", l0.MaxConnsPerClient, 64},
		{"ipv6", l0.IPv6Prefix, 64},
		{"ipv4", l0.IPv4Prefix, 32},
		{"forwarded", l0.ForwardedHeader, config.ForwardedXFF},
		{"proxy timeout", l0.ProxyProtocolTimeout, 3 * time.Second},
		{"header timeout", l0.ReadHeaderTimeout, 10 * time.Second},
		{"idle", l0.IdleTimeout, 60 * time.Second},
		{"header bytes", l0.MaxHeaderBytes, 32 << 10},
		{"client limit", *l0.ClientLimit, config.DefaultLimit()},
		{"route name", l0.Routes[0].Name, "route-0"},
		{"path prefix", l0.Routes[0].PathPrefix, "/"},
		{"mode", l0.Mode, config.ModeReverse},
		{"no mode on http3", l1.Mode, config.ListenerMode("")},
		{"limit", *l0.Routes[0].Limit, config.Limit{Key: config.KeyClientIP, Permits: 64, Status: 429, RetryAfter: time.Second, ReclaimAfter: 10 * time.Minute}},
		{"shadow limit keeps refusal fields zero", *l0.Routes[0].ShadowLimit, config.Limit{Key: config.KeyClientIP, Permits: 64, ReclaimAfter: 10 * time.Minute}},
		{"quic", l1.QUIC, config.QUIC{Retry: config.RetryAdaptive, RetryThresholdMin: 256, RetryThresholdMax: 4096, MaxInProgress: 16384, HandshakeTimeout: 5 * time.Second}},
		{"tcp idle timeout", l2.TCPIdleTimeout, 5 * time.Minute},
		{"no tcp idle timeout on https", l0.TCPIdleTimeout, time.Duration(0)},
		{"no quic on https", l0.QUIC, config.QUIC{}},
		{"no proxy timeout on http3", l1.ProxyProtocolTimeout, time.Duration(0)},
		{"no HTTP defaults on tcp", [3]any{l2.ReadHeaderTimeout, l2.MaxHeaderBytes, l2.ForwardedHeader}, [3]any{time.Duration(0), 0, config.ForwardedHeader("")}},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s: got %#v, want %#v", c.name, c.got, c.want)
		}
	}
	if err := e.Validate(); err != nil {
		t.Errorf("the effective config does not validate: %v", err)
	}
}

// TestEffectiveForwardDefaults checks the defaults of a forward listener: its forward
// block, auth and limits, spelled out.
func TestEffectiveForwardDefaults(t *testing.T) {
	c := mustParse(t, `listeners:
  - protocol: http
    listen: 127.0.0.1:3128
    mode: forward
    client_limit: {}
    auth: {htpasswd: testdata/files/users.htpasswd}
    forward:
      limits: [{key: proxy_user}]
  - protocol: https
    listen: 127.0.0.1:3129
    mode: forward
    tls: {cert_file: testdata/files/server.crt, key_file: testdata/files/server.key}
`)
	e := c.Effective()
	l0, l1 := e.Listeners[0], e.Listeners[1]
	yes := true
	want := &config.Forward{
		Destinations:          config.Destinations{Ports: []string{"80", "443", "1024-65535"}},
		DialTimeout:           10 * time.Second,
		UpstreamTimeout:       60 * time.Second,
		TunnelIdleTimeout:     5 * time.Minute,
		TunnelLifetime:        24 * time.Hour,
		MaxIdleConnsPerTarget: 16,
		MaxIdleConns:          1024,
		IdleConnTimeout:       30 * time.Second,
		ConnectPorts:          []string{"443"},
		Via:                   "portcullis",
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"forward block filled in when left out", l1.Forward, want},
		{"auth", *l0.Auth, config.Auth{Htpasswd: l0.Auth.Htpasswd, Realm: "portcullis", CacheSize: 10000,
			CheckTimeout: 2 * time.Second, Failures: config.AuthFailures{Burst: 10, Interval: 6 * time.Second}}},
		{"forward limit", l0.Forward.Limits[0], config.Limit{Key: config.KeyProxyUser, Permits: 64, Status: 429,
			RetryAfter: time.Second, CountTunnels: &yes, ReclaimAfter: 10 * time.Minute}},
		{"client limit counts tunnels", l0.ClientLimit.IsCountingTunnels(), true},
		{"no routes", l0.Routes, []config.Route(nil)},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s: got %#v, want %#v", c.name, c.got, c.want)
		}
	}
	if err := e.Validate(); err != nil {
		t.Errorf("the effective config does not validate: %v", err)
	}
}

// TestNoMutation checks that Effective and Validate leave the caller's Config as it was,
// down to the maps and slices it shares.
func TestNoMutation(t *testing.T) {
	c, err := config.Load("testdata/full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c.Listeners[2].Routes[0].Name = "" // leave defaults to fill
	before, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	e := c.Effective()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	e.Listeners[0].Routes[0].Limit.Overrides["batch"] = 1
	e.Listeners[0].Routes[0].Host[0] = "changed.example"
	e.Listeners[0].TrustedProxies[0] = e.Listeners[0].TrustedProxies[1]
	e.Cluster.Redis.Addrs[0] = "changed:1"
	fw := e.Listeners[3].Forward
	fw.Destinations.Ports[0] = "1"
	fw.Destinations.Allow[0] = fw.Destinations.Deny[0]
	fw.Limits[0].Overrides["slow.example.com"] = 1
	fw.Limits[1].Response.Headers["Link"] = "changed"
	*fw.Limits[1].CountTunnels = false
	*e.Listeners[3].ClientLimit.CountTunnels = false
	e.Listeners[2].Auth.Realm = "changed"
	after, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Errorf("the original changed:\n%s\nwas:\n%s", after, before)
	}
}

// TestValidateBuiltInGo checks a Config built in Go: the same rules, and messages without
// positions, prefixed by the package name.
func TestValidateBuiltInGo(t *testing.T) {
	c := &config.Config{Listeners: []config.Listener{{
		Protocol: config.ProtocolHTTP,
		Listen:   "127.0.0.1:8080",
		Routes: []config.Route{{
			Upstreams: []string{"http://127.0.0.1:9000"},
			Limit:     &config.Limit{Permits: -3, RetryAfter: config.NoRetryAfter},
		}},
	}}}
	err := c.Validate()
	want := "config: listeners[0].routes[0].limit.permits: must be -1 (unlimited) or more (got -3)"
	if err == nil || err.Error() != want {
		t.Fatalf("Validate = %v, want %s", err, want)
	}
	c.Listeners[0].Routes[0].Limit.Permits = config.Unlimited
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate = %v", err)
	}
	if pos, ok := c.Pos("listeners[0]"); ok || pos != (config.Position{}) {
		t.Errorf("Pos of a Go-built config = %v, %v", pos, ok)
	}
	// A Go-built prefix of 0 means the default; only a written 0 is refused.
	if got := c.Effective().Listeners[0].IPv6Prefix; got != 64 {
		t.Errorf("IPv6Prefix default = %d", got)
	}
}

// TestSeveralErrors checks that every problem is reported, one per line, sorted by position.
func TestSeveralErrors(t *testing.T) {
	_, err := config.Parse("p.yaml", []byte(`listeners:
  - protocol: http
    listen: 127.0.0.1:8080
    max_conns: -1
    routes:
      - path_prefix: x
        upstreams: [http://a]
        limit: {permits: -2, status: 200}
log: {level: loud}
`))
	want := []string{
		"p.yaml:4:16: listeners[0].max_conns: must be 0 (no cap) or more (got -1)",
		`p.yaml:6:22: listeners[0].routes[0].path_prefix: must start with "/" (got "x")`,
		"p.yaml:8:26: listeners[0].routes[0].limit.permits: must be -1 (unlimited) or more (got -2)",
		"p.yaml:8:38: listeners[0].routes[0].limit.status: must be from 400 to 599 (got 200)",
		`p.yaml:9:14: log.level: must be one of debug, info, warn, error (got "loud")`,
	}
	if err == nil {
		t.Fatal("no error")
	}
	if got := strings.Split(err.Error(), "\n"); !reflect.DeepEqual(got, want) {
		t.Errorf("errors:\n%s\nwant:\n%s", err, strings.Join(want, "\n"))
	}
	var count int
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var fe *config.Error
		if errors.As(e, &fe) && errors.Is(e, config.ErrInvalid) {
			count++
		}
	}
	if count != len(want) {
		t.Errorf("%d of the joined errors are *config.Error wrapping ErrInvalid, want %d", count, len(want))
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	t.Run("missing file", func(t *testing.T) {
		_, err := config.Load(filepath.Join(dir, "nope.yaml"))
		if err == nil || errors.Is(err, config.ErrInvalid) || !errors.Is(err, os.ErrNotExist) {
			t.Errorf("Load = %v, want a not-exist error that is not ErrInvalid", err)
		}
	})
	t.Run("too large", func(t *testing.T) {
		big := filepath.Join(dir, "big.yaml")
		if err := os.WriteFile(big, bytes.Repeat([]byte("#\n"), config.MaxFileSize/2+1), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := config.Load(big)
		if err == nil || errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "larger than") {
			t.Errorf("Load = %v", err)
		}
	})
	t.Run("relative paths follow the file", func(t *testing.T) {
		sub := filepath.Join(dir, "etc")
		if err := os.MkdirAll(filepath.Join(sub, "certs"), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"server.crt", "server.key"} {
			b, err := os.ReadFile(filepath.Join("testdata/files", f))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(sub, "certs", f), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		text := strings.Replace(base, "protocol: http", "protocol: https", 1) +
			"    tls: {cert_file: certs/server.crt, key_file: certs/server.key}\n"
		file := filepath.Join(sub, "portcullis.yaml")
		if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := config.Load(file)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := c.Listeners[0].TLS.KeyFile, filepath.Join(sub, "certs", "server.key"); got != want {
			t.Errorf("KeyFile = %q, want %q", got, want)
		}
	})
}

func TestPos(t *testing.T) {
	c := mustParse(t, base+"    max_conns: 5\n")
	tests := []struct {
		path  string
		want  config.Position
		exact bool
	}{
		{"listeners[0].max_conns", config.Position{File: "portcullis.yaml", Line: 6, Column: 16}, true},
		{"listeners[0].routes[0].upstreams[0]", config.Position{File: "portcullis.yaml", Line: 5, Column: 21}, true},
		{"listeners[0].tls.cert_file", config.Position{File: "portcullis.yaml", Line: 2, Column: 5}, false},
	}
	for _, tt := range tests {
		got, exact := c.Pos(tt.path)
		if got != tt.want || exact != tt.exact {
			t.Errorf("Pos(%q) = %v, %v; want %v, %v", tt.path, got, exact, tt.want, tt.exact)
		}
	}
	// Effective keeps the positions, so the daemon can report on the copy it runs.
	if got, _ := c.Effective().Pos("listeners[0].max_conns"); got.Line != 6 {
		t.Errorf("Effective lost positions: %v", got)
	}
}

func TestDefaults(t *testing.T) {
	d := config.Default()
	if d.ShutdownTimeout != config.DefaultShutdownTimeout || d.Log.Format != config.LogText || d.Listeners != nil {
		t.Errorf("Default() = %+v", d)
	}
	if err := d.Validate(); err == nil || !strings.Contains(err.Error(), "at least one listener") {
		t.Errorf("Default().Validate() = %v, want the missing listener", err)
	}
	var nilConfig *config.Config
	if err := nilConfig.Validate(); !errors.Is(err, config.ErrInvalid) || nilConfig.Effective() != nil {
		t.Errorf("nil Config: Validate = %v, Effective = %v", err, nilConfig.Effective())
	}
	if got := config.LogLevel("warn").Slog().String(); got != "WARN" {
		t.Errorf("Slog() = %s", got)
	}
	if !config.ProtocolHTTP3.IsHTTP() || config.ProtocolTCP.IsHTTP() || config.ProtocolHTTP3.Network() != "udp" {
		t.Errorf("Protocol helpers are wrong")
	}
	if config.ProtocolTCP.Uses("routes") || !config.ProtocolTCP.Uses("upstream") || !config.ProtocolHTTP3.Uses("max_conns") {
		t.Errorf("Protocol.Uses is wrong")
	}
}

// The QUIC settings seed 003 states are expressible and kept as written: a
// minimum above the maximum, a max_in_progress below the maximum, Retry for
// every unproven attempt, and the handshake timeout.
func TestQUICSeedSettings(t *testing.T) {
	for _, tc := range []struct {
		name, quic string
		want       config.QUIC
	}{
		{"min above max", "{retry_threshold_min: 300, retry_threshold_max: 200}",
			config.QUIC{Retry: config.RetryAdaptive, RetryThresholdMin: 300, RetryThresholdMax: 200, MaxInProgress: 16384, HandshakeTimeout: 5 * time.Second}},
		{"max_in_progress below max", "{retry_threshold_min: 10, retry_threshold_max: 100, max_in_progress: 50}",
			config.QUIC{Retry: config.RetryAdaptive, RetryThresholdMin: 10, RetryThresholdMax: 100, MaxInProgress: 50, HandshakeTimeout: 5 * time.Second}},
		{"always retry", "{retry: always}",
			config.QUIC{Retry: config.RetryAlways, MaxInProgress: 16384, HandshakeTimeout: 5 * time.Second}},
		{"handshake timeout", "{handshake_timeout: 750ms}",
			config.QUIC{Retry: config.RetryAdaptive, RetryThresholdMin: 256, RetryThresholdMax: 4096, MaxInProgress: 16384, HandshakeTimeout: 750 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := mustParse(t, `listeners:
  - protocol: http3
    listen: :443
    tls: {cert_file: testdata/files/server.crt, key_file: testdata/files/server.key}
    quic: `+tc.quic+`
    routes: [{upstreams: [http://a]}]
`)
			e := c.Effective()
			if got := e.Listeners[0].QUIC; got != tc.want {
				t.Fatalf("effective quic %+v, want %+v", got, tc.want)
			}
			if err := e.Validate(); err != nil {
				t.Fatalf("the effective config does not validate: %v", err)
			}
			out, err := e.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			again, err := config.Parse("effective.yaml", out)
			if err != nil {
				t.Fatalf("the effective config does not parse back: %v\n%s", err, out)
			}
			if got := again.Listeners[0].QUIC; got != tc.want {
				t.Fatalf("after a round trip %+v, want %+v", got, tc.want)
			}
		})
	}
}
