package caddyportcullis_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
)

// The modules configured in Caddy's JSON directly, as the Caddyfile
// adapter writes them: the wrapper's fields and the handler's.
func TestJSONConfig(t *testing.T) {
	up := startUpstream(t)
	port := itoa(freePort(t))
	dir := t.TempDir()
	caddyMu.Lock()
	defer caddyMu.Unlock()
	cfg := `{
	"admin": {"listen": "unix/` + dir + `/admin.sock"},
	"storage": {"module": "file_system", "root": "` + dir + `/storage"},
	"logging": {"logs": {"default": {"writer": {"output": "discard"}}}},
	"apps": {"http": {"servers": {"test": {
		"listen": ["127.0.0.1:` + port + `"],
		"automatic_https": {"disable": true},
		"listener_wrappers": [{
			"wrapper": "portcullis", "name": "json", "per_client": 4,
			"levels": [{"ipv4_prefix": 24, "max": 100}],
			"overrides": [{"prefix": "127.0.0.9", "max": -1}],
			"trusted_proxies": ["10.0.0.0/8"]
		}],
		"routes": [{"handle": [
			{"handler": "portcullis_limit", "name": "json", "permits": 1, "queue_size": 0, "retry_after": "2s"},
			{"handler": "reverse_proxy", "upstreams": [{"dial": "` + up.addr + `"}]}
		]}]
	}}}}
}`
	if err := caddy.Load([]byte(cfg), true); err != nil {
		t.Fatalf("loading the JSON config: %v", err)
	}
	defer func() {
		if err := caddy.Stop(); err != nil {
			t.Error(err)
		}
	}()
	c := &instance{dir: dir, admin: adminClient(dir)}
	base := "http://127.0.0.1:" + port
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cl := clientFrom("127.0.0.2")
	first := get(ctx, cl, base+"/a", nil)
	waitFor(t, "one request at the upstream", func() bool { return up.running.Load() == 1 })
	r := wait(t, get(ctx, cl, base+"/b", nil))
	if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") != "2" {
		t.Fatalf("second request: %d Retry-After %q, want 429 and 2", r.status, r.header.Get("Retry-After"))
	}
	snap := c.limits(t)
	if h := snap.Handlers["json"]; h.Totals.InUse != 1 || h.Totals.Refused != 1 {
		t.Fatalf("handler snapshot %+v", h)
	}
	if l := snap.Listeners["json"]; len(l) != 1 || l[0].Stats.Accepted < 2 {
		t.Fatalf("listener snapshot %+v", l)
	}
	up.open()
	if r := wait(t, first); r.status != http.StatusOK {
		t.Fatalf("first request: %d %v", r.status, r.err)
	}
}

// What connlimit or httplimit would refuse is refused when the
// configuration is loaded, naming the field, not when the server starts.
func TestProvisionErrors(t *testing.T) {
	tests := []struct {
		name, module, want string
	}{
		{"override with host bits", `{"wrapper": "portcullis", "overrides": [{"prefix": "192.0.2.1/24", "max": 5}]}`, "host bits"},
		{"override not an address", `{"wrapper": "portcullis", "overrides": [{"prefix": "nowhere", "max": 5}]}`, "not an address"},
		{"level without max", `{"wrapper": "portcullis", "levels": [{"ipv6_prefix": 48}]}`, "Max must be positive"},
		{"level repeats the key", `{"wrapper": "portcullis", "levels": [{"ipv6_prefix": 64, "max": 5}]}`, "repeats the client key"},
		{"bad trusted proxy", `{"wrapper": "portcullis", "trusted_proxies": ["10.0.0.1/8"]}`, "trusted_proxies"},
		{"proxy protocol without trusted proxies", `{"wrapper": "portcullis", "proxy_protocol": true}`, "ProxyProtocol needs"},
		{"client prefix out of range", `{"wrapper": "portcullis", "ipv4_prefix": 33}`, "out of range"},
		{"negative per_client", `{"wrapper": "portcullis", "per_client": -5}`, "per_client"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := `{"apps": {"http": {"servers": {"s": {"listen": ["127.0.0.1:0"], "listener_wrappers": [` + tt.module + `]}}}}}`
			err := caddy.Validate(mustConfig(t, cfg))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate: %v, want an error containing %q", err, tt.want)
			}
		})
	}
	handlers := []struct {
		name, handler, want string
	}{
		{"negative permits", `{"handler": "portcullis_limit", "permits": -2}`, "Permits"},
		{"negative queue", `{"handler": "portcullis_limit", "queue_size": -1}`, "QueueSize"},
		{"status", `{"handler": "portcullis_limit", "status": 200}`, "Status"},
		{"duplicate name", `{"handler": "portcullis_limit", "name": "x"}, {"handler": "portcullis_limit", "name": "x"}`, "used twice"},
	}
	for _, tt := range handlers {
		t.Run(tt.name, func(t *testing.T) {
			cfg := `{"apps": {"http": {"servers": {"s": {"listen": ["127.0.0.1:0"], "routes": [{"handle": [` + tt.handler + `]}]}}}}}`
			err := caddy.Validate(mustConfig(t, cfg))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate: %v, want an error containing %q", err, tt.want)
			}
		})
	}
}
