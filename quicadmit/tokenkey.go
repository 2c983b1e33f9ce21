package quicadmit

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/quic-go/quic-go"
)

// NewTokenKey returns a random token key for Config.TokenKey. Generate one
// once and give the same one to every process that shares an address.
func NewTokenKey() quic.TokenGeneratorKey {
	var k quic.TokenGeneratorKey
	_, _ = rand.Read(k[:]) // crypto/rand.Read never fails (Go 1.24+)
	return k
}

// FormatTokenKey returns k as 64 lower-case hexadecimal digits, the form
// [ParseTokenKey] reads.
func FormatTokenKey(k quic.TokenGeneratorKey) string { return hex.EncodeToString(k[:]) }

// ParseTokenKey reads a 32-byte token key written as 64 hexadecimal digits
// or as standard base64 (padded or not), with surrounding white space
// ignored. Any other input, including a key of another length, fails with
// an error wrapping [ErrTokenKey] and returns the zero key.
func ParseTokenKey(s string) (quic.TokenGeneratorKey, error) {
	var k quic.TokenGeneratorKey
	s = strings.TrimSpace(s)
	var (
		b   []byte
		err error
	)
	switch {
	case len(s) == hex.EncodedLen(len(k)):
		b, err = hex.DecodeString(s)
	case strings.HasSuffix(s, "="):
		b, err = base64.StdEncoding.Strict().DecodeString(s)
	default:
		b, err = base64.RawStdEncoding.Strict().DecodeString(s)
	}
	switch {
	case err != nil:
		return k, fmt.Errorf("%w: want 64 hex digits or base64 of 32 bytes: %w", ErrTokenKey, err)
	case len(b) != len(k):
		return k, fmt.Errorf("%w: want 32 bytes, got %d", ErrTokenKey, len(b))
	}
	copy(k[:], b)
	return k, nil
}
