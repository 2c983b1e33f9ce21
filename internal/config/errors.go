package config

import (
	"cmp"
	"errors"
	"fmt"
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
