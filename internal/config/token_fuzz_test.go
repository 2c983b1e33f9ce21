package config

import (
	"regexp"
	"testing"
)

// b64token is RFC 6750's b64token, the oracle for isBearerToken.
var b64token = regexp.MustCompile(`^[A-Za-z0-9\-._~+/]+=*$`)

// FuzzBearerToken checks isBearerToken against the RFC's grammar written as
// a regular expression, plus the minimum length.
func FuzzBearerToken(f *testing.F) {
	for _, s := range []string{"", "short", "b3f1c0c2a7d84e2f9a61d5e0c4b8a9f7", "================", "abcdefghijklmno=", "abc def ghi jkl mno", "abcdefghijklmnop\n", "ab=cdefghijklmnopq"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want := len(s) >= MinAdminTokenLen && b64token.MatchString(s)
		if got := isBearerToken(s); got != want {
			t.Fatalf("isBearerToken(%q) = %v, want %v", s, got, want)
		}
	})
}
