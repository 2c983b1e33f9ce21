package proxyauth_test

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/crypto/bcrypt"

	"github.com/seed-a07d1050/portcullis/internal/proxyauth"
)

// TestCollector drives each outcome the collector counts and reads it back: a request
// without credentials, a wrong password, a right one (a bcrypt check) and the same again
// (from the cache), then a reload that fails and one that succeeds.
func TestCollector(t *testing.T) {
	file := writeUsers(t, t.TempDir(), bcrypt.MinCost, "alice", "alice-pw", "bob", "bob-pw")
	a := newAuth(t, proxyauth.Config{File: file})
	url := serve(t, a.Wrap(echoUser))
	c := clientFrom(t, "127.0.0.2")
	for _, r := range []struct {
		value string
		want  int
	}{
		{"", http.StatusProxyAuthRequired},
		{basic("alice", "nope"), http.StatusProxyAuthRequired},
		{basic("alice", "alice-pw"), http.StatusOK},
		{basic("alice", "alice-pw"), http.StatusOK},
	} {
		header := "Proxy-Authorization"
		if r.value == "" {
			header = ""
		}
		if got := get(t, c, url, header, r.value); got.status != r.want {
			t.Fatalf("%q: status %d, want %d", r.value, got.status, r.want)
		}
	}
	if err := os.WriteFile(file, []byte("alice:$apr1$abc$0123456789abcdefghijkl\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := a.Reload(); err == nil {
		t.Fatal("a reload of an MD5 hash succeeded")
	}
	writeUsers(t, filepath.Dir(file), bcrypt.MinCost, "alice", "alice-pw")
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}

	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(proxyauth.NewCollector(a, prometheus.Labels{"listener": "egress"}))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := make(map[string]float64)
	for _, mf := range families {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				if l.GetName() != "listener" {
					name += "/" + l.GetValue()
				} else if l.GetValue() != "egress" {
					t.Errorf("%s: listener %q", name, l.GetValue())
				}
			}
			switch {
			case m.Counter != nil:
				got[name] = m.Counter.GetValue()
			case m.Gauge != nil:
				got[name] = m.Gauge.GetValue()
			}
		}
	}
	want := map[string]float64{
		"portcullis_auth_requests_total/ok":             1,
		"portcullis_auth_requests_total/cached":         1,
		"portcullis_auth_requests_total/no_credentials": 1,
		"portcullis_auth_requests_total/failed":         1,
		"portcullis_auth_requests_total/over_budget":    0,
		"portcullis_auth_requests_total/busy":           0,
		"portcullis_auth_bcrypt_checks_total":           2,
		"portcullis_auth_users":                         1,
		"portcullis_auth_reloads_total/ok":              1,
		"portcullis_auth_reloads_total/error":           1,
	}
	for name, v := range want {
		if g, ok := got[name]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", name, g, ok, v)
		}
	}
	if _, ok := got["portcullis_auth_cached_credentials"]; !ok || len(got) != len(want)+1 {
		t.Errorf("series %v: want those above and portcullis_auth_cached_credentials", got)
	}
}
