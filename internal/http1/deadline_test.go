package http1

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestHandlerReadDeadlineCancels checks that a read deadline a handler
// sets through http.ResponseController cancels the request's context when
// it passes, once the request body has been read, as net/http's
// background read does: at once for a deadline already past, at the
// deadline for a later one, never for one cleared again. httplimit's
// reclaim ends an exchange so. Each case runs on net/http's server, and on
// this one with the kernel watch and with the background read.
func TestHandlerReadDeadlineCancels(t *testing.T) {
	cases := []struct {
		name       string
		set        func(rc *http.ResponseController)
		wantCancel bool
		notBefore  time.Duration
	}{
		{"past", func(rc *http.ResponseController) { _ = rc.SetReadDeadline(time.Now().Add(-time.Second)) }, true, 0},
		{"later", func(rc *http.ResponseController) { _ = rc.SetReadDeadline(time.Now().Add(300 * time.Millisecond)) }, true, 250 * time.Millisecond},
		{"cleared", func(rc *http.ResponseController) {
			_ = rc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			_ = rc.SetReadDeadline(time.Time{})
		}, false, 0},
	}
	const wait = 1500 * time.Millisecond
	for _, tc := range cases {
		hnd := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			start := time.Now()
			tc.set(http.NewResponseController(w))
			select {
			case <-r.Context().Done():
				fmt.Fprintf(w, "cancelled after %d ms", time.Since(start).Milliseconds())
			case <-time.After(wait):
				io.WriteString(w, "not cancelled")
			}
		})
		for _, kind := range []string{"nethttp", "kernel", "background"} {
			t.Run(tc.name+"/"+kind, func(t *testing.T) {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				switch kind {
				case "nethttp":
					srv := &http.Server{Handler: hnd}
					go func() { _ = srv.Serve(ln) }()
					t.Cleanup(func() { _ = srv.Close() })
				case "kernel":
					srv := &Server{Handler: hnd}
					go func() { _ = srv.Serve(ln) }()
					t.Cleanup(func() { _ = srv.Close() })
				case "background":
					srv := &Server{Handler: hnd}
					go func() { _ = srv.Serve(plainListener{ln}) }()
					t.Cleanup(func() { _ = srv.Close() })
				}
				c := dial(t, ln.Addr().String())
				// A body, read by the handler: the deadline applies from its end.
				io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				got := string(body)
				if cancelled := strings.HasPrefix(got, "cancelled"); cancelled != tc.wantCancel {
					t.Fatalf("handler saw %q, want cancelled: %v", got, tc.wantCancel)
				}
				var ms int64
				if _, err := fmt.Sscanf(got, "cancelled after %d ms", &ms); err == nil && time.Duration(ms)*time.Millisecond < tc.notBefore {
					t.Fatalf("cancelled after %d ms, before the deadline (%v)", ms, tc.notBefore)
				}
			})
		}
	}
}
