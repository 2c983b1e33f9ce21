package caddyportcullis_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	caddyportcullis "github.com/seed-a07d1050/portcullis/caddy"
)

func TestListenerCaddyfile(t *testing.T) {
	tests := []struct {
		name, in string
		want     caddyportcullis.ListenerWrapper
		err      string
	}{
		{"bare", `portcullis`, caddyportcullis.ListenerWrapper{}, ""},
		{"inline cap", `portcullis 16`, caddyportcullis.ListenerWrapper{PerClient: 16}, ""},
		{"everything", `portcullis {
			name edge
			per_client unlimited
			client_prefix ipv4 32 ipv6 56
			level ipv6 48 max 256
			level max 1024 ipv4 24
			override 192.0.2.0/24 512
			override 198.51.100.7 unlimited
			trusted_proxies 10.0.0.0/8 192.0.2.1
			proxy_protocol 2s
			max_conns 10000
			enforce_above 100
			reset_on_refuse
		}`, caddyportcullis.ListenerWrapper{
			Name: "edge", PerClient: -1, IPv4Prefix: 32, IPv6Prefix: 56,
			Levels:         []caddyportcullis.Level{{IPv6Prefix: 48, Max: 256}, {IPv4Prefix: 24, Max: 1024}},
			Overrides:      []caddyportcullis.Override{{Prefix: "192.0.2.0/24", Max: 512}, {Prefix: "198.51.100.7", Max: -1}},
			TrustedProxies: []string{"10.0.0.0/8", "192.0.2.1"}, ProxyProtocol: true,
			ProxyHeaderTimeout: caddy.Duration(2e9), MaxConns: 10000, EnforceAbove: 100, ResetOnRefuse: true,
		}, ""},
		{"zero cap", `portcullis 0`, caddyportcullis.ListenerWrapper{}, "want a whole number ≥ 1"},
		{"two args", `portcullis 1 2`, caddyportcullis.ListenerWrapper{}, "wrong argument count"},
		{"unknown option", `portcullis {
			per_clients 3
		}`, caddyportcullis.ListenerWrapper{}, `unknown portcullis listener option "per_clients"`},
		{"level without max", `portcullis {
			level ipv4 24
		}`, caddyportcullis.ListenerWrapper{}, "max <n> is required"},
		{"level odd args", `portcullis {
			level ipv4
		}`, caddyportcullis.ListenerWrapper{}, "want pairs"},
		{"repeated ipv4", `portcullis {
			client_prefix ipv4 24 ipv4 16
		}`, caddyportcullis.ListenerWrapper{}, "repeated"},
		{"negative max_conns", `portcullis {
			max_conns -1
		}`, caddyportcullis.ListenerWrapper{}, "want a whole number ≥ 0"},
		{"bad timeout", `portcullis {
			proxy_protocol soon
		}`, caddyportcullis.ListenerWrapper{}, "want a duration"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got caddyportcullis.ListenerWrapper
			err := got.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tt.in))
			checkParse(t, err, tt.err, &got, &tt.want)
		})
	}
}

