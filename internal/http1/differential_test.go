package http1

import (
	"io"
	"net"
	"net/http"
	"testing"
)

// TestDifferentialInProcess feeds every corpus input to net/http's server
// and to ours over in-memory connections, whole and in small pieces, and
// requires the same requests to reach the handler (method, target, URL,
// Host, every header field, body bytes, trailers, framing: where each
// request ends) and the same bytes back (Date values masked).
func TestDifferentialInProcess(t *testing.T) {
	std := newStdServer(harnessOpts{})
	defer std.close()
	ours := newOurServer(harnessOpts{})
	hostile := append(append([]corpusCase{}, hostileCorpus...), bufferEdgeCorpus...)
	cases := append(hostile, generatedCorpus(3000)...)
	for i, tc := range cases {
		for _, chunk := range []int{0, 1, 7} {
			if chunk == 1 && (i >= len(hostile) || len(tc.raw) > 2000) {
				continue // byte by byte: the hand-written cases only
			}
			a := std.serve([]byte(tc.raw), chunk)
			o := ours.serve([]byte(tc.raw), chunk)
			if d := compareWithNetHTTP([]byte(tc.raw), a, o); d != "" {
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

// TestDifferentialLoopback sends the hostile corpus, the buffer-edge cases
// and part of the generated corpus to net/http's server and to ours over
// loopback TCP (the client writes everything, half-closes, reads to the
// end), and requires what reached each handler and every byte written
// back to be the same.
func TestDifferentialLoopback(t *testing.T) {
	stdRec, ourRec := &recorder{}, &recorder{}
	stdSrv := &http.Server{Handler: stdRec, ErrorLog: discardLog}
	stdLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = stdSrv.Serve(stdLn) }()
	defer stdSrv.Close()
	ourAddr := serve(t, &Server{Handler: ourRec, Logger: discardSlog})

	exchange := func(addr string, rec *recorder, raw string) outcome {
		c := dial(t, addr)
		if _, err := io.WriteString(c, raw); err != nil {
			// The server may close before taking everything (431, 400).
			t.Logf("write: %v", err)
		}
		_ = c.(*net.TCPConn).CloseWrite()
		out, _ := io.ReadAll(c)
		return outcome{seen: rec.take(), output: maskDate(out)}
	}
	cases := append(append(append([]corpusCase{}, hostileCorpus...), bufferEdgeCorpus...), generatedCorpus(3000)[:1500]...)
	for _, tc := range cases {
		a := exchange(stdLn.Addr().String(), stdRec, tc.raw)
		o := exchange(ourAddr, ourRec, tc.raw)
		if d := compareWithNetHTTP([]byte(tc.raw), a, o); d != "" {
			t.Errorf("%s: input %q\n%s", tc.name, tc.raw, d)
		}
	}
}
