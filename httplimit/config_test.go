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
		{"permits below -1", httplimit.Config{Policy: httplimit.Policy{Permits: -2}}, "Permits"},
		{"tunnel permits below -1", httplimit.Config{TunnelPermits: -5}, "TunnelPermits"},
		{"negative queue", httplimit.Config{Policy: httplimit.Policy{QueueSize: -1}}, "QueueSize"},
		{"negative wait", httplimit.Config{Policy: httplimit.Policy{QueueTimeout: -time.Second}}, "QueueTimeout"},
		{"status 200", httplimit.Config{Status: 200}, "Status"},
		{"status 600", httplimit.Config{Status: 600}, "Status"},
		{"override below -1", httplimit.Config{Policy: httplimit.Policy{Overrides: map[string]int{"batch": -3}}}, `Overrides["batch"]`},
		{"empty override key", httplimit.Config{Policy: httplimit.Policy{Overrides: map[string]int{"": 3}}}, "empty key"},
		{"tunnel func without tunnel permits", httplimit.Config{TunnelPermitsFor: func(string) int { return 1 }}, "TunnelPermitsFor"},
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

// A key constructor given bad input returns an error naming it and no
// function, so that a mistake is an error at start-up rather than a limit
// that silently never applies.
func TestKeyConstructorsRejectBadInput(t *testing.T) {
	for _, tc := range []struct {
		name string
		key  func() (httplimit.KeyFunc, error)
		want string
	}{
		{"ByUser(nil)", func() (httplimit.KeyFunc, error) { return httplimit.ByUser(nil) }, "ByUser(nil)"},
		{"ByHeader empty", func() (httplimit.KeyFunc, error) { return httplimit.ByHeader("") }, "ByHeader"},
		{"ByHeader with space", func() (httplimit.KeyFunc, error) { return httplimit.ByHeader("X User") }, "ByHeader"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := tc.key()
			if err == nil {
				t.Fatal("the constructor accepted the input")
			}
			if k != nil {
				t.Error("the constructor returned a KeyFunc with its error")
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
		{"unlimited", httplimit.Config{Policy: httplimit.Policy{Permits: -1, Overrides: map[string]int{"a": -1, "b": 0}}, TunnelPermits: -1}},
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
