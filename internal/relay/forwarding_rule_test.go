package relay

import (
	"net/http"
	"strings"
	"testing"
)

// referenceSpoofRule is spoofRule without the shape filter: lower-case the
// name, read '_' as '-', look it up.
func referenceSpoofRule(name string) stripRule {
	key := strings.ReplaceAll(strings.ToLower(name), "_", "-")
	rule := spoofable[key]
	if rule == stripUntrusted && strings.Contains(name, "_") {
		return stripAlways
	}
	return rule
}

// TestSpoofRuleMatchesTheTable: the filter that spares most names the
// lookup never spares a spoofable one, under any spelling.
func TestSpoofRuleMatchesTheTable(t *testing.T) {
	var names []string
	for name := range spoofable {
		canon := http.CanonicalHeaderKey(name)
		names = append(names, name, strings.ToUpper(name), canon,
			strings.ReplaceAll(name, "-", "_"), strings.ReplaceAll(canon, "-", "_"),
			name+"x", name[:len(name)-1], "x"+name)
	}
	names = append(names, "Host", "Accept", "Cookie", "User-Agent", "Accept-Encoding", "Content-Length",
		"Connection", "X", "", "C", "T", "F", "_", strings.Repeat("x", 40), "X-Forwarded-For-Extra")
	for _, name := range names {
		if got, want := spoofRule(name), referenceSpoofRule(name); got != want {
			t.Errorf("spoofRule(%q) = %v, want %v", name, got, want)
		}
	}
}

// FuzzSpoofRule holds spoofRule to the plain lookup for any name.
// ci:fuzztime 20000x
func FuzzSpoofRule(f *testing.F) {
	for name := range spoofable {
		f.Add(name)
	}
	f.Add("Cookie")
	f.Fuzz(func(t *testing.T, name string) {
		if got, want := spoofRule(name), referenceSpoofRule(name); got != want {
			t.Fatalf("spoofRule(%q) = %v, want %v", name, got, want)
		}
	})
}

// TestRemoveHopHeaders: the fixed hop-by-hop fields and those the
// Connection field names go; the rest stay.
func TestRemoveHopHeaders(t *testing.T) {
	h := http.Header{
		"Connection":          {"close, X-Private", "Keep-Alive"},
		"Keep-Alive":          {"timeout=5"},
		"Proxy-Connection":    {"keep-alive"},
		"Proxy-Authenticate":  {"Basic"},
		"Proxy-Authorization": {"Basic eA=="},
		"Te":                  {"trailers"},
		"Trailer":             {"X-T"},
		"Transfer-Encoding":   {"chunked"},
		"Upgrade":             {"h2c"},
		"X-Private":           {"1"},
		"Content-Type":        {"text/plain"},
		"Content-Length":      {"2"},
		"X-Public":            {"2"},
	}
	removeHopHeaders(h)
	if len(h) != 3 || h.Get("Content-Type") == "" || h.Get("Content-Length") == "" || h.Get("X-Public") == "" {
		t.Fatalf("left %v, want Content-Type, Content-Length and X-Public", h)
	}
}