func TestHandlerCaddyfile(t *testing.T) {
	tests := []struct {
		name, in string
		want     caddyportcullis.Handler
		err      string
	}{
		{"bare", `portcullis_limit`, caddyportcullis.Handler{}, ""},
		{"inline permits", `portcullis_limit 2`, caddyportcullis.Handler{Permits: 2}, ""},
		{"everything", `portcullis_limit {
			name api
			key {http.auth.user.id}
			client_prefix ipv6 48
			permits 8
			override alice 32
			override batch unlimited
			queue 16 2s
			shadow
			status 503
			retry_after 5s
		}`, caddyportcullis.Handler{
			Name: "api", Key: "{http.auth.user.id}", IPv6Prefix: 48, Permits: 8,
			Overrides: map[string]int{"alice": 32, "batch": -1}, QueueSize: 16, QueueTimeout: caddy.Duration(2e9),
			Shadow: true, Status: 503, RetryAfter: caddy.Duration(5e9),
		}, ""},
		{"queue without timeout", `portcullis_limit {
			queue 4
		}`, caddyportcullis.Handler{QueueSize: 4}, ""},
		{"retry_after off", `portcullis_limit {
			retry_after off
		}`, caddyportcullis.Handler{RetryAfter: -1}, ""},
		{"zero permits", `portcullis_limit {
			permits 0
		}`, caddyportcullis.Handler{}, "want a whole number ≥ 1"},
		{"status out of range", `portcullis_limit {
			status 200
		}`, caddyportcullis.Handler{}, "400..599"},
		{"negative queue", `portcullis_limit {
			queue -1
		}`, caddyportcullis.Handler{}, "want a whole number ≥ 0"},
		{"queue three args", `portcullis_limit {
			queue 1 2s 3
		}`, caddyportcullis.Handler{}, "wrong argument count"},
		{"key without template", `portcullis_limit {
			key
		}`, caddyportcullis.Handler{}, "wrong argument count"},
		{"zero retry_after", `portcullis_limit {
			retry_after 0s
		}`, caddyportcullis.Handler{}, "positive duration"},
		{"unknown option", `portcullis_limit {
			permit 3
		}`, caddyportcullis.Handler{}, `unknown portcullis_limit option "permit"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got caddyportcullis.Handler
			err := got.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tt.in))
			checkParse(t, err, tt.err, &got, &tt.want)
		})
	}
}

// checkParse compares a parse's result by its JSON form, which is what
// Caddy runs.
func checkParse(t *testing.T, err error, wantErr string, got, want any) {
	t.Helper()
	if wantErr != "" {
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("error %v, want one containing %q", err, wantErr)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("parsed\n%s\nwant\n%s", g, w)
	}
}

// FuzzCaddyfile feeds arbitrary Caddyfile text to both parsers: they may
// refuse it, but never panic, and what they accept survives a JSON round
// trip unchanged. ci:fuzztime 50000x when .ci/run fuzzes it (FUZZ_CADDY=1:
// each execution runs Caddy's adapter, and the build of Caddy with fuzzing
// instrumentation takes minutes on a cold machine).
func FuzzCaddyfile(f *testing.F) {
	for _, s := range []string{
		"portcullis 16", "portcullis {\n level ipv6 48 max 256\n override 192.0.2.0/24 512\n}",
		"portcullis_limit 2", "portcullis_limit {\n key {http.auth.user.id}\n queue 8 5s\n retry_after off\n}",
		"portcullis {\n client_prefix ipv4\n}", "portcullis_limit {\n status 9999999999999999999\n}",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		var w caddyportcullis.ListenerWrapper
		if d, ok := dispenser("portcullis " + in); ok && w.UnmarshalCaddyfile(d) == nil {
			roundTrip(t, &w, new(caddyportcullis.ListenerWrapper))
		}
		var h caddyportcullis.Handler
		if d, ok := dispenser("portcullis_limit " + in); ok && h.UnmarshalCaddyfile(d) == nil {
			roundTrip(t, &h, new(caddyportcullis.Handler))
		}
	})
}

// dispenser tokenizes in as Caddy's adapter does; ok is false for text
// Caddy's own lexer refuses, which never reaches the parsers
// (caddyfile.NewTestDispenser exits the process on such text).
func dispenser(in string) (*caddyfile.Dispenser, bool) {
	tokens, err := caddyfile.Tokenize([]byte(in), "Caddyfile")
	if err != nil {
		return nil, false
	}
	return caddyfile.NewDispenser(tokens), true
}

func roundTrip(t *testing.T, v, fresh any) {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, fresh); err != nil {
		t.Fatalf("%s does not read back: %v", b, err)
	}
	b2, _ := json.Marshal(fresh)
	if string(b) != string(b2) {
		t.Fatalf("round trip changed %s into %s", b, b2)
	}
}
