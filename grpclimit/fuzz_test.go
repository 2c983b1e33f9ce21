package grpclimit_test

import (
	"strings"
	"testing"

	"github.com/seed-a07d1050/portcullis/grpclimit"
)

// FuzzMethods checks the parsing of Config.Methods entries and metadata
// key names: New refuses what it cannot use, with an error, never a panic,
// and accepts only the documented shapes.
func FuzzMethods(f *testing.F) {
	for _, s := range []string{"/pkg.Svc/Method", "/pkg.Svc/", "pkg.Svc/M", "//", "/a/b/c", "/a b/c", "x-api-key", "X-Api-Key", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := grpclimit.New(grpclimit.Config{Methods: []string{s}, Logger: quietLogger, Policy: grpclimit.Policy{ReclaimAfter: -1}})
		if err == nil {
			l.Close()
			rest, ok := strings.CutPrefix(s, "/")
			service, method, two := strings.Cut(rest, "/")
			if !ok || !two || service == "" || strings.Contains(method, "/") || strings.ContainsAny(s, " \t\r\n") {
				t.Fatalf("Methods entry %q accepted", s)
			}
		} else if !strings.HasPrefix(err.Error(), "grpclimit: Methods[0]") {
			t.Fatalf("error %q does not name the entry", err)
		}
		key, err := grpclimit.ByMetadata(s)
		if err == nil {
			if key == nil {
				t.Fatalf("ByMetadata(%q) returned neither a KeyFunc nor an error", s)
			}
			if s == "" || strings.ToLower(s) != strings.Map(func(r rune) rune {
				if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' {
					return r
				}
				return -1
			}, strings.ToLower(s)) {
				t.Fatalf("metadata key %q accepted", s)
			}
		} else if key != nil {
			t.Fatalf("ByMetadata(%q) returned a KeyFunc with its error", s)
		}
	})
}
