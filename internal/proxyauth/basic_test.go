package proxyauth

import (
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
)

func basic(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

func TestParseBasic(t *testing.T) {
	for _, tc := range []struct {
		name, value, user, pass string
		ok                      bool
	}{
		{"plain", basic("alice", "pw"), "alice", "pw", true},
		{"colon in password", basic("alice", "a:b"), "alice", "a:b", true},
		{"empty password", basic("alice", ""), "alice", "", true},
		{"lower-case scheme", "basic " + base64.StdEncoding.EncodeToString([]byte("a:b")), "a", "b", true},
		{"spaces after scheme", "Basic    " + base64.StdEncoding.EncodeToString([]byte("a:b")), "a", "b", true},
		{"no colon", "Basic " + base64.StdEncoding.EncodeToString([]byte("alice")), "", "", false},
		{"bad base64", "Basic !!!", "", "", false},
		{"other scheme", "Bearer abc", "", "", false},
		{"kelvin sign is not k", "Basic\u212a", "", "", false},
		{"scheme only", "Basic", "", "", false},
		{"too long", "Basic " + base64.StdEncoding.EncodeToString([]byte("a:"+strings.Repeat("x", maxCredentialBytes))), "", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			user, pass, ok := parseBasic(tc.value)
			if user != tc.user || pass != tc.pass || ok != tc.ok {
				t.Errorf("parseBasic(%q) = %q, %q, %v; want %q, %q, %v", tc.value, user, pass, ok, tc.user, tc.pass, tc.ok)
			}
		})
	}
}

// FuzzParseBasic checks parseBasic against net/http's Request.BasicAuth,
// on the values both are meant to read alike: a single space after the
// scheme and credentials within the length bound.
// ci:fuzztime 100000x: it reads the credentials a proxy client sends.
func FuzzParseBasic(f *testing.F) {
	for _, s := range []string{basic("a", "b"), "basic YTpi", "Basic  YTpi", "Basic", "BASIC YTpi", "Basic \u212a"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		user, pass, ok := parseBasic(v)
		r := &http.Request{Header: http.Header{"Authorization": {v}}}
		wu, wp, wok := r.BasicAuth()
		comparable := len(v) <= maxCredentialBytes && !strings.HasPrefix(strings.ToLower(v), "basic  ")
		if comparable && (user != wu || pass != wp || ok != wok) {
			t.Fatalf("parseBasic(%q) = %q, %q, %v; net/http reads %q, %q, %v", v, user, pass, ok, wu, wp, wok)
		}
		if ok && len(user)+len(pass)+1 > maxCredentialBytes {
			t.Fatalf("accepted %d bytes of credentials", len(user)+len(pass)+1)
		}
	})
}
