package proxyauth

import (
	"encoding/base64"
	"strings"
)

// maxCredentialBytes bounds the decoded credentials: a longer header is
// refused without decoding it. bcrypt reads 72 bytes of a password anyway.
const maxCredentialBytes = 1024

// parseBasic reads the user and password of a Basic credentials header
// value (RFC 7617): the scheme "Basic", matched case-insensitively, one or
// more spaces, then base64 of "user:password". The user is what precedes the
// first ':'. It reads what net/http's Request.BasicAuth reads, except that
// it also accepts several spaces after the scheme (RFC 9110 §11.4 allows
// them) and refuses credentials longer than maxCredentialBytes.
func parseBasic(v string) (user, pass string, ok bool) {
	const prefix = "basic "
	if len(v) < len(prefix) || !equalFoldASCII(v[:len(prefix)], prefix) {
		return "", "", false
	}
	enc := strings.TrimLeft(v[len(prefix):], " ")
	if base64.StdEncoding.DecodedLen(len(enc)) > maxCredentialBytes {
		return "", "", false
	}
	dec, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return "", "", false
	}
	user, pass, ok = strings.Cut(string(dec), ":")
	if !ok {
		return "", "", false
	}
	return user, pass, true
}

// equalFoldASCII reports whether a and b are equal when ASCII letters are
// folded to lower case. Unlike strings.EqualFold it folds nothing else (no
// Kelvin sign for k, no long s for s).
func equalFoldASCII(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		if lowerASCII(a[i]) != lowerASCII(b[i]) {
			return false
		}
	}
	return true
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}
