package httppath

import (
	"errors"
	"net/url"
	"strings"
	"testing"
)

func TestClean(t *testing.T) {
	tests := []struct {
		in, want string // want "" means an error
	}{
		{"", "/"},
		{"*", "*"},
		{"/", "/"},
		{"/api/x", "/api/x"},
		{"/api/x/", "/api/x/"},
		{"//api/x", "/api/x"},
		{"///api//x//", "/api/x/"},
		{"/./api/x", "/api/x"},
		{"/x/../api/x", "/api/x"},
		{"/x/%2e%2e/api/x", "/api/x"},
		{"/x/%2E%2e/api/x", "/api/x"},
		{"/x/.%2e/api/x", "/api/x"},
		{"/%2e/api/x", "/api/x"},
		{"/api/x/.", "/api/x/"},
		{"/api/x/..", "/api/"},
		{"/api/x/../..", "/"},
		{"/a/b/c/./../../g", "/a/g"},
		{"/mid/content=5/../6", "/mid/6"},
		{"/.well-known/acme", "/.well-known/acme"},
		{"/a/.hidden/..x/...", "/a/.hidden/..x/..."},
		{"/a%2Fb/c", "/a%2Fb/c"},
		{"/%61pi/x", "/%61pi/x"},
		{"/a;b/c", "/a;b/c"},
		{"/..", ""},
		{"/%2e%2e/api", ""},
		{"/a/../../api", ""},
		{"/..;/api", ""},
		{"/x/..;/api", ""},
		{"/x/.;/api", ""},
		{"/a\\b", ""},
		{"/a%5cb", ""},
		{"/a%5Cb", ""},
		{"/a%00b", ""},
		{"/a%0Ab", ""},
		{"/a%1fb", ""},
		{"/a%7Fb", ""},
		{"api/x", ""},
	}
	for _, tt := range tests {
		got, err := Clean(tt.in)
		if tt.want == "" {
			if !errors.Is(err, ErrAmbiguous) {
				t.Errorf("Clean(%q) = %q, %v; want ErrAmbiguous", tt.in, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("Clean(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

// TestCleanIsIdempotent checks that a cleaned path is its own clean form:
// what the proxy forwards cleans to what it routed on.
func TestCleanIsIdempotent(t *testing.T) {
	for _, in := range []string{"//a/./b/../c//", "/x/%2e%2e/y/", "/a/b/.", "/"} {
		once, err := Clean(in)
		if err != nil {
			t.Fatal(err)
		}
		twice, err := Clean(once)
		if err != nil || twice != once {
			t.Errorf("Clean(Clean(%q)) = %q, %v; want %q", in, twice, err, once)
		}
	}
}

func TestCleanCanonicalDoesNotAllocate(t *testing.T) {
	for _, in := range []string{"/api/v1/users/42", "/.well-known/x", "/a%2Fb"} {
		if n := testing.AllocsPerRun(100, func() { _, _ = Clean(in) }); n != 0 {
			t.Errorf("Clean(%q) allocates %v times", in, n)
		}
	}
}

func TestCleanURL(t *testing.T) {
	tests := []struct {
		target, path, requestURI string
	}{
		{"/x/../api/x?q=1", "/api/x", "/api/x?q=1"},
		{"//api/x", "/api/x", "/api/x"},
		{"/x/%2e%2e/a%2Fb", "/a/b", "/a%2Fb"},
		{"/api/x", "/api/x", "/api/x"},
	}
	for _, tt := range tests {
		u, err := url.ParseRequestURI(tt.target)
		if err != nil {
			t.Fatal(err)
		}
		if err := CleanURL(u); err != nil {
			t.Fatalf("CleanURL(%q): %v", tt.target, err)
		}
		if u.Path != tt.path || u.RequestURI() != tt.requestURI {
			t.Errorf("CleanURL(%q): Path %q RequestURI %q; want %q, %q", tt.target, u.Path, u.RequestURI(), tt.path, tt.requestURI)
		}
	}
	u, _ := url.ParseRequestURI("/a/../../b")
	if err := CleanURL(u); !errors.Is(err, ErrAmbiguous) || u.Path != "/a/../../b" {
		t.Errorf("CleanURL of a climbing path: %v, Path %q; want ErrAmbiguous and the URL untouched", err, u.Path)
	}
}

// FuzzClean checks Clean's promises on any input: no panic; a result that
// is canonical (its own clean form) and free of dot segments and empty
// segments; an error that wraps ErrAmbiguous.
func FuzzClean(f *testing.F) {
	for _, s := range []string{"/", "//a", "/a/./b", "/a/../b", "/%2e%2E/x", "/..;/", "/a\\b", "/a%00", "/a/b/", "*", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out, err := Clean(in)
		if err != nil {
			if !errors.Is(err, ErrAmbiguous) {
				t.Fatalf("Clean(%q): error %v does not wrap ErrAmbiguous", in, err)
			}
			return
		}
		if out == "*" {
			return
		}
		if !strings.HasPrefix(out, "/") {
			t.Fatalf("Clean(%q) = %q: not absolute", in, out)
		}
		again, err := Clean(out)
		if err != nil || again != out {
			t.Fatalf("Clean(%q) = %q, cleaned again %q, %v", in, out, again, err)
		}
		for _, seg := range strings.Split(out[1:], "/") {
			if dots(seg) != 0 {
				t.Fatalf("Clean(%q) = %q keeps dot segment %q", in, out, seg)
			}
		}
		if strings.Contains(out, "//") {
			t.Fatalf("Clean(%q) = %q keeps an empty segment", in, out)
		}
	})
}

func BenchmarkCleanCanonical(b *testing.B) {
	for b.Loop() {
		_, _ = Clean("/api/v1/users/42/profile")
	}
}
