package config

import (
	"encoding"
	"fmt"
	"reflect"
	"strings"

	"go.yaml.in/yaml/v3"
)

var (
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
	rateType            = reflect.TypeFor[RateValue]()
	rateLimitType       = reflect.TypeFor[RateLimit]()
)

// textForms name, for the "must be" of an error, the values written as text (a type whose
// pointer is an encoding.TextUnmarshaler).
var textForms = map[reflect.Type]string{
	rateType:      "a rate such as 10r/s, 600r/m, 30r/h or unlimited",
	rateLimitType: `a rate limit such as "100r/s burst=50", "10r/s burst=20 delay=5" or "10r/s burst=20 nodelay"`,
}

// isTextType reports whether values of t are written in YAML as one string that t reads
// itself (encoding.TextUnmarshaler), such as a RateValue.
func isTextType(t reflect.Type) bool {
	_, ok := textForms[t]
	return ok && reflect.PointerTo(t).Implements(textUnmarshalerType)
}

// text decodes a scalar into a value that reads its own text form.
func (d *decoder) text(n *yaml.Node, v reflect.Value, path string) {
	form := textForms[v.Type()]
	if n.Kind != yaml.ScalarNode || !isPlainScalarTag(n.ShortTag()) {
		d.fail(n, path, "must be %s (got %s)", form, describe(n))
		return
	}
	if err := v.Addr().Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(n.Value)); err != nil {
		d.fail(n, path, "must be %s%s (got %s)", form, textCause(err), describe(n))
	}
}

// textCause returns what a text parser said beyond the input it quoted, as ": cause", or ""
// when it said only that the input has the wrong form.
func textCause(err error) string {
	msg := errorPhrase(err)
	if strings.Contains(msg, "is not a rate") || msg == "" {
		return ""
	}
	return ": " + msg
}

// errorPhrase returns a parse error without any "rate: " prefix or the input it quoted,
// which the error's "(got ...)" already shows.
func errorPhrase(err error) string {
	msg := err.Error()
	if i := strings.LastIndex(msg, `": `); i >= 0 {
		msg = msg[i+3:]
	}
	return strings.TrimPrefix(msg, "rate: ")
}

// encodeText writes a value that has a text form. A value without one (a rate built in Go
// with an odd period, which Validate refuses) is written with fmt, so that Marshal of an
// invalid Config still says what it holds.
func encodeText(v reflect.Value) *yaml.Node {
	if m, ok := v.Interface().(encoding.TextMarshaler); ok {
		if b, err := m.MarshalText(); err == nil {
			return scalar("!!str", string(b))
		}
	}
	return scalar("!!str", fmt.Sprint(v.Interface()))
}
