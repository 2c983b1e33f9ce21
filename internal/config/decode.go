package config

import (
	"fmt"
	"net/netip"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// maxNodes bounds the YAML nodes one Parse visits, counting every expansion of an alias, so
// that a small document of nested aliases (a "billion laughs") cannot exhaust memory.
const maxNodes = 200_000

var (
	durationType = reflect.TypeFor[time.Duration]()
	prefixType   = reflect.TypeFor[netip.Prefix]()
)

// decoder fills a Config from a yaml.Node tree by reflection over the yaml tags, strictly:
// every unknown key, wrong type and duplicate key is recorded with its position and path.
type decoder struct {
	src      *source
	errs     errorList
	budget   int
	tooLarge bool     // the budget ran out: the Config is partial, so skip validation
	suppress []string // paths whose validation would only repeat a decode error
}

func newDecoder(file string) *decoder {
	src := &source{file: file, pos: make(map[string]Position), nulls: make(map[string]bool)}
	return &decoder{src: src, errs: errorList{src: src}, budget: maxNodes}
}

func (d *decoder) at(n *yaml.Node) Position {
	return Position{File: d.src.file, Line: n.Line, Column: n.Column}
}

// fail records a problem with the value n written at path.
func (d *decoder) fail(n *yaml.Node, path, format string, args ...any) {
	d.errs.addAt(d.at(n), path, fmt.Sprintf(format, args...))
	d.suppress = append(d.suppress, path)
}

// fieldOpts are the options of a struct field, from its `config:"..."` tag.
type fieldOpts struct {
	// none: the duration accepts "none" and 0, both meaning NoRetryAfter.
	none bool
	// shadow: the Limit is a shadow limit, whose refusal fields do not apply.
	shadow bool
}

// resolve follows aliases and spends one unit of the node budget. It returns nil once the
// budget is spent (the error is recorded once).
func (d *decoder) resolve(n *yaml.Node, path string) *yaml.Node {
	for hops := 0; n != nil && n.Kind == yaml.AliasNode; hops++ {
		if hops > 100 {
			d.fail(n, path, "alias chain too long")
			return nil
		}
		n = n.Alias
	}
	if n == nil {
		return nil
	}
	d.budget--
	if d.budget == 0 {
		d.fail(n, path, "document too large: more than %d values after expanding aliases", maxNodes)
		d.tooLarge = true
	}
	if d.budget <= 0 {
		return nil
	}
	return n
}

// value decodes the node n, written at path, into v.
func (d *decoder) value(written *yaml.Node, v reflect.Value, path string, opts fieldOpts) {
	n := d.resolve(written, path)
	if n == nil {
		return
	}
	d.src.pos[path] = d.at(written)
	if isNull(n) {
		d.src.nulls[path] = true
		return // null leaves the zero value: the field's default
	}
	switch v.Type() {
	case durationType:
		d.duration(n, v, path, opts)
		return
	case prefixType:
		d.prefix(n, v, path)
		return
	}
	if isTextType(v.Type()) {
		d.text(n, v, path)
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		elem := reflect.New(v.Type().Elem())
		d.value(n, elem.Elem(), path, opts)
		v.Set(elem)
	case reflect.Struct:
		d.structure(n, v, path)
	case reflect.Slice:
		d.sequence(n, v, path)
	case reflect.Map:
		d.dict(n, v, path)
	case reflect.String:
		d.str(n, v, path)
	case reflect.Int:
		d.integer(n, v, path)
	case reflect.Float64:
		d.float(n, v, path)
	case reflect.Bool:
		d.boolean(n, v, path)
	default:
		// Only reachable by adding a field of a new kind to the schema; the tests decode
		// every field, so this cannot ship.
		panic(fmt.Sprintf("config: field %s has unsupported type %s", path, v.Type()))
	}
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// structure decodes a mapping into a struct, field by yaml tag.
func (d *decoder) structure(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, "must be a mapping of fields (got %s)", describe(n))
		return
	}
	fields := fieldsOf(v.Type())
	for _, p := range d.pairs(n, path, joinPath) {
		f, ok := fields.byName[p.key]
		if !ok {
			d.unknownField(p, path, fields.names)
			continue
		}
		d.value(p.val, v.Field(f.index), joinPath(path, p.key), f.opts)
	}
}

func (d *decoder) unknownField(p pair, path string, names []string) {
	at := joinPath(path, p.key)
	if near := nearest(p.key, names); near != "" {
		d.errs.addAt(d.at(p.keyNode), at, fmt.Sprintf("unknown field; did you mean %q?", near))
		d.suppress = append(d.suppress, joinPath(path, near))
		return
	}
	d.errs.addAt(d.at(p.keyNode), at, "unknown field")
}

