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
		got, err := Clean(tt.in, KeepSlashes)
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
		once, err := Clean(in, KeepSlashes)
		if err != nil {
			t.Fatal(err)
		}
		twice, err := Clean(once, KeepSlashes)
		if err != nil || twice != once {
			t.Errorf("Clean(Clean(%q)) = %q, %v; want %q", in, twice, err, once)
		}
	}
}

func TestCleanCanonicalDoesNotAllocate(t *testing.T) {
	for _, in := range []string{"/api/v1/users/42", "/.well-known/x", "/a%2Fb", "/a%252Fb", "/%7Ejo"} {
		for _, sl := range []Slashes{KeepSlashes, RejectSlashes, UnescapeSlashes} {
			if sl != KeepSlashes && HasEscapedSlash(in) {
				continue
			}
			if n := testing.AllocsPerRun(100, func() { _, _ = Clean(in, sl) }); n != 0 {
				t.Errorf("Clean(%q, %d) allocates %v times", in, sl, n)
			}
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
		if err := CleanURL(u, KeepSlashes); err != nil {
			t.Fatalf("CleanURL(%q): %v", tt.target, err)
		}
		if u.Path != tt.path || u.RequestURI() != tt.requestURI {
			t.Errorf("CleanURL(%q): Path %q RequestURI %q; want %q, %q", tt.target, u.Path, u.RequestURI(), tt.path, tt.requestURI)
		}
	}
	u, _ := url.ParseRequestURI("/a/../../b")
	if err := CleanURL(u, KeepSlashes); !errors.Is(err, ErrAmbiguous) || u.Path != "/a/../../b" {
		t.Errorf("CleanURL of a climbing path: %v, Path %q; want ErrAmbiguous and the URL untouched", err, u.Path)
	}
}

// FuzzClean checks Clean's promises on any input, under every Slashes: no
// panic; a result that is canonical (its own clean form) and free of dot
// segments and empty segments; an error that wraps ErrAmbiguous; no
// escaped slash left but under KeepSlashes, and under RejectSlashes an
// error for every input that holds one.
func FuzzClean(f *testing.F) {
	for _, s := range []string{"/", "//a", "/a/./b", "/a/../b", "/%2e%2E/x", "/..;/", "/a\\b", "/a%00", "/a/b/", "*", "",
		"/a%2Fb", "/x/..%2Fapi", "/%2f%2e%2e%2fapi", "/a%252Fb"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		for _, sl := range []Slashes{KeepSlashes, RejectSlashes, UnescapeSlashes} {
			out, err := Clean(in, sl)
			if err != nil {
				if !errors.Is(err, ErrAmbiguous) {
					t.Fatalf("Clean(%q, %d): error %v does not wrap ErrAmbiguous", in, sl, err)
				}
				continue
			}
			if sl == RejectSlashes && HasEscapedSlash(in) {
				t.Fatalf("Clean(%q, RejectSlashes) = %q, want an error", in, out)
			}
			if sl != KeepSlashes && HasEscapedSlash(out) {
				t.Fatalf("Clean(%q, %d) = %q keeps an escaped slash", in, sl, out)
			}
			if out == "*" {
				continue
			}
			if !strings.HasPrefix(out, "/") {
				t.Fatalf("Clean(%q, %d) = %q: not absolute", in, sl, out)
			}
			again, err := Clean(out, sl)
			if err != nil || again != out {
				t.Fatalf("Clean(%q, %d) = %q, cleaned again %q, %v", in, sl, out, again, err)
			}
			for _, seg := range strings.Split(out[1:], "/") {
				if dots(seg) != 0 {
					t.Fatalf("Clean(%q, %d) = %q keeps dot segment %q", in, sl, out, seg)
				}
			}
			if strings.Contains(out, "//") {
				t.Fatalf("Clean(%q, %d) = %q keeps an empty segment", in, sl, out)
			}
		}
	})
}

