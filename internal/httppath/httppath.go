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
// were written, but for an escaped slash ("%2F", "%2f"), which the caller
// decides on ([Slashes]): many backends decode it to "/" before they
// resolve the path, so that "/x/..%2Fapi" reaches them as "/api" although
// it matched no route on "/api". Refusing it ([RejectSlashes], the zero
// value) or decoding it before cleaning ([UnescapeSlashes]) leaves no such
// gap; keeping it ([KeepSlashes]) suits backends that tell "a%2Fb" from
// "a/b" and never decode it before resolving.
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

// ErrEscapedSlash is returned, wrapped with [ErrAmbiguous], for a path
// holding an escaped slash under [RejectSlashes].
var ErrEscapedSlash = errors.New("httppath: escaped slash in request path")

// Slashes says what [Clean] does with an escaped slash ("%2F" or "%2f")
// in a path. The zero value is RejectSlashes.
type Slashes uint8

const (
	// RejectSlashes refuses a path holding an escaped slash: Clean returns
	// an error wrapping ErrEscapedSlash and ErrAmbiguous.
	RejectSlashes Slashes = iota
	// KeepSlashes keeps an escaped slash as written, inside its segment:
	// "/x/..%2Fapi" is one segment "x" and one "..%2Fapi".
	KeepSlashes
	// UnescapeSlashes decodes every escaped slash to "/" before dot
	// segments are resolved and slashes merged: "/x/..%2Fapi" is "/api".
	UnescapeSlashes
)

// Clean returns the canonical form of escaped, the escaped path of an
// origin-form request target (what [url.URL.EscapedPath] returns): escaped
// slashes handled as slashes says, dot segments resolved, repeated slashes
// merged, a trailing slash kept. A path already canonical is returned as
// is, without allocating. An empty path is "/"; "*" (the target of
// OPTIONS *) is returned as is. Any other path that does not start with
// "/" is an error, as is one of the ambiguous spellings of the package
// documentation and, under RejectSlashes, a path holding an escaped slash;
// the error wraps [ErrAmbiguous].
func Clean(escaped string, slashes Slashes) (string, error) {
	switch {
	case escaped == "":
		return "/", nil
	case escaped == "*":
		return escaped, nil
	case escaped[0] != '/':
		return "", ambiguous("does not start with /", escaped)
	}
	needs, err := scan(escaped, slashes)
	if err != nil || !needs {
		return escaped, err
	}
	if slashes == UnescapeSlashes {
		escaped = unescapeSlashes(escaped)
	}
	return resolve(escaped)
}

// HasEscapedSlash reports whether escaped holds an escaped slash ("%2F" or
// "%2f").
func HasEscapedSlash(escaped string) bool {
	for {
		i := strings.IndexByte(escaped, '%')
		if i < 0 || i+2 >= len(escaped) {
			return false
		}
		if escaped[i+1] == '2' && upper(escaped[i+2]) == 'F' {
			return true
		}
		escaped = escaped[i+1:]
	}
}

// unescapeSlashes returns escaped with every escaped slash decoded.
func unescapeSlashes(escaped string) string {
	var b strings.Builder
	b.Grow(len(escaped))
	for i := 0; i < len(escaped); i++ {
		if escaped[i] == '%' && i+2 < len(escaped) && escaped[i+1] == '2' && upper(escaped[i+2]) == 'F' {
			b.WriteByte('/')
			i += 2
			continue
		}
		b.WriteByte(escaped[i])
	}
	return b.String()
}

// scan reports whether escaped needs resolve, or an error for what can be
// refused byte by byte. It allocates nothing but the error.
func scan(escaped string, slashes Slashes) (needs bool, err error) {
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
			case h == '2' && l == 'F':
				switch slashes {
				case RejectSlashes:
					return false, &pathError{why: "holds an escaped slash", path: escaped, kind: ErrEscapedSlash}
				case UnescapeSlashes:
					needs = true
				}
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

type pathError struct {
	why, path string
	kind      error // a sentinel besides ErrAmbiguous; nil: none
}

func (e *pathError) Error() string {
	return "httppath: request path " + e.why + " (got " + truncate(e.path) + ")"
}

func (e *pathError) Unwrap() []error {
	if e.kind != nil {
		return []error{ErrAmbiguous, e.kind}
	}
	return []error{ErrAmbiguous}
}

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
func CleanURL(u *url.URL, slashes Slashes) error {
	if u.Opaque != "" {
		return nil
	}
	escaped := u.EscapedPath()
	cleaned, err := Clean(escaped, slashes)
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
