package config

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// This file reads the files a configuration names. Validate and the daemon use the same
// functions, so a file that validates is a file the daemon can use.

// Certificate loads the key pair. It returns tls.LoadX509KeyPair's error for a missing or
// malformed file or a key that does not match the certificate.
func (t TLS) Certificate() (tls.Certificate, error) {
	return tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
}

// ClientConfig returns the tls.Config for connecting to Redis, or nil and no error when
// Enabled is false. It fails when a file cannot be read or holds no usable certificate.
func (t RedisTLS) ClientConfig() (*tls.Config, error) {
	if !t.Enabled {
		return nil, nil
	}
	cfg := &tls.Config{ServerName: t.ServerName, MinVersion: tls.VersionTLS12}
	if t.CAFile != "" {
		pool, err := readCertPool(t.CAFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	if t.CertFile != "" || t.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("config: redis client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// readCertPool reads a PEM file of CA certificates.
func readCertPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("config: %s holds no PEM certificate", file)
	}
	return pool, nil
}

// Password reads PasswordFile: its content without one trailing newline ("\n" or "\r\n").
// It returns "" and no error when PasswordFile is empty, and an error when the file cannot
// be read or is empty.
func (r Redis) Password() (string, error) { return readRedisSecret(r.PasswordFile, "redis password") }

// SentinelPassword returns the content of SentinelPasswordFile without its
// trailing newline, "" when it is not set, or an error when it cannot be
// read or is empty.
func (r Redis) SentinelPassword() (string, error) {
	return readRedisSecret(r.SentinelPasswordFile, "redis sentinel password")
}

func readRedisSecret(file, what string) (string, error) {
	if file == "" {
		return "", nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("config: %s: %w", what, err)
	}
	pw := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if pw == "" {
		return "", fmt.Errorf("config: %s file %s is empty", what, file)
	}
	return pw, nil
}

// MinAdminTokenLen is the shortest admin bearer token accepted.
const MinAdminTokenLen = 16

// Token reads TokenFile: the admin bearer token, the file's content without surrounding white
// space. It returns "" and no error when TokenFile is empty, and an error when the file
// cannot be read or does not hold a token of at least MinAdminTokenLen characters of RFC
// 6750's b64token alphabet.
func (a Admin) Token() (string, error) {
	if a.TokenFile == "" {
		return "", nil
	}
	b, err := os.ReadFile(a.TokenFile)
	if err != nil {
		return "", fmt.Errorf("config: admin token: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if !isBearerToken(tok) {
		return "", fmt.Errorf("config: admin token file %s: %s", a.TokenFile, adminTokenFormat)
	}
	return tok, nil
}

const adminTokenFormat = "must hold one token of at least 16 characters: letters, digits, '-', '.', '_', '~', '+' or '/', optionally ending in '=' (RFC 6750), as `openssl rand -hex 32` writes"

// isBearerToken reports whether tok is an RFC 6750 b64token of at least MinAdminTokenLen
// characters.
func isBearerToken(tok string) bool {
	if len(tok) < MinAdminTokenLen {
		return false
	}
	body := strings.TrimRight(tok, "=")
	if body == "" {
		return false
	}
	for i := 0; i < len(body); i++ {
		c := body[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '-' || c == '.' || c == '_' || c == '~' || c == '+' || c == '/':
		default:
			return false
		}
	}
	return true
}

// ReadTokenKey reads a QUIC token key file: 64 hexadecimal digits (32 bytes), surrounding
// white space ignored. The key converts to quic-go's TokenGeneratorKey.
func ReadTokenKey(file string) ([32]byte, error) {
	var key [32]byte
	b, err := os.ReadFile(file)
	if err != nil {
		return key, fmt.Errorf("config: quic token key: %w", err)
	}
	key, ok := parseTokenKey(b)
	if !ok {
		return key, fmt.Errorf("config: quic token key %s: %s", file, tokenKeyFormat)
	}
	return key, nil
}

const tokenKeyFormat = "must hold 64 hexadecimal digits (32 bytes), as `openssl rand -hex 32` writes"

func parseTokenKey(b []byte) (key [32]byte, ok bool) {
	b = bytes.TrimSpace(b)
	if len(b) != hex.EncodedLen(len(key)) {
		return key, false
	}
	_, err := hex.Decode(key[:], b)
	return key, err == nil
}

// readProblem renders a file error for a field message: the OS reason alone, since the path
// is already the field's value.
func readProblem(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return "cannot read: " + pe.Err.Error()
	}
	return err.Error()
}
