package config

import (
	"bytes"
	"fmt"
	"maps"
	"math"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

var _ yaml.Marshaler = (*Config)(nil)

// Marshal encodes c as YAML, fields in declaration order, indented by two spaces:
// durations as Go duration strings, networks in CIDR form, NoRetryAfter as "none", empty
// lists and maps as [] and {}, and nil blocks (cluster, limits) left out. c is written as
// it is; for `portcullis check`, marshal c.Effective() to show every default. [Parse] of
// the result gives back a Config equal to c, apart from relative file paths, which Parse
// makes absolute. c must not be nil.
func (c *Config) Marshal() ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(c.node()); err != nil {
		return nil, fmt.Errorf("config: encode: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("config: encode: %w", err)
	}
	return buf.Bytes(), nil
}

// MarshalYAML implements yaml.Marshaler with the encoding of [Config.Marshal], so that
// yaml.Marshal of a Config agrees with Parse.
func (c *Config) MarshalYAML() (any, error) {
	return c.node(), nil
}

func (c *Config) node() *yaml.Node {
	return encodeValue(reflect.ValueOf(c).Elem(), fieldOpts{})
}

// encodeValue builds the YAML node of v; it returns nil for a value left out (a nil pointer).
func encodeValue(v reflect.Value, opts fieldOpts) *yaml.Node {
	switch v.Type() {
	case durationType:
		d := time.Duration(v.Int())
		if opts.none && d == NoRetryAfter {
			return scalar("!!str", "none")
		}
		return scalar("!!str", d.String())
	case prefixType:
		p := v.Interface().(netip.Prefix)
		if !p.IsValid() {
			return scalar("!!str", "")
		}
		return scalar("!!str", p.String())
	}
	if isTextType(v.Type()) {
		return encodeText(v)
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return nil
		}
		return encodeValue(v.Elem(), opts)
	case reflect.Struct:
		return encodeStruct(v, opts)
	case reflect.Slice:
		return encodeSlice(v)
	case reflect.Map:
		return encodeMap(v)
	case reflect.String:
		return scalar("!!str", v.String())
	case reflect.Int:
		return scalar("!!int", strconv.FormatInt(v.Int(), 10))
	case reflect.Float64:
		return scalar("!!float", formatFloat(v.Float()))
	case reflect.Bool:
		return scalar("!!bool", strconv.FormatBool(v.Bool()))
	}
	panic(fmt.Sprintf("config: cannot encode %s", v.Type()))
}

// encodeStruct writes the fields of a struct, leaving out the zero fields that do not
// apply where the struct sits (see leaveOut).
func encodeStruct(v reflect.Value, opts fieldOpts) *yaml.Node {
	n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	fields := fieldsOf(v.Type())
	for _, name := range fields.names {
		f := fields.byName[name]
		fv := v.Field(f.index)
		if fv.IsZero() && leaveOut(v, name, opts) {
			continue
		}
		val := encodeValue(fv, f.opts)
		if val == nil {
			continue
		}
		n.Content = append(n.Content, scalar("!!str", name), val)
	}
	return n
}

// leaveOut reports whether the field name of struct v does not apply and so, when zero, is
// better left out than shown: a listener field its protocol (or its forward mode) does not
// use, or a refusal field of a shadow limit.
func leaveOut(v reflect.Value, name string, opts fieldOpts) bool {
	switch s := v.Addr().Interface().(type) {
	case *Listener:
		return s.Protocol.IsValid() && !s.Protocol.Uses(name) ||
			s.IsForward() && (name == "routes" || name == "routes_from")
	case *Limit:
		return opts.shadow && (name == "queue" || name == "status" || name == "retry_after")
	}
	return false
}

// encodeSlice writes lists of scalars in flow style ([a, b]) and lists of blocks one item
// per entry.
func encodeSlice(v reflect.Value) *yaml.Node {
	n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	n.Style = yaml.FlowStyle
	for i := range v.Len() {
		item := encodeValue(v.Index(i), fieldOpts{})
		if item.Kind != yaml.ScalarNode {
			n.Style = 0
		}
		n.Content = append(n.Content, item)
	}
	return n
}

func encodeMap(v reflect.Value) *yaml.Node {
	n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	m := make(map[string]reflect.Value, v.Len())
	for it := v.MapRange(); it.Next(); {
		m[it.Key().String()] = it.Value()
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		n.Content = append(n.Content, scalar("!!str", k), encodeValue(m[k], fieldOpts{}))
	}
	if len(m) == 0 {
		n.Style = yaml.FlowStyle
	}
	return n
}

func scalar(tag, value string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: value}
}

// formatFloat writes f so that YAML reads it back as the same float: always with a point
// or exponent, and .nan/.inf for the values YAML spells so.
func formatFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return ".nan"
	case math.IsInf(f, 1):
		return ".inf"
	case math.IsInf(f, -1):
		return "-.inf"
	}
	s := strconv.FormatFloat(f, 'g', -1, 64)
	if !strings.ContainsAny(s, ".e") {
		s += ".0"
	}
	return s
}
