package http1

import (
	"bufio"
	"io"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/waitfor"
)

// TestGoroutinesEnd: after Close, nothing of the server's is left running,
// whatever its connections were doing: idle, in a handler, watched by a
// background read, pipelined, or half-sent.
func TestGoroutinesEnd(t *testing.T) {
	base := goroutineBase(t)

	entered := make(chan struct{}, 8)
	hnd := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/wait" {
			entered <- struct{}{}
			<-r.Context().Done()
			return
		}
		_, _ = io.WriteString(w, "ok")
	})
	for _, plain := range []bool{false, true} {
		srv := &Server{Handler: hnd}
		var addr string
		if plain {
			addr = servePlain(t, srv)
		} else {
			ln := serve(t, srv)
			addr = ln
		}
		idle := dial(t, addr)
		roundTrip(t, idle, bufio.NewReader(idle), get, "GET")
		busy := dial(t, addr)
		_, _ = io.WriteString(busy, getPath("/wait"))
		<-entered
		pipelined := dial(t, addr)
		_, _ = io.WriteString(pipelined, getPath("/wait")+get)
		<-entered
		half := dial(t, addr)
		_, _ = io.WriteString(half, "GET / HTTP/1.1\r\nHo")
		time.Sleep(20 * time.Millisecond)
		_ = srv.Close()
		for _, c := range []interface{ Close() error }{idle, busy, pipelined, half} {
			_ = c.Close()
		}
	}
	waitGoroutines(t, base)
}

// goroutineBase starts the process-wide kernel watch, which lives on, and
// returns how many goroutines run: the count a leak check comes back to.
func goroutineBase(t *testing.T) int {
	t.Helper()
	warm := &Server{Handler: http.NotFoundHandler()}
	c := dial(t, serve(t, warm))
	roundTrip(t, c, bufio.NewReader(c), get, "GET")
	_ = c.Close()
	_ = warm.Close()
	time.Sleep(50 * time.Millisecond)
	return runtime.NumGoroutine()
}

// waitGoroutines fails the test unless the goroutines are back to base
// within 5 s.
func waitGoroutines(t *testing.T, base int) {
	t.Helper()
	if !waitfor.Until(5*time.Second, func() bool { return runtime.NumGoroutine() <= base }) {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines, %d before:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
	}
}
