// Package httppath puts the path of an HTTP request target in the one
// canonical form that both the proxy's routes and the upstream act on.
//
// A route limit on "/api" decides on the path the proxy sees; the upstream
// acts on the path it receives. When a client spells "/api/x" as
// "//api/x", "/./api/x", "/x/../api/x" or "/x/%2e%2e/api/x", a proxy that
// routes on the raw text misses the route while common backends resolve
// the spelling back to "/api/x": the limit is walked around. [Clean] removes
// that freedom: the proxy routes on the cleaned path and forwards the same
// cleaned path, so the upstream can only act on what was routed.
//
// Cleaning follows RFC 3986 §5.2.4 (remove_dot_segments) on the escaped
// path, with dots written as %2e counted as dots, and merges repeated
// slashes as nginx's merge_slashes does. Other escapes are kept as they
// were written: "%2F" stays an escaped slash inside its segment, since
// backends that tell "a%2Fb" from "a/b" must keep seeing the difference.
//
// Spellings that some backend resolves differently from RFC 3986, and that
// no browser or ordinary client sends, are refused with [ErrAmbiguous]
// rather than guessed at:
//
//   - a backslash, raw or escaped (%5C), which IIS and some frameworks
//     read as "/";
//   - an escaped control character (%00 to %1F, %7F), which C backends
//     may read as the end of the path;
//   - a dot segment with parameters ("..;x", ".;"), which Tomcat and Jetty
//     resolve as "..";
//   - a ".." that would climb above the root.
package httppath

import (
	"errors"
	"net/url"
	"strings"
)

// ErrAmbiguous is returned for a path that backends may resolve in more
// than one way; a proxy answers it with 400 Bad Request.
var ErrAmbiguous = errors.New("httppath: ambiguous request path")

// Clean returns the canonical form of escaped, the escaped path of an
// origin-form request target (what [url.URL.EscapedPath] returns): dot
// segments resolved, repeated slashes merged, a trailing slash kept. A path
// already canonical is returned as is, without allocating. An empty path is
// "/"; "*" (the target of OPTIONS *) is returned as is. Any other path that
// does not start with "/" is an error, as is one of the ambiguous spellings
// of the package documentation; the error wraps [ErrAmbiguous].
func Clean(escaped string) (string, error) {
	switch {
	case escaped == "":
		return "/", nil
	case escaped == "*":
		return escaped, nil
	case escaped[0] != '/':
		return "", ambiguous("does not start with /", escaped)
	}
	needs, err := scan(escaped)
	if err != nil || !needs {
		return escaped, err
	}
	return resolve(escaped)
}

// scan reports whether escaped needs resolve, or an error for what can be
// refused byte by byte. It allocates nothing.
func scan(escaped string) (needs bool, err error) {
	for i := 0; i < len(escaped); i++ {
		switch c := escaped[i]; c {
		case '\\':
			return false, ambiguous("holds a backslash", escaped)
		case '/':
			if i+1 < len(escaped) && (escaped[i+1] == '/' || dots(segmentAt(escaped, i+1)) != 0) {
				needs = true
			}
		case '%':
			if i+2 >= len(escaped) {
				continue // url.URL validated the escapes; a short one is not ours to judge
			}
			h, l := upper(escaped[i+1]), upper(escaped[i+2])
			switch {
			case h == '5' && l == 'C':
				return false, ambiguous("holds an escaped backslash", escaped)
			case h == '0' || h == '1' || (h == '7' && l == 'F'):
				return false, ambiguous("holds an escaped control character", escaped)
			}
		}
	}
	return needs, nil
}

// segmentAt returns the segment of escaped that starts at i.
func segmentAt(escaped string, i int) string {
	s := escaped[i:]
	if j := strings.IndexByte(s, '/'); j >= 0 {
		return s[:j]
	}
	return s
}

func upper(c byte) byte {
	if 'a' <= c && c <= 'z' {
		return c - ('a' - 'A')
	}
	return c
}

// resolve applies remove_dot_segments and merges empty segments.
func resolve(escaped string) (string, error) {
	segs := strings.Split(escaped[1:], "/")
	out := make([]string, 0, len(segs))
	trailing := false
	for i, seg := range segs {
		last := i == len(segs)-1
		switch dots(seg) {
		case 1:
			trailing = last
			continue
		case 2:
			if len(out) == 0 {
				return "", ambiguous("climbs above the root", escaped)
			}
			out = out[:len(out)-1]
			trailing = last
			continue
		case -1:
			return "", ambiguous("has a dot segment with parameters", escaped)
		}
		if seg == "" {
			trailing = last
			continue
		}
		out = append(out, seg)
		trailing = false
	}
	var b strings.Builder
	b.Grow(len(escaped))
	for _, seg := range out {
		b.WriteByte('/')
		b.WriteString(seg)
	}
	if trailing || len(out) == 0 {
		b.WriteByte('/')
	}
	return b.String(), nil
}

// dots returns 1 for a "." segment, 2 for "..", with dots written as "."
// or "%2e"; -1 for either followed by ";parameters"; 0 otherwise.
func dots(seg string) int {
	n := 0
	for s := seg; s != ""; {
		switch {
		case s[0] == '.':
			s = s[1:]
		case len(s) >= 3 && s[0] == '%' && s[1] == '2' && upper(s[2]) == 'E':
			s = s[3:]
		case s[0] == ';' && (n == 1 || n == 2):
			return -1
		default:
			return 0
		}
		n++
		if n > 2 {
			return 0
		}
	}
	return n
}

func ambiguous(why, path string) error {
	return &pathError{why: why, path: path}
}

type pathError struct{ why, path string }

func (e *pathError) Error() string {
	return "httppath: request path " + e.why + " (got " + truncate(e.path) + ")"
}

func (e *pathError) Unwrap() error { return ErrAmbiguous }

// truncate keeps an error message short whatever a client sent.
func truncate(s string) string {
	const max = 128
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}

// CleanURL cleans the path of u in place, as [Clean] does with
// u.EscapedPath(), and sets u.Path and u.RawPath to the cleaned path, so
// that u.EscapedPath() and u.RequestURI() give it. On error u is left as it
// was. A URL with an opaque part is left alone.
func CleanURL(u *url.URL) error {
	if u.Opaque != "" {
		return nil
	}
	escaped := u.EscapedPath()
	cleaned, err := Clean(escaped)
	if err != nil || cleaned == escaped {
		return err
	}
	path, err := url.PathUnescape(cleaned)
	if err != nil {
		return ambiguous("holds an invalid escape", escaped)
	}
	u.Path = path
	u.RawPath = ""
	if u.EscapedPath() != cleaned {
		u.RawPath = cleaned
	}
	return nil
}
