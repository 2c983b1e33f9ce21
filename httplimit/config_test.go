package httplimit_test

import (
	"strings"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/httplimit"
)

func TestNewRejectsBadConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  httplimit.Config
		want string
	}{
		{"permits below -1", httplimit.Config{Permits: -2}, "Permits"},
		{"tunnel permits below -1", httplimit.Config{TunnelPermits: -5}, "TunnelPermits"},
		{"negative queue", httplimit.Config{QueueSize: -1}, "QueueSize"},
		{"negative wait", httplimit.Config{QueueTimeout: -time.Second}, "QueueTimeout"},
		{"status 200", httplimit.Config{Status: 200}, "Status"},
		{"status 600", httplimit.Config{Status: 600}, "Status"},
		{"override below -1", httplimit.Config{Overrides: map[string]int{"batch": -3}}, `Overrides["batch"]`},
		{"empty override key", httplimit.Config{Overrides: map[string]int{"": 3}}, "empty key"},
		{"tunnel func without tunnel permits", httplimit.Config{TunnelPermitsFor: func(string) int { return 1 }}, "TunnelPermitsFor"},
		{"ByUser(nil)", httplimit.Config{Key: httplimit.ByUser(nil)}, "ByUser(nil)"},
		{"ByHeader empty", httplimit.Config{Key: httplimit.ByHeader("")}, "ByHeader"},
		{"ByHeader with space", httplimit.Config{Key: httplimit.ByHeader("X User")}, "ByHeader"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := httplimit.New(tc.cfg)
			if err == nil {
				l.Close()
				t.Fatal("New accepted the config")
			}
			if !strings.HasPrefix(err.Error(), "httplimit: ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not name %s", err, tc.want)
			}
		})
	}
}

func TestNewAcceptsEdgeValues(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  httplimit.Config
	}{
		{"zero", httplimit.Config{}},
		{"unlimited", httplimit.Config{Permits: -1, TunnelPermits: -1, Overrides: map[string]int{"a": -1, "b": 0}}},
		{"status 503 and no Retry-After", httplimit.Config{Status: 503, RetryAfter: -1}},
		{"tunnel func", httplimit.Config{TunnelPermits: 2, TunnelPermitsFor: func(string) int { return 0 }}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := httplimit.New(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			l.Close()
		})
	}
}

func TestMaxConcurrentPerClientRejectsBadN(t *testing.T) {
	for _, n := range []int{0, -1, -64} {
		if mw, err := httplimit.MaxConcurrentPerClient(n); err == nil || mw != nil {
			t.Errorf("MaxConcurrentPerClient(%d) = non-nil %v, %v; want nil and an error", n, mw != nil, err)
		}
	}
}
