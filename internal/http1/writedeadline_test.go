package http1

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// deadlineCountingListener hands out connections that count the write
// deadlines set on them, split into sets and clears.
type deadlineCountingListener struct {
	net.Listener
	mu           sync.Mutex
	sets, clears int
}

func (l *deadlineCountingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &deadlineCountingConn{Conn: c, l: l}, nil
}

func (l *deadlineCountingListener) counts() (sets, clears int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sets, l.clears
}

type deadlineCountingConn struct {
	net.Conn
	l *deadlineCountingListener
}

func (c *deadlineCountingConn) SetWriteDeadline(t time.Time) error {
	c.l.mu.Lock()
	if t.IsZero() {
		c.l.clears++
	} else {
		c.l.sets++
	}
	c.l.mu.Unlock()
	return c.Conn.SetWriteDeadline(t)
}

// withinSetter is what the daemon's exchange writer looks for.
type withinSetter interface {
	SetWriteDeadlineWithin(t time.Time, slack time.Duration) error
}

func startCounting(t *testing.T, h http.Handler) (*deadlineCountingListener, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := &deadlineCountingListener{Listener: ln}
	srv := &Server{Handler: h}
	go func() { _ = srv.Serve(cl) }()
	t.Cleanup(func() { _ = srv.Close() })
	return cl, ln.Addr().String()
}

// TestWriteDeadlineWithinIsKeptAcrossRequests checks that a write deadline
// set for every request with SetWriteDeadlineWithin is set on the
// connection once, and neither cleared nor set again while each request
// asks for one within the slack of it; and that one set with
// SetWriteDeadline is still set and cleared for every request.
func TestWriteDeadlineWithinIsKeptAcrossRequests(t *testing.T) {
	const requests = 20
	cases := []struct {
		name                   string
		set                    func(w http.ResponseWriter) error
		wantSets, wantClearsGE int
	}{
		{"within", func(w http.ResponseWriter) error {
			return w.(withinSetter).SetWriteDeadlineWithin(time.Now().Add(time.Hour), time.Minute)
		}, 1, 0},
		{"plain", func(w http.ResponseWriter) error {
			return http.NewResponseController(w).SetWriteDeadline(time.Now().Add(time.Hour))
		}, requests, requests},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cl, addr := startCounting(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if err := tc.set(w); err != nil {
					t.Errorf("set the write deadline: %v", err)
				}
				io.WriteString(w, "ok")
			}))
			c := dial(t, addr)
			br := bufio.NewReader(c)
			for i := range requests {
				io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				if body, _ := io.ReadAll(resp.Body); string(body) != "ok" {
					t.Fatalf("request %d: body %q", i, body)
				}
			}
			c.Close()
			sets, clears := cl.counts()
			// The server clears a request's deadline after its response
			// went out: the last one may still be on its way.
			for deadline := time.Now().Add(5 * time.Second); tc.name == "plain" && clears < requests && time.Now().Before(deadline); {
				time.Sleep(5 * time.Millisecond)
				sets, clears = cl.counts()
			}
			if tc.name == "within" && (sets != tc.wantSets || clears != 0) {
				t.Fatalf("%d requests: %d deadlines set and %d cleared, want 1 set and none cleared", requests, sets, clears)
			}
			if tc.name == "plain" && (sets != tc.wantSets || clears < tc.wantClearsGE) {
				t.Fatalf("%d requests: %d deadlines set and %d cleared, want %d set and as many cleared", requests, sets, clears, requests)
			}
		})
	}
}

// TestWriteDeadlineWithinMovesWhenOutOfSlack checks that a deadline asked
// for beyond the slack of the one set is set again.
func TestWriteDeadlineWithinMovesWhenOutOfSlack(t *testing.T) {
	base := time.Now().Add(time.Hour)
	var n int
	cl, addr := startCounting(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Each request asks for a deadline 2 s later than the last,
		// with a slack of 1 s: every one must be set.
		_ = w.(withinSetter).SetWriteDeadlineWithin(base.Add(time.Duration(n)*2*time.Second), time.Second)
		n++
		io.WriteString(w, "ok")
	}))
	c := dial(t, addr)
	br := bufio.NewReader(c)
	for i := range 5 {
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
	}
	if sets, clears := cl.counts(); sets != 5 || clears != 0 {
		t.Fatalf("5 requests, each beyond the last's slack: %d deadlines set and %d cleared, want 5 and 0", sets, clears)
	}
}

// TestWriteDeadlineLeftIsClearedWhenNotRenewed checks that a deadline left
// by one request's handler does not cut the next request's response short
// when that request's handler does not renew it: not a response written
// after the deadline passed, and not the 400 to a malformed request.
func TestWriteDeadlineLeftIsClearedWhenNotRenewed(t *testing.T) {
	big := strings.Repeat("x", 256<<10)
	_, addr := startCounting(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/set" {
			_ = w.(withinSetter).SetWriteDeadlineWithin(time.Now().Add(100*time.Millisecond), 0)
			io.WriteString(w, "set")
			return
		}
		io.WriteString(w, big)
	}))
	for _, next := range []string{"GET /big HTTP/1.1\r\nHost: x\r\n\r\n", "GET / HTTP/1.1\r\nHost x\r\n\r\n"} {
		c := dial(t, addr)
		br := bufio.NewReader(c)
		io.WriteString(c, "GET /set HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		time.Sleep(300 * time.Millisecond) // the deadline passes
		io.WriteString(c, next)
		resp, err = http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("after the left deadline passed, %q: %v", next, err)
		}
		body, err := io.ReadAll(resp.Body)
		switch {
		case err != nil:
			t.Fatalf("after the left deadline passed, %q: body: %v", next, err)
		case strings.HasPrefix(next, "GET /big") && (resp.StatusCode != 200 || len(body) != len(big)):
			t.Fatalf("after the left deadline passed: status %d, %d body bytes, want 200 and %d", resp.StatusCode, len(body), len(big))
		case !strings.HasPrefix(next, "GET /big") && resp.StatusCode != 400:
			t.Fatalf("malformed request after the left deadline passed: status %d, want 400", resp.StatusCode)
		}
		c.Close()
	}
}

// TestWriteDeadlineWithinStopsAStalledWrite checks that a deadline set
// with SetWriteDeadlineWithin ends a write to a client that stopped
// reading, no earlier than asked.
func TestWriteDeadlineWithinStopsAStalledWrite(t *testing.T) {
	const after, slack = 200 * time.Millisecond, 50 * time.Millisecond
	result := make(chan string, 1)
	_, addr := startCounting(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		_ = w.(withinSetter).SetWriteDeadlineWithin(start.Add(after), slack)
		chunk := make([]byte, 64<<10)
		for i := 0; i < 4096; i++ { // at most 256 MiB: the socket buffers fill long before
			if _, err := w.Write(chunk); err != nil {
				if !isTimeout(err) {
					result <- fmt.Sprintf("write failed with %v, not a timeout", err)
					return
				}
				if d := time.Since(start); d < after {
					result <- fmt.Sprintf("write failed after %v, before the deadline (%v)", d, after)
					return
				}
				result <- ""
				return
			}
		}
		result <- "256 MiB written to a client that reads nothing"
	}))
	c := dial(t, addr)
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4096)
	}
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	select {
	case msg := <-result:
		if msg != "" {
			t.Fatal(msg)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the write did not fail within 10 s of a 200 ms deadline")
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