// sequence decodes a list into a slice. An empty list leaves the slice nil.
func (d *decoder) sequence(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.SequenceNode {
		d.fail(n, path, "must be a list (got %s)", describe(n))
		return
	}
	if len(n.Content) == 0 {
		return
	}
	s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, item := range n.Content {
		d.value(item, s.Index(i), indexPath(path, i), fieldOpts{})
	}
	v.Set(s)
}

// dict decodes a mapping into a map with string keys. An empty mapping leaves the map nil.
func (d *decoder) dict(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, "must be a mapping (got %s)", describe(n))
		return
	}
	pairs := d.pairs(n, path, keyPath)
	if len(pairs) == 0 {
		return
	}
	m := reflect.MakeMapWithSize(v.Type(), len(pairs))
	for _, p := range pairs {
		elem := reflect.New(v.Type().Elem()).Elem()
		d.value(p.val, elem, keyPath(path, p.key), fieldOpts{})
		m.SetMapIndex(reflect.ValueOf(p.key).Convert(v.Type().Key()), elem)
	}
	v.Set(m)
}

// pair is one key and value of a mapping.
type pair struct {
	keyNode *yaml.Node
	key     string
	val     *yaml.Node
}

// pairs lists the entries of mapping n with merge keys (<<) expanded: keys written in n
// win over merged ones, and earlier merged mappings over later ones, as YAML says. A key
// written twice in n is an error.
func (d *decoder) pairs(n *yaml.Node, path string, child func(string, string) string) []pair {
	var own []pair
	var merges []*yaml.Node
	seen := make(map[string]*yaml.Node)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		kr := d.resolve(k, path)
		if kr == nil {
			return own
		}
		if kr.Kind == yaml.ScalarNode && kr.Value == "<<" && kr.ShortTag() == "!!merge" {
			merges = append(merges, val)
			continue
		}
		if kr.Kind != yaml.ScalarNode {
			d.fail(k, path, "keys must be plain names (got %s)", describe(kr))
			continue
		}
		if first, dup := seen[kr.Value]; dup {
			d.fail(k, child(path, kr.Value), "duplicate key (first at line %d)", first.Line)
			continue
		}
		seen[kr.Value] = k
		own = append(own, pair{keyNode: k, key: kr.Value, val: val})
	}
	for _, m := range merges {
		for _, mm := range d.mergeSources(m, path) {
			for _, p := range d.pairs(mm, path, child) {
				if _, dup := seen[p.key]; !dup {
					seen[p.key] = p.keyNode
					own = append(own, p)
				}
			}
		}
	}
	return own
}

// mergeSources returns the mappings a merge key's value names: one mapping or a list of them.
func (d *decoder) mergeSources(m *yaml.Node, path string) []*yaml.Node {
	mr := d.resolve(m, path)
	if mr == nil {
		return nil
	}
	if mr.Kind == yaml.MappingNode {
		return []*yaml.Node{mr}
	}
	if mr.Kind == yaml.SequenceNode {
		var out []*yaml.Node
		for _, item := range mr.Content {
			ir := d.resolve(item, path)
			if ir == nil {
				return out
			}
			if ir.Kind != yaml.MappingNode {
				d.fail(item, path, "<< must merge a mapping or a list of mappings (got %s)", describe(ir))
				continue
			}
			out = append(out, ir)
		}
		return out
	}
	d.fail(m, path, "<< must merge a mapping or a list of mappings (got %s)", describe(mr))
	return nil
}

// str decodes any scalar but null into a string (or a string type), as written.
func (d *decoder) str(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.ScalarNode || !isPlainScalarTag(n.ShortTag()) {
		d.fail(n, path, "must be a string (got %s)", describe(n))
		return
	}
	v.SetString(n.Value)
}

func isPlainScalarTag(tag string) bool {
	switch tag {
	case "!!str", "!!int", "!!float", "!!bool", "!!timestamp":
		return true
	}
	return false
}

func (d *decoder) integer(n *yaml.Node, v reflect.Value, path string) {
	var i int
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || n.Decode(&i) != nil {
		d.fail(n, path, "must be an integer (got %s)", describe(n))
		return
	}
	v.SetInt(int64(i))
}

func (d *decoder) float(n *yaml.Node, v reflect.Value, path string) {
	var f float64
	tag := n.ShortTag()
	if n.Kind != yaml.ScalarNode || (tag != "!!float" && tag != "!!int") || n.Decode(&f) != nil {
		d.fail(n, path, "must be a number (got %s)", describe(n))
		return
	}
	v.SetFloat(f)
}

func (d *decoder) boolean(n *yaml.Node, v reflect.Value, path string) {
	var b bool
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" || n.Decode(&b) != nil {
		d.fail(n, path, "must be true or false (got %s)", describe(n))
		return
	}
	v.SetBool(b)
}

