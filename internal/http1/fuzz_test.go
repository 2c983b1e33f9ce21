package http1

import (
	"testing"
)

// FuzzServer feeds arbitrary bytes, delivered in pieces of arbitrary size,
// to net/http's server and to ours, and fails when they differ in any way
// the differential test checks: what reaches the handler (every field,
// the body, the trailers, where each request ends) and every byte written
// back. So the parser never accepts what net/http refuses, never refuses
// what it accepts, and frames every request alike. The two paths where
// net/http sleeps 500 ms before closing (a long body under "OPTIONS *", a
// body that ended long before its Content-Length) are avoided, or the
// fuzzer would starve; TestDifferentialInProcess covers both. Where ours
// departs from net/http on purpose (departureOf), it must do exactly what
// the departure says.
// ci:fuzztime 100000x: it reads what a client sends.
func FuzzServer(f *testing.F) {
	for _, tc := range append(append([]corpusCase{}, hostileCorpus...), bufferEdgeCorpus...) {
		f.Add([]byte(tc.raw), uint8(0))
		f.Add([]byte(tc.raw), uint8(3))
	}
	opts := harnessOpts{noOptions: true, closeBody: true}
	std := newStdServer(opts)
	defer std.close()
	ours := newOurServer(opts)
	f.Fuzz(func(t *testing.T, in []byte, chunk uint8) {
		a := std.serve(in, int(chunk))
		o := ours.serve(in, int(chunk))
		if d := compareWithNetHTTP(in, a, o); d != "" {
			t.Fatalf("input %q (chunk %d)\n%s", in, chunk, d)
		}
	})
}
