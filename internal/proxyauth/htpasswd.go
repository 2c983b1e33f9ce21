package proxyauth

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/crypto/bcrypt"
)

// MaxHtpasswdBytes bounds the size of an htpasswd file: a larger one is
// refused rather than read into memory.
const MaxHtpasswdBytes = 16 << 20

// MaxBcryptCost is the highest bcrypt cost accepted, the highest Apache's
// htpasswd writes (-C 17). One check at cost 17 takes seconds of CPU.
const MaxBcryptCost = 17

// maxLineErrors is how many line errors one parse reports before it
// summarises the rest.
const maxLineErrors = 10

// ErrHtpasswd is matched, under [errors.Is], by every error of
// [ParseHtpasswd] and [LoadHtpasswd].
var ErrHtpasswd = errors.New("proxyauth: invalid htpasswd file")

// A LineError is a problem on one line of an htpasswd file.
type LineError struct {
	File string // as given to ParseHtpasswd
	Line int    // counting from 1
	User string // the user on the line, when it could be read
	Msg  string
}

func (e *LineError) Error() string {
	if e.User != "" {
		return fmt.Sprintf("%s:%d: user %q: %s", e.File, e.Line, e.User, e.Msg)
	}
	return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
}

// Is makes every LineError match [ErrHtpasswd].
func (e *LineError) Is(target error) bool { return target == ErrHtpasswd }

// Users is the content of an htpasswd file: user names and their bcrypt
// hashes. It is immutable once parsed and safe for concurrent use.
type Users struct {
	hashes map[string][]byte
	cost   int // the most common cost, for the stand-in hash of unknown users
}

// Len returns the number of users.
func (u *Users) Len() int { return len(u.hashes) }

// Has reports whether name is a user of u.
func (u *Users) Has(name string) bool {
	_, ok := u.hashes[name]
	return ok
}

// LoadHtpasswd reads and parses the htpasswd file at path, as
// [ParseHtpasswd] does. A file larger than [MaxHtpasswdBytes] is refused.
func LoadHtpasswd(path string) (*Users, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrHtpasswd, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxHtpasswdBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: read %s: %w", ErrHtpasswd, path, err)
	}
	if len(data) > MaxHtpasswdBytes {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrHtpasswd, path, MaxHtpasswdBytes)
	}
	return ParseHtpasswd(path, data)
}