// TestCleanSlashes checks every spelling of an escaped slash under each
// Slashes: refused under RejectSlashes, decoded before the dot segments
// are resolved under UnescapeSlashes, kept under KeepSlashes. A double
// encoding ("%252F") is an escaped "%" followed by "2F": one decoding, as
// RFC 3986 asks of a backend, gives the text "%2F", no separator, so it is
// no escaped slash to any of them.
func TestCleanSlashes(t *testing.T) {
	tests := []struct {
		in, keep, unescape string // "" means an error
	}{
		{"/a%2Fb", "/a%2Fb", "/a/b"},
		{"/a%2fb", "/a%2fb", "/a/b"},
		{"/x/..%2Fapi/y", "/x/..%2Fapi/y", "/api/y"},
		{"/x/..%2fapi", "/x/..%2fapi", "/api"},
		{"/x%2F..%2Fapi", "/x%2F..%2Fapi", "/api"},
		{"/x/%2E%2E%2Fapi", "/x/%2E%2E%2Fapi", "/api"},
		{"/x/%2e%2e%2fapi", "/x/%2e%2e%2fapi", "/api"},
		{"/%2Fapi", "/%2Fapi", "/api"},
		{"/api%2F", "/api%2F", "/api/"},
		{"/%2F%2F", "/%2F%2F", "/"},
		{"/x/.%2F..%2Fapi", "/x/.%2F..%2Fapi", "/api"},
		{"/..%2Fapi", "/..%2Fapi", ""},
		{"/a%252Fb", "/a%252Fb", "/a%252Fb"},
		{"/x/..%252Fapi", "/x/..%252Fapi", "/x/..%252Fapi"},
		{"/x/..%5Capi", "", ""},
		{"/x/..%5capi", "", ""},
		{"/x\\..\\api", "", ""},
		{"/x/..%255Capi", "/x/..%255Capi", "/x/..%255Capi"},
	}
	for _, tt := range tests {
		for _, c := range []struct {
			sl   Slashes
			want string
		}{{KeepSlashes, tt.keep}, {UnescapeSlashes, tt.unescape}} {
			got, err := Clean(tt.in, c.sl)
			if c.want == "" {
				if !errors.Is(err, ErrAmbiguous) {
					t.Errorf("Clean(%q, %d) = %q, %v; want ErrAmbiguous", tt.in, c.sl, got, err)
				}
				continue
			}
			if err != nil || got != c.want {
				t.Errorf("Clean(%q, %d) = %q, %v; want %q", tt.in, c.sl, got, err, c.want)
			}
		}
		got, err := Clean(tt.in, RejectSlashes)
		switch {
		case HasEscapedSlash(tt.in):
			if !errors.Is(err, ErrEscapedSlash) || !errors.Is(err, ErrAmbiguous) {
				t.Errorf("Clean(%q, RejectSlashes) = %q, %v; want ErrEscapedSlash", tt.in, got, err)
			}
		case tt.keep == "":
			if !errors.Is(err, ErrAmbiguous) || errors.Is(err, ErrEscapedSlash) {
				t.Errorf("Clean(%q, RejectSlashes) = %q, %v; want ErrAmbiguous alone", tt.in, got, err)
			}
		case err != nil || got != tt.keep:
			t.Errorf("Clean(%q, RejectSlashes) = %q, %v; want %q", tt.in, got, err, tt.keep)
		}
	}
}

func TestHasEscapedSlash(t *testing.T) {
	for in, want := range map[string]bool{
		"": false, "/a/b": false, "/a%2Fb": true, "/a%2fb": true, "%2F": true, "/a%2": false,
		"/a%252Fb": false, "/a%%2Fb": true, "/a%5Cb": false, "/a%2Eb%2f": true,
	} {
		if got := HasEscapedSlash(in); got != want {
			t.Errorf("HasEscapedSlash(%q) = %v, want %v", in, got, want)
		}
	}
}

func BenchmarkCleanCanonical(b *testing.B) {
	for b.Loop() {
		_, _ = Clean("/api/v1/users/42/profile", RejectSlashes)
	}
}

func BenchmarkCleanEscaped(b *testing.B) {
	for b.Loop() {
		_, _ = Clean("/api/v1/users/%7Ejo/profile%20x", RejectSlashes)
	}
}