// duration decodes a Go duration string ("1m30s"). A bare 0 is accepted as the zero
// duration; any other bare number is refused, since its unit would be a guess.
func (d *decoder) duration(n *yaml.Node, v reflect.Value, path string, opts fieldOpts) {
	const want = "a duration such as 10s or 1m30s"
	if n.Kind != yaml.ScalarNode {
		d.fail(n, path, "must be %s (got %s)", want, describe(n))
		return
	}
	var dur time.Duration
	switch tag := n.ShortTag(); {
	case opts.none && tag == "!!str" && n.Value == "none":
		dur = NoRetryAfter
	case tag == "!!int":
		var i int64
		if n.Decode(&i) != nil || i != 0 {
			d.fail(n, path, "must be %s, with a unit (got %s)", want, describe(n))
			return
		}
	case tag == "!!str":
		var err error
		if dur, err = time.ParseDuration(n.Value); err != nil {
			d.fail(n, path, "must be %s (got %s)", want, describe(n))
			return
		}
	default:
		d.fail(n, path, "must be %s (got %s)", want, describe(n))
		return
	}
	if opts.none && dur == 0 {
		dur = NoRetryAfter
	}
	v.SetInt(int64(dur))
}

// prefix decodes a CIDR or a single IP address (as a /32 or /128).
func (d *decoder) prefix(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		d.fail(n, path, "must be a CIDR such as 10.0.0.0/8 or an IP address (got %s)", describe(n))
		return
	}
	p, err := parsePrefix(n.Value)
	if err != nil {
		d.fail(n, path, "must be a CIDR such as 10.0.0.0/8 or an IP address (got %s)", describe(n))
		return
	}
	v.Set(reflect.ValueOf(p))
}

// parsePrefix reads "10.0.0.0/8" or a single address "192.0.2.9" (as 192.0.2.9/32).
// Addresses with a zone are refused: a zone names an interface, not a network.
func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		return netip.ParsePrefix(s)
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	if a.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("address %q has a zone", s)
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// describe renders a node for a "(got X)": strings quoted, other scalars as written, and
// collections by kind. Long values are cut.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		v := n.Value
		if utf8.RuneCountInString(v) > 60 {
			v = string([]rune(v)[:60]) + "..."
		}
		if n.ShortTag() == "!!null" {
			return "null"
		}
		if q := strconv.Quote(v); n.ShortTag() == "!!str" || q[1:len(q)-1] != v {
			return q
		}
		return v
	}
	return "nothing"
}

// structFields is the yaml view of one struct type.
type structFields struct {
	byName map[string]structField
	names  []string // in declaration order
}

type structField struct {
	index int
	opts  fieldOpts
}

var fieldCache sync.Map // reflect.Type -> *structFields

// fieldsOf lists the yaml fields of struct type t: exported fields with a yaml tag.
func fieldsOf(t reflect.Type) *structFields {
	if f, ok := fieldCache.Load(t); ok {
		return f.(*structFields)
	}
	fs := &structFields{byName: make(map[string]structField)}
	for i := range t.NumField() {
		sf := t.Field(i)
		name := yamlName(sf)
		if name == "" {
			continue
		}
		opts := fieldOpts{none: sf.Tag.Get("config") == "none", shadow: sf.Tag.Get("config") == "shadow"}
		fs.byName[name] = structField{index: i, opts: opts}
		fs.names = append(fs.names, name)
	}
	fieldCache.Store(t, fs)
	return fs
}

// yamlName returns the yaml key of an exported field, or "" for fields outside the schema.
func yamlName(sf reflect.StructField) string {
	if !sf.IsExported() {
		return ""
	}
	name, _, _ := strings.Cut(sf.Tag.Get("yaml"), ",")
	if name == "-" {
		return ""
	}
	return name
}

// nearest returns the name closest to key by edit distance when it is close enough to be
// a likely typo, or "".
func nearest(key string, names []string) string {
	best, bestDist := "", 3
	for _, name := range names {
		if dist := editDistance(strings.ToLower(key), name); dist < bestDist {
			best, bestDist = name, dist
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, by bytes.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64 // far too long to be a typo; also bounds the work on hostile input
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// joinPath appends a field name to a path. A key that is not a plain name (an unknown key
// can be anything, even several lines) is quoted, so a path stays on one line.
func joinPath(path, key string) string {
	if !isPlainKey(key) {
		return keyPath(path, key)
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

func isPlainKey(key string) bool {
	if key == "" {
		return false
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; !isAlnum(c) && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

func indexPath(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

func keyPath(path, key string) string { return path + "[" + strconv.Quote(key) + "]" }
