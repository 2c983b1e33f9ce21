package http1

import (
	"bytes"
	"io"
	"net/http"
	"testing"
)

// sinkConn is a memConn that drops what is written, so that counting
// allocations counts the server's only.
type sinkConn struct{ *memConn }

func (c sinkConn) Write(p []byte) (int, error) { return len(p), nil }

// perRequestAllocs serves n pipelined requests on one connection, for
// n = 1 and n = 201, and returns the allocations the 200 extra requests
// cost each: the steady state of a keep-alive connection, without the
// connection's own setup.
func perRequestAllocs(serve func(in []byte), req string) float64 {
	allocs := func(n int) float64 {
		in := bytes.Repeat([]byte(req), n)
		return testing.AllocsPerRun(20, func() { serve(in) })
	}
	return (allocs(201) - allocs(1)) / 200
}

// TestSteadyStateAllocations: a keep-alive request costs this server two
// allocations, its context and its *http.Request (the Request's context
// can be set only by copying it), whatever the head holds, as long as
// the head repeats the previous one's lines; net/http's figure is given
// for scale.
func TestSteadyStateAllocations(t *testing.T) {
	hnd := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "hello, world\n") })
	srv := &Server{Handler: hnd}
	ours := func(in []byte) { _ = srv.ServeConn(sinkConn{newMemConn(in, 0)}) }
	req := "GET /some/path?q=1 HTTP/1.1\r\nHost: example.com\r\nUser-Agent: bench/1.0\r\nAccept: */*\r\nAccept-Encoding: gzip\r\nX-Forwarded-For: 192.0.2.1\r\n\r\n"
	got := perRequestAllocs(ours, req)

	std := &http.Server{Handler: hnd, ErrorLog: discardLog}
	ln := newChanListener()
	go func() { _ = std.Serve(ln) }()
	defer std.Close()
	theirs := func(in []byte) {
		c := newMemConn(in, 0)
		ln.conns <- sinkConn{c}
		<-c.closed
	}
	base := perRequestAllocs(theirs, req)
	t.Logf("allocations per keep-alive request: ours %.2f, net/http %.2f", got, base)
	if got > 2.05 {
		t.Fatalf("%.2f allocations per request, want at most 2", got)
	}
}