// ParseHtpasswd parses an htpasswd file in Apache's format: one "user:hash"
// per line; blank lines and lines whose first non-blank character is '#'
// are ignored; CRLF line ends are accepted. name is the file's name in
// errors.
//
// Only bcrypt hashes ($2y$, $2a$, $2b$, as `htpasswd -B` writes) of cost at
// most [MaxBcryptCost] are accepted. Every other kind (Apache MD5 $apr1$,
// {SHA}, crypt, SHA-crypt, plain text) is refused with an error naming the
// file, the line and the user and saying how to make a bcrypt hash. A line
// without ':', an empty user name, a user name with control characters or
// surrounding blanks, a duplicate user and a file without any user are
// refused too. Every problem is reported (up to ten, then a count), each as
// a [*LineError], joined; all match [ErrHtpasswd]. On error no Users is
// returned.
func ParseHtpasswd(name string, data []byte) (*Users, error) {
	u := &Users{hashes: make(map[string][]byte)}
	firstLine := make(map[string]int)
	costs := make(map[int]int)
	var errs []error
	more := 0
	fail := func(e *LineError) {
		if len(errs) < maxLineErrors {
			errs = append(errs, e)
		} else {
			more++
		}
	}
	n := 0
	for line := range bytes.Lines(data) {
		n++
		user, hash, lerr := parseLine(bytes.TrimSuffix(line, []byte("\n")))
		switch {
		case lerr != "":
			fail(&LineError{File: name, Line: n, User: user, Msg: lerr})
		case user == "":
			// blank or comment
		case firstLine[user] != 0:
			fail(&LineError{File: name, Line: n, User: user, Msg: fmt.Sprintf("already defined on line %d", firstLine[user])})
		default:
			cost, msg := checkHash(hash, name, user)
			if msg != "" {
				fail(&LineError{File: name, Line: n, User: user, Msg: msg})
				break
			}
			firstLine[user] = n
			u.hashes[user] = []byte(hash)
			costs[cost]++
		}
	}
	if more > 0 {
		errs = append(errs, fmt.Errorf("%w: %s: %d more problems", ErrHtpasswd, name, more))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if len(u.hashes) == 0 {
		return nil, fmt.Errorf("%w: %s has no user (add one with: htpasswd -B %s USER)", ErrHtpasswd, name, name)
	}
	u.cost = mostCommon(costs)
	return u, nil
}

// parseLine splits one line into user and hash. An empty user and no error
// means a blank or comment line.
func parseLine(line []byte) (user, hash, problem string) {
	s := strings.TrimSuffix(string(line), "\r")
	trimmed := strings.TrimLeft(s, " \t")
	if trimmed == "" || trimmed[0] == '#' {
		return "", "", ""
	}
	if !utf8.ValidString(s) {
		return "", "", "not valid UTF-8"
	}
	user, hash, ok := strings.Cut(s, ":")
	switch {
	case !ok:
		return "", "", "no ':' between user name and hash"
	case user == "":
		return "", "", "empty user name"
	case strings.TrimSpace(user) != user:
		return strings.TrimSpace(user), "", "user name starts or ends with blanks"
	case strings.IndexFunc(user, unicode.IsControl) >= 0:
		return "", "", "user name holds control characters"
	}
	hash = strings.TrimRight(hash, " \t")
	if strings.Contains(hash, ":") {
		return user, "", "more than one ':' (an htdigest file, user:realm:hash, is not an htpasswd file)"
	}
	return user, hash, ""
}

// checkHash returns the cost of a bcrypt hash, or why hash is not one.
func checkHash(hash, file, user string) (int, string) {
	howTo := fmt.Sprintf("; only bcrypt is accepted: make one with `htpasswd -B %s %s`", file, user)
	kind := hashKind(hash)
	if kind != "bcrypt" {
		return 0, "the hash is " + kind + howTo
	}
	if len(hash) != 60 {
		return 0, fmt.Sprintf("the bcrypt hash is %d characters long, not 60 (truncated?)", len(hash))
	}
	cost, err := bcrypt.Cost([]byte(hash))
	if err != nil {
		return 0, "the bcrypt hash is malformed: " + err.Error()
	}
	if cost > MaxBcryptCost {
		return 0, fmt.Sprintf("bcrypt cost %d is above %d: every check would take minutes of CPU", cost, MaxBcryptCost)
	}
	return cost, ""
}

// hashKind names the kind of an htpasswd hash, for errors.
func hashKind(h string) string {
	switch {
	case h == "":
		return "empty"
	case strings.HasPrefix(h, "$2y$"), strings.HasPrefix(h, "$2a$"), strings.HasPrefix(h, "$2b$"):
		return "bcrypt"
	case strings.HasPrefix(h, "$2x$"):
		return "bcrypt $2x$ (crypt_blowfish's bug-compatible variant)"
	case strings.HasPrefix(h, "$apr1$"):
		return "Apache MD5 ($apr1$)"
	case strings.HasPrefix(h, "{SHA}"):
		return "SHA-1 ({SHA})"
	case strings.HasPrefix(h, "$1$"):
		return "MD5-crypt ($1$)"
	case strings.HasPrefix(h, "$5$"):
		return "SHA-256-crypt ($5$)"
	case strings.HasPrefix(h, "$6$"):
		return "SHA-512-crypt ($6$)"
	case strings.HasPrefix(h, "$argon2"):
		return "Argon2"
	case strings.HasPrefix(h, "$"):
		return "of an unknown kind"
	case len(h) == 13 && strings.Trim(h, "./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz") == "":
		return "DES crypt"
	default:
		return "plain text or of an unknown kind"
	}
}

// mostCommon returns the key with the highest count, the lowest key on a
// tie.
func mostCommon(counts map[int]int) int {
	best, bestN := bcrypt.DefaultCost, 0
	for k, n := range counts {
		if n > bestN || (n == bestN && k < best) {
			best, bestN = k, n
		}
	}
	return best
}
