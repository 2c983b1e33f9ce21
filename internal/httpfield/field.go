// Package httpfield holds the header field that a proxy's upstream reader
// and its server pass between them as a list, where a header map would
// cost a map built, copied and iterated for every response.
package httpfield

// Field is one header field line: its name in canonical form
// (textproto.CanonicalMIMEHeaderKey) and its value with the spaces and tabs
// around it trimmed, as net/http stores them in an http.Header.
type Field struct {
	Name, Value string
}
