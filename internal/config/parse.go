package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// MaxFileSize is the largest configuration Load reads, in bytes.
const MaxFileSize = 4 << 20

// Load reads the configuration file at path and returns [Parse] of its content.
// A file that cannot be read, or is larger than MaxFileSize, gives an error that does not
// wrap ErrInvalid.
func Load(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("config: read %s: %w", path, err)
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("config: %s is larger than %d bytes", path, MaxFileSize)
	}
	return Parse(path, data)
}

// Parse decodes one YAML document strictly into a Config and validates it.
//
// filename is used in error messages and to resolve relative file paths (certificates,
// keys, password and token files): those are made absolute against filename's directory
// (the working directory when filename is ""), so the returned Config does not depend on
// the working directory.
//
// Parse collects every problem rather than stopping at the first: the error it returns is
// one [*Error] or several joined with errors.Join (one per line), sorted by position, each
// wrapping ErrInvalid. A problem reported while decoding (wrong type, unknown or duplicate
// key) silences the validation errors it would cause at the same field. On error the
// returned Config is nil.
func Parse(filename string, data []byte) (*Config, error) {
	root, err := parseDocument(filename, data)
	if err != nil {
		return nil, err
	}
	d := newDecoder(filename)
	var c Config
	d.value(root, reflect.ValueOf(&c).Elem(), "", fieldOpts{})
	c.src = d.src
	resolveFiles(&c, filename)
	retireHTTP1Servers(&c)

	all := d.errs
	if d.tooLarge {
		return nil, all.join()
	}
	for _, e := range c.problems().errs {
		if !suppressed(e.Path, d.suppress) {
			all.errs = append(all.errs, e)
		}
	}
	if err := all.join(); err != nil {
		return nil, err
	}
	return &c, nil
}

// suppressed reports whether a validation problem at path only repeats a decode problem.
func suppressed(path string, decodeErrs []string) bool {
	for _, q := range decodeErrs {
		if isWithin(path, q) || isWithin(q, path) {
			return true
		}
	}
	return false
}

// parseDocument parses data as exactly one YAML document and returns its root node.
func parseDocument(filename string, data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{File: filename, Msg: "the configuration is empty: at least one listener is required"}
		}
		return nil, yamlError(filename, data, err)
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return nil, yamlError(filename, data, err)
	default:
		return nil, &Error{File: filename, Line: extra.Line, Column: extra.Column,
			Msg: "a second YAML document: the configuration must be a single document"}
	}
	if len(doc.Content) == 0 {
		return nil, &Error{File: filename, Msg: "the configuration is empty: at least one listener is required"}
	}
	return doc.Content[0], nil
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// yamlError turns a YAML syntax error in data into an *Error at its line.
//
// The YAML parser reports some errors at the line where the enclosing block
// began rather than where the text went wrong ("line 1: did not find
// expected '-' indicator" for a bad indent on line 5), so the line is the
// first from the parser's on at which a prefix of data stops parsing: where
// the text went wrong. The parser's own line is then named as the block's.
func yamlError(filename string, data []byte, err error) error {
	msg := err.Error()
	e := &Error{File: filename, Err: err}
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		e.Line, _ = strconv.Atoi(m[1])
		msg = m[2]
	}
	e.Msg = "invalid YAML: " + strings.TrimPrefix(msg, "yaml: ")
	if e.Line > 0 {
		if at := firstBadLine(data, e.Line); at > e.Line {
			e.Msg += fmt.Sprintf(" (in the block that starts at line %d)", e.Line)
			e.Line = at
		}
	}
	return e
}

// firstBadLine returns the first line n, from line from on, such that the
// first n lines of data are not valid YAML; 0 if each such prefix is valid
// (the error then needs the rest of the text, as an unclosed bracket does).
// A prefix of block-style YAML that is valid stays valid when cut shorter,
// so a binary search finds it: only a file that failed to parse pays, with
// about log2(lines) parses.
func firstBadLine(data []byte, from int) int {
	ends := []int{0} // ends[n]: the length of the first n lines
	for i, c := range data {
		if c == '\n' {
			ends = append(ends, i+1)
		}
	}
	if ends[len(ends)-1] != len(data) {
		ends = append(ends, len(data))
	}
	bad := func(n int) bool {
		var node yaml.Node
		return yaml.Unmarshal(data[:ends[n]], &node) != nil
	}
	last := len(ends) - 1
	if from > last || !bad(last) {
		return 0
	}
	lo, hi := from, last // bad(hi) holds
	for lo < hi {
		mid := lo + (hi-lo)/2
		if bad(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return hi
}

// resolveFiles makes every relative file path of c absolute against the directory of the
// configuration file.
func resolveFiles(c *Config, filename string) {
	dir, err := filepath.Abs(filepath.Dir(filename))
	if err != nil {
		dir = filepath.Dir(filename)
	}
	abs := func(p *string) {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
	abs(&c.Admin.TokenFile)
	if cl := c.Cluster; cl != nil {
		abs(&cl.Redis.PasswordFile)
		abs(&cl.Redis.SentinelPasswordFile)
		abs(&cl.Redis.TLS.CAFile)
		abs(&cl.Redis.TLS.CertFile)
		abs(&cl.Redis.TLS.KeyFile)
	}
	for i := range c.Listeners {
		l := &c.Listeners[i]
		abs(&l.TLS.CertFile)
		abs(&l.TLS.KeyFile)
		abs(&l.QUIC.TokenKeyFile)
		abs(&l.DenyFile)
		abs(&l.AllowFile)
		if l.Auth != nil {
			abs(&l.Auth.Htpasswd)
		}
		if l.Forward != nil && l.Forward.Intercept != nil {
			ic := l.Forward.Intercept
			abs(&ic.CACert)
			abs(&ic.CAKey)
			abs(&ic.Upstream.CAFile)
		}
	}
}

// retireHTTP1Servers reads the retired http1_server names lean and fast as
// eventloop, remembering the name for [Listener.Warnings].
func retireHTTP1Servers(c *Config) {
	for i := range c.Listeners {
		if l := &c.Listeners[i]; l.HTTP1Server.retired() {
			l.retiredHTTP1, l.HTTP1Server = l.HTTP1Server, HTTP1ServerEventLoop
		}
	}
}
