package http1

import (
	"testing"
)

// TestDifferentialInProcess feeds every corpus input to net/http's server
// and to ours over in-memory connections, whole and in small pieces, and
// requires the same requests to reach the handler (method, target, URL,
// Host, every header field, body bytes, trailers, framing: where each
// request ends) and the same bytes back (Date values masked).
func TestDifferentialInProcess(t *testing.T) {
	std := newStdServer()
	defer std.close()
	ours := newOurServer()
	cases := append(append([]corpusCase{}, hostileCorpus...), generatedCorpus(3000)...)
	for _, tc := range cases {
		for _, chunk := range []int{0, 1, 7} {
			if chunk == 1 && len(tc.raw) > 2000 {
				continue
			}
			a := std.serve([]byte(tc.raw), chunk)
			o := ours.serve([]byte(tc.raw), chunk)
			if d := compare(a, o); d != "" {
				t.Errorf("%s (chunk %d): input %q\n%s", tc.name, chunk, tc.raw, d)
				continue
			}
			if tc.want != "" || tc.raw == "" {
				if got := statusesOf(a.output); got != tc.want {
					t.Errorf("%s (chunk %d): net/http answered %q, the corpus says %q: fix the corpus", tc.name, chunk, got, tc.want)
				}
			}
		}
	}
}
