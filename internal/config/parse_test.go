package config_test

import (
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/config"
)

func mustParse(t *testing.T, text string) *config.Config {
	t.Helper()
	c, err := config.Parse("portcullis.yaml", []byte(text))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return c
}

func TestLoadExamples(t *testing.T) {
	for _, file := range []string{"testdata/full.yaml", "testdata/minimal.yaml"} {
		t.Run(file, func(t *testing.T) {
			if _, err := config.Load(file); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestFullExampleValues spot-checks that every kind of field of full.yaml lands where the
// daemon will read it, with its documented type.
func TestFullExampleValues(t *testing.T) {
	c, err := config.Load("testdata/full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := files(t)
	web, h3, plain, egress, pg := c.Listeners[0], c.Listeners[1], c.Listeners[2], c.Listeners[3], c.Listeners[4]
	targets, users := egress.Forward.Limits[0], egress.Forward.Limits[1]
	api, ws := web.Routes[0], web.Routes[1]
	checks := []struct {
		name      string
		got, want any
	}{
		{"log format", c.Log.Format, config.LogJSON},
		{"shutdown", c.ShutdownTimeout, 30 * time.Second},
		{"redis password file made absolute", c.Cluster.Redis.PasswordFile, filepath.Join(dir, "redis.password")},
		{"redis timeout", c.Cluster.Timeout, 50 * time.Millisecond},
		{"node share", c.Cluster.NodeShare, 0.5},
		{"protocol", web.Protocol, config.ProtocolHTTPS},
		{"cert made absolute", web.TLS.CertFile, filepath.Join(dir, "server.crt")},
		{"deny file made absolute", web.DenyFile, filepath.Join(dir, "deny.list")},
		{"level", web.PrefixLevels[1], config.PrefixLevel{IPv6Prefix: 48, Max: 256}},
		{"single address override", web.ConnOverrides[1].CIDR.String(), "192.0.2.9/32"},
		{"override unlimited", web.ConnOverrides[1].Max, config.Unlimited},
		{"trusted proxy", web.TrustedProxies[1].String(), "fd00::/8"},
		{"client limit", web.ClientLimit.Permits, 256},
		{"route hosts", api.Host, []string{"example.com", "*.example.com"}},
		{"limit key", api.Limit.Key, config.HeaderKey("X-Api-Key")},
		{"limit overrides", api.Limit.Overrides, map[string]int{"batch": 32, "partner": -1}},
		{"queue", api.Limit.Queue, config.Queue{Size: 16, Timeout: 2 * time.Second}},
		{"shadow limit", api.ShadowLimit.Permits, 4},
		{"retry_after none", ws.Limit.RetryAfter, config.NoRetryAfter},
		{"tunnel permits", ws.Limit.TunnelPermits, 4},
		{"routes_from", h3.RoutesFrom, "web"},
		{"token key made absolute", h3.QUIC.TokenKeyFile, filepath.Join(dir, "token.key")},
		{"forwarded none", plain.ForwardedHeader, config.ForwardedNone},
		{"unnamed route", plain.Routes[0].Name, ""},
		{"htpasswd made absolute", plain.Auth.Htpasswd, filepath.Join(dir, "users.htpasswd")},
		{"auth failures", plain.Auth.Failures, config.AuthFailures{Burst: 10, Interval: 6 * time.Second}},
		{"mode", egress.Mode, config.ModeForward},
		{"client limit counts tunnels", *egress.ClientLimit.CountTunnels, true},
		{"destination allow", egress.Forward.Destinations.Allow[0].String(), "10.20.0.0/16"},
		{"destination ports", egress.Forward.Destinations.Ports, []string{"80", "443", "1024-65535"}},
		{"tunnel lifetime", egress.Forward.TunnelLifetime, 24 * time.Hour},
		{"via", egress.Forward.Via, "egress-1"},
		{"target_host first", targets.Key, config.KeyTargetHost},
		{"target overrides", targets.Overrides, map[string]int{"slow.example.com": 4, "api.example.com:8443": 64}},
		{"proxy_user second", users.Key, config.KeyProxyUser},
		{"reclaim_after", users.ReclaimAfter, 10 * time.Minute},
		{"response body", users.Response.Body, "slow down: 8 requests at once per user\n"},
		{"response header", users.Response.Headers["Link"], "<https://status.example.com/>; rel=help"},
		{"tcp upstream", pg.Upstream, "127.0.0.1:5432"},
		{"reset", pg.ResetOnRefuse, true},
		{"local share", c.Cluster.LocalShare, 0.1},
		{"flush interval", c.Cluster.FlushInterval, 10 * time.Millisecond},
		{"conn rate", *web.ConnRate, config.ConnRate{Rate: config.PerSecondRate(20), Burst: 40}},
		{"listener rate nodelay", web.Rate.Limit(), config.RateLimit{Rate: config.PerSecondRate(50), Burst: 100, Delay: config.RateNoDelay}},
		{"route rate", api.Rate.Limit(), config.RateLimit{Rate: config.PerSecondRate(10), Burst: 20, Delay: 5}},
		{"route rate headers", api.Rate.Headers, config.RateHeadersAlways},
		{"rate overrides", api.Rate.Overrides, map[string]config.RateLimit{
			"batch":   {Rate: config.PerSecondRate(100), Burst: 50, Delay: config.RateNoDelay},
			"partner": {Rate: config.UnlimitedRate},
		}},
		{"rate dry run", ws.Rate.DryRun, true},
		{"handshake rate", *h3.HandshakeRate, config.ConnRate{Rate: config.PerSecondRate(5), Burst: 10}},
		{"rate per minute by host", *plain.Rate, config.Rate{Rate: config.RateValue{Events: 600, Per: time.Minute}, Burst: 60, Key: config.KeyHost}},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s: got %#v, want %#v", c.name, c.got, c.want)
		}
	}
	if name, ok := api.Limit.Key.Header(); !ok || name != "X-Api-Key" {
		t.Errorf("Header() = %q, %v", name, ok)
	}
	if _, err := web.TLS.Certificate(); err != nil {
		t.Errorf("Certificate: %v", err)
	}
	if tc, err := c.Cluster.Redis.TLS.ClientConfig(); err != nil || tc.RootCAs == nil || len(tc.Certificates) != 1 || tc.ServerName != "localhost" {
		t.Errorf("ClientConfig = %+v, %v", tc, err)
	}
	if pw, err := c.Cluster.Redis.Password(); err != nil || pw != "test-only-password" {
		t.Errorf("Password = %q, %v", pw, err)
	}
	if key, err := config.ReadTokenKey(h3.QUIC.TokenKeyFile); err != nil || key == [32]byte{} {
		t.Errorf("ReadTokenKey = %x, %v", key, err)
	}
}

func TestRetryAfterSpellings(t *testing.T) {
	tests := []struct {
		value     string // "" leaves retry_after out
		want      time.Duration
		effective time.Duration
	}{
		{"", 0, config.DefaultRetryAfter},
		{"none", config.NoRetryAfter, config.NoRetryAfter},
		{"0", config.NoRetryAfter, config.NoRetryAfter},
		{"0s", config.NoRetryAfter, config.NoRetryAfter},
		{"3s", 3 * time.Second, 3 * time.Second},
		{"2m", 2 * time.Minute, 2 * time.Minute},
	}
	for _, tt := range tests {
		t.Run("retry_after="+tt.value, func(t *testing.T) {
			text := base + "        limit: {permits: 2}\n"
			if tt.value != "" {
				text = base + "        limit: {permits: 2, retry_after: " + tt.value + "}\n"
			}
			c := mustParse(t, text)
			if got := c.Listeners[0].Routes[0].Limit.RetryAfter; got != tt.want {
				t.Errorf("RetryAfter = %v, want %v", got, tt.want)
			}
			if got := c.Effective().Listeners[0].Routes[0].Limit.RetryAfter; got != tt.effective {
				t.Errorf("effective RetryAfter = %v, want %v", got, tt.effective)
			}
		})
	}
}

// TestMergeAndAliases checks anchors, aliases, merge keys and null values, which operators
// use to share limits between routes.
func TestMergeAndAliases(t *testing.T) {
	c := mustParse(t, `listeners:
  - protocol: http
    listen: 127.0.0.1:8080
    routes:
      - name: a
        path_prefix: /a
        upstreams: &ups [http://127.0.0.1:9000]
        limit: &strict {key: "header:X-Team", permits: 2, queue: {size: 4}}
      - name: b
        path_prefix: /b
        upstreams: *ups
        limit:
          <<: *strict
          permits: 5
      - name: c
        upstreams: *ups
        limit: ~
    client_limit: {}
log: ~
`)
	routes := c.Listeners[0].Routes
	if got := routes[1].Upstreams; !reflect.DeepEqual(got, []string{"http://127.0.0.1:9000"}) {
		t.Errorf("alias upstreams = %v", got)
	}
	want := config.Limit{Key: config.HeaderKey("X-Team"), Permits: 5, Queue: config.Queue{Size: 4}}
	if got := *routes[1].Limit; !reflect.DeepEqual(got, want) {
		t.Errorf("merged limit = %+v, want %+v", got, want)
	}
	if routes[0].Limit.Permits != 2 {
		t.Errorf("the merge changed the anchored limit: %+v", routes[0].Limit)
	}
	if routes[2].Limit != nil {
		t.Errorf("limit: ~ gave %+v, want nil (no limit)", routes[2].Limit)
	}
	if got, want := *c.Effective().Listeners[0].ClientLimit, config.DefaultLimit(); !reflect.DeepEqual(got, want) {
		t.Errorf("client_limit: {} = %+v, want DefaultLimit %+v", got, want)
	}
	if c.Log != (config.Log{}) {
		t.Errorf("log: ~ gave %+v", c.Log)
	}
}

// TestAliasBomb feeds a small document whose aliases expand to millions of values.
func TestAliasBomb(t *testing.T) {
	var b strings.Builder
	b.WriteString("x-route: &r {upstreams: [http://127.0.0.1:9000]}\n")
	b.WriteString("x-listener: &l {protocol: http, listen: \":80\", routes: [*r" + strings.Repeat(", *r", 999) + "]}\n")
	b.WriteString("listeners: [*l" + strings.Repeat(", *l", 999) + "]\n")
	start := time.Now()
	_, err := config.Parse("bomb.yaml", []byte(b.String()))
	if elapsed := time.Since(start); elapsed > 10*time.Second {
		t.Errorf("Parse took %v", elapsed)
	}
	if err == nil || !errors.Is(err, config.ErrInvalid) {
		t.Fatalf("Parse = %v, want an ErrInvalid error", err)
	}
	msgs := strings.Split(err.Error(), "\n")
	want := "document too large: more than 200000 values after expanding aliases"
	if !strings.Contains(err.Error(), want) || len(msgs) > 3 {
		t.Errorf("Parse error has %d lines, want the size error and the two unknown fields:\n%s", len(msgs), err)
	}
}

// TestAcceptedForms checks spellings that must stay valid: address forms, URLs, host
// patterns, keys and paths near the edges of what the checks refuse.
func TestAcceptedForms(t *testing.T) {
	tests := []struct {
		name, yaml string
	}{
		{"listen all interfaces", strings.Replace(base, "127.0.0.1:8080", "\":8080\"", 1)},
		{"listen free port", strings.Replace(base, "127.0.0.1:8080", "127.0.0.1:0", 1)},
		{"listen IPv6", strings.Replace(base, "127.0.0.1:8080", "\"[::1]:8080\"", 1)},
		{"listen IPv6 zone", strings.Replace(base, "127.0.0.1:8080", "\"[fe80::1%lo]:8080\"", 1)},
		{"listen host name", strings.Replace(base, "127.0.0.1:8080", "localhost:8080", 1)},
		{"two listeners on port 0", base + "  - protocol: http\n    listen: 127.0.0.1:0\n    routes_from: http-0\n" +
			"  - protocol: http\n    listen: 127.0.0.1:0\n    routes_from: http-0\n"},
		{"https and http3 on one port", strings.Replace(base, "protocol: http", "protocol: https", 1) +
			"    tls: {cert_file: testdata/files/server.crt, key_file: testdata/files/server.key}\n" +
			"  - protocol: http3\n    listen: 127.0.0.1:8080\n    routes_from: https-0\n" +
			"    tls: {cert_file: testdata/files/server.crt, key_file: testdata/files/server.key}\n"},
		{"upstream IPv6 with port", strings.Replace(base, "http://127.0.0.1:9000", "\"https://[::1]:8443\"", 1)},
		{"upstream trailing slash", strings.Replace(base, "http://127.0.0.1:9000", "http://backend_1/", 1)},
		{"host patterns", base + "        host: [example.com, \"*.example.com\", 192.0.2.1, \"2001:db8::1\", EXAMPLE.org]\n"},
		{"path prefixes", base + "        path_prefix: /api/v1/\n      - path_prefix: /api\n        upstreams: [http://a]\n"},
		{"same path on other hosts", base + "      - host: [a.example]\n        upstreams: [http://a]\n"},
		{"header key", base + "        limit: {key: \"header:X-Api_Key.1\", overrides: {abc: -1}}\n"},
		{"client_ip overrides", base + "        limit: {overrides: {\"10.0.0.0/8\": 10, \"2001:db8::/32\": -1, 192.0.2.1: 2}}\n"},
		{"unlimited everything", base + "        limit: {permits: -1, tunnel_permits: -1}\n    max_conns_per_client: -1\n"},
		{"prefix levels", base + "    ipv4_prefix: 24\n    ipv6_prefix: 56\n    prefix_levels: [{ipv4_prefix: 16, ipv6_prefix: 48, max: 100}]\n"},
		{"enforce_above below max_conns", base + "    max_conns: 100\n    enforce_above: 99\n"},
		{"proxy protocol", base + "    trusted_proxies: [10.0.0.0/8, \"::1\"]\n    proxy_protocol: true\n"},
		{"tcp listener with caps", "listeners:\n  - protocol: tcp\n    listen: :5432\n    upstream: \"[::1]:5432\"\n    reset_on_refuse: true\n    proxy_protocol: true\n    trusted_proxies: [127.0.0.1]\n"},
		{"syn filter with local caps in a cluster", base + "    syn_filter: true\ncluster: {redis: {addrs: [\"a:1\"]}, local_connection_caps: true}\n"},
		{"redis cluster", base + "cluster: {redis: {addrs: [\"a:1\", \"b:1\"]}, on_error: closed, node_share: 0.25, lease: 1s, timeout: 999ms}\n"},
		{"null blocks", base + "cluster: ~\nadmin: ~\nlog: ~\n"},
		{"null prefix means the default", base + "    ipv6_prefix: ~\n    ipv4_prefix:\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mustParse(t, tt.yaml)
		})
	}
}
