package config

import (
	"fmt"
	"reflect"
)

// Positions records where each value of a document decoded by [Decode] was written, so
// that the caller's own validation reports its problems at file:line:col as Parse does.
type Positions struct {
	src *source
}

// At returns where path (such as "descriptors[0].rate_limit.unit") was written, or where
// its nearest written ancestor was, and whether path itself was written.
func (p *Positions) At(path string) (Position, bool) {
	if p == nil {
		return Position{}, false
	}
	pos, _ := p.src.lookup(path)
	_, exact := p.src.pos[path]
	return pos, exact && !p.src.nulls[path]
}

// Errorf returns an [*Error] about path, at its position: the form of every Parse error.
func (p *Positions) Errorf(path, format string, args ...any) *Error {
	pos, _ := p.At(path)
	if pos.File == "" && p != nil {
		pos.File = p.src.file
	}
	return &Error{File: pos.File, Line: pos.Line, Column: pos.Column, Path: path, Msg: fmt.Sprintf(format, args...)}
}

// Decode decodes one YAML document from data strictly into v, a pointer to a struct whose
// exported fields carry yaml tags, with the rules Parse applies to a Config: an unknown
// key (with a "did you mean"), a wrong type or a duplicate key is an error at its
// position, merge keys and aliases work within the same bounds, and every problem is
// reported at once, joined and sorted as Parse joins them, each wrapping ErrInvalid. It
// validates nothing beyond types: the caller does, reporting at the Positions it returns.
// The fields may be strings, ints, float64s, bools, durations, netip.Prefix, types that
// read their own text (encoding.TextUnmarshaler), pointers, slices, string-keyed maps and
// structs of those. An empty document decodes to the zero value. Other commands of the
// daemon (portcullis rls) use it to read their own files the way the daemon reads its own.
func Decode(filename string, data []byte, v any) (*Positions, error) {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() || rv.Elem().Kind() != reflect.Struct {
		return nil, fmt.Errorf("config: Decode needs a non-nil pointer to a struct (got %T)", v)
	}
	d := newDecoder(filename)
	root, err := parseDocument(filename, data)
	if err != nil {
		if e, ok := err.(*Error); ok && e.Line == 0 && e.Err == nil {
			return &Positions{src: d.src}, nil // an empty document
		}
		return nil, err
	}
	d.value(root, rv.Elem(), "", fieldOpts{})
	if err := d.errs.join(); err != nil {
		return nil, err
	}
	return &Positions{src: d.src}, nil
}

// ValidateCluster checks a cluster block decoded by [Decode] under the key "cluster" at
// the root of its document, as Validate checks a Config's, reporting at pos. Relative
// file names in it are made absolute against the directory of pos's file first, as Parse
// does. It returns nil when the cluster can be built.
func ValidateCluster(c *Cluster, pos *Positions) error {
	if c == nil {
		return nil
	}
	var src *source
	if pos != nil {
		src = pos.src
		tmp := Config{Cluster: c}
		resolveFiles(&tmp, src.file)
	}
	v := &validator{errorList{src: src}}
	v.cluster(c)
	return v.join()
}

// EffectiveCluster returns c with its defaults filled in, as Effective fills a Config's.
func EffectiveCluster(c *Cluster) Cluster { return c.effective() }
