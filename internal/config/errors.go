package config

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// ErrInvalid is wrapped by every error this package returns about a configuration's
// content: bad YAML, an unknown field, a wrong type, an impossible value, a missing file.
// Errors reading the configuration file itself (Load) do not wrap it.
var ErrInvalid = errors.New("config: invalid configuration")

// Error is one problem in a configuration. Its message reads
//
//	file:line:col: path: what is wrong (got X)
//
// for example "portcullis.yaml:12:5: listeners[0].routes[1].limit.permits: must be -1 or
// more (got -3)". A Config built in Go has no positions, and its errors read
// "config: path: what is wrong". Error wraps ErrInvalid, and Err when set.
type Error struct {
	// File is the file name given to Parse; empty for a Config built in Go.
	File string
	// Line and Column locate the offending YAML node, from 1; zero when unknown.
	Line, Column int
	// Path is the field, such as "listeners[0].routes[1].limit.permits"; map entries are
	// written overrides["batch"]. Empty for an error about the YAML text as a whole.
	Path string
	// Msg says what is wrong, lower-case, with the offending value as "(got X)".
	Msg string
	// Err is the underlying cause (a yaml or file system error), or nil.
	Err error
}

// Error returns the message described on [Error].
func (e *Error) Error() string {
	var b strings.Builder
	switch {
	case e.Line > 0:
		file := e.File
		if file == "" {
			file = "config"
		}
		fmt.Fprintf(&b, "%s:%d", file, e.Line)
		if e.Column > 0 {
			fmt.Fprintf(&b, ":%d", e.Column)
		}
	case e.File != "":
		b.WriteString(e.File)
	default:
		b.WriteString("config")
	}
	b.WriteString(": ")
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return oneLine(b.String())
}

// oneLine escapes control characters, so that an error is always one line whatever text the
// YAML held (joined errors are separated by newlines).
func oneLine(s string) string {
	if !strings.ContainsFunc(s, unicode.IsControl) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if unicode.IsControl(r) {
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Unwrap returns ErrInvalid and the cause, if any.
func (e *Error) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrInvalid, e.Err}
	}
	return []error{ErrInvalid}
}

// Position is where a value was written in the YAML text.
type Position struct {
	// File is the file name given to Parse.
	File string
	// Line and Column count from 1.
	Line, Column int
}

// source records where each field of a parsed Config was written, keyed by path.
type source struct {
	file  string
	pos   map[string]Position
	nulls map[string]bool // paths written as null (~), which count as left out
}

// lookup returns the position of path, or of its nearest written ancestor when path itself
// was not written (a missing required field is reported where its parent is).
func (s *source) lookup(path string) (Position, bool) {
	if s == nil {
		return Position{}, false
	}
	for p := path; ; p = parentPath(p) {
		if pos, ok := s.pos[p]; ok {
			return pos, true
		}
		if p == "" {
			return Position{File: s.file}, false
		}
	}
}

// Pos returns where path (such as "listeners[0].listen") was written in the YAML text,
// or where its nearest written ancestor was, and whether path itself was written. A Config
// built in Go has no positions: Pos returns the zero Position and false. The daemon uses it
// to report run-time failures (a port already taken) at their line.
func (c *Config) Pos(path string) (Position, bool) {
	if c == nil || c.src == nil {
		return Position{}, false
	}
	pos, _ := c.src.lookup(path)
	_, exact := c.src.pos[path]
	return pos, exact
}

// parentPath drops the last element of a path: "a.b[2]" -> "a.b", "a.b" -> "a", "a" -> "".
func parentPath(p string) string {
	i := strings.LastIndexAny(p, ".[")
	if i < 0 {
		return ""
	}
	return p[:i]
}

// isWithin reports whether path p is q or below q, by whole elements.
func isWithin(p, q string) bool {
	if q == "" || p == q {
		return true
	}
	return strings.HasPrefix(p, q) && (p[len(q)] == '.' || p[len(q)] == '[')
}

// errorList collects the problems of one configuration.
type errorList struct {
	src  *source
	errs []*Error
}

// addf records a problem at path.
func (l *errorList) addf(path, format string, args ...any) {
	l.add(path, nil, fmt.Sprintf(format, args...))
}

// add records a problem at path with an underlying cause.
func (l *errorList) add(path string, cause error, msg string) {
	pos, _ := l.src.lookup(path)
	l.errs = append(l.errs, &Error{File: pos.File, Line: pos.Line, Column: pos.Column,
		Path: path, Msg: msg, Err: cause})
}

// addAt records a problem at an explicit position (a YAML key rather than its value).
func (l *errorList) addAt(pos Position, path, msg string) {
	l.errs = append(l.errs, &Error{File: pos.File, Line: pos.Line, Column: pos.Column,
		Path: path, Msg: msg})
}

// join sorts the problems by position and joins them into one error, nil when there is none.
func (l *errorList) join() error {
	if len(l.errs) == 0 {
		return nil
	}
	slices.SortStableFunc(l.errs, func(a, b *Error) int {
		return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column))
	})
	if len(l.errs) == 1 {
		return l.errs[0]
	}
	errs := make([]error, len(l.errs))
	for i, e := range l.errs {
		errs[i] = e
	}
	return errors.Join(errs...)
}

// Problems collects the problems found in the values of a Config while building what they
// describe, outside Validate: a CA certificate that does not parse, an htpasswd line whose
// hash is not bcrypt, a deny_file line that is not an address. Config parses and checks its
// values with the standard library only; the daemon builds the runtime objects (and finds
// these problems) in its prepare step, which `portcullis check` runs too. Each problem is
// an *Error placed where the field that named the value was written, so that it reads as
// Validate's errors do.
type Problems struct {
	list errorList
}

// Problems returns an empty list of problems in c, positioned by c's YAML text; a Config
// built in Go (or nil) places them nowhere, as its Validate errors.
func (c *Config) Problems() *Problems {
	p := &Problems{}
	if c != nil {
		p.list.src = c.src
	}
	return p
}

// Add records a problem of the value at path (as Validate names paths, see [IndexPath] and
// [KeyPath]): msg says what is wrong, lower-case, and cause, if not nil, is wrapped.
func (p *Problems) Add(path string, cause error, msg string) {
	p.list.add(path, cause, msg)
}

// Err returns the problems recorded so far, sorted by position and joined as Validate joins
// its own, each wrapping ErrInvalid; nil when there is none.
func (p *Problems) Err() error {
	return p.list.join()
}

// ListenerPath returns the path of the listener at index i of Config.Listeners,
// "listeners[i]", to which the paths of its fields are appended.
func ListenerPath(i int) string { return indexPath("listeners", i) }

// IndexPath returns the path of element i of the list at path: "a.b[2]".
func IndexPath(path string, i int) string { return indexPath(path, i) }

// KeyPath returns the path of the map entry key at path: a.overrides["batch"].
func KeyPath(path, key string) string { return keyPath(path, key) }

// QuoteGot returns the " (got "X")" that ends a message about the value s.
func QuoteGot(s string) string { return quoteGot(s) }

// FileProblem returns the message of a file named by the configuration that cannot be
// read, as Validate words it ("cannot read: no such file or directory (got "F")"), and
// whether err is such a failure (an *fs.PathError).
func FileProblem(file string, err error) (string, bool) {
	var pe *fs.PathError
	if !errors.As(err, &pe) {
		return "", false
	}
	return readProblem(err) + quoteGot(file), true
}
