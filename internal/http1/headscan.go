package http1

import "bytes"

// HeadScanner runs the server's request-head parser without building an
// http.Request: the checks every head gets (request line, field names and
// values, obs-fold, bare CR), and where each part is. The checks that
// depend on which fields are there (Host, Content-Length,
// Transfer-Encoding) are left to the caller. It exists for
// bench/floor/floorproxy's admission model, which measures what a data path
// working on bytes would spend; the server itself does not use it.
type HeadScanner struct {
	p headParser
}

// Scan parses the request head at the start of b. It returns the head's
// length; 0 and no error when b does not hold all of it yet; or the error
// the server refuses the head with.
func (s *HeadScanner) Scan(b []byte) (int, error) {
	s.p.reset(nil)
	done, err := s.p.advance(b, false)
	if err != nil || !done {
		return 0, err
	}
	// A name with a space parses, as textproto reads it; the server
	// refuses the request once it is read (see keySpace).
	for _, l := range s.p.lines {
		if bytes.IndexByte(l.key.of(b), ' ') >= 0 {
			return 0, errBadHeaderName
		}
	}
	return s.p.headLen, nil
}

// Method, Target and Proto return those parts of the request line of the
// head last scanned from b.
func (s *HeadScanner) Method(b []byte) []byte { return s.p.method.of(b) }
func (s *HeadScanner) Target(b []byte) []byte { return s.p.target.of(b) }
func (s *HeadScanner) Proto(b []byte) []byte  { return s.p.proto.of(b) }

// Fields calls fn with the name (as written) and the trimmed value of each
// header line of the head last scanned from b, in order, and the line's
// bytes with its line end. It reports false, without calling fn for the
// rest, when a line is folded (its value must be joined) or fn returns
// false.
func (s *HeadScanner) Fields(b []byte, fn func(name, value, line []byte) bool) bool {
	for _, l := range s.p.lines {
		if l.folded || !fn(l.key.of(b), l.value.of(b), l.raw.of(b)) {
			return false
		}
	}
	return true
}
