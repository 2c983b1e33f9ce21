package forward_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// rawOrigin is a loopback origin that answers every request with answer
// and hands the request head it read (up to the blank line) to heads.
type rawOrigin struct {
	addr  string
	heads chan string
}

func newRawOrigin(t *testing.T, answer string) *rawOrigin {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := &rawOrigin{addr: ln.Addr().String(), heads: make(chan string, 16)}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(waitLimit))
				br := bufio.NewReader(c)
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				var head strings.Builder
				_ = req.Header.Write(&head)
				_, _ = io.Copy(io.Discard, req.Body)
				o.heads <- head.String()
				_, _ = io.WriteString(c, answer)
			}()
		}
	}()
	return o
}

func (o *rawOrigin) head(t *testing.T) string {
	t.Helper()
	select {
	case h := <-o.heads:
		return h
	case <-time.After(waitLimit):
		t.Fatal("the origin got no request")
		return ""
	}
}

// exchangeRaw sends req (an absolute-form request, whole) through the
// stack on a new connection and returns the response and its body.
func exchangeRaw(t *testing.T, s *stack, req string) (*http.Response, string) {
	t.Helper()
	c := rawConn(t, s, "127.0.0.2")
	_ = c.SetDeadline(time.Now().Add(waitLimit))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	return resp, readBody(t, resp)
}

// The fields a response's Connection names are removed even when it also
// says "close": net/http's reading drops such a Connection field whole, and
// the fields it named went on to the client. Checked for a head the fast
// path reads (Content-Length), one net/http reads (chunked), and the
// answer to a request with a body (the Transport's fallback).
func TestForwardDropsFieldsConnectionCloseNames(t *testing.T) {
	s := newStack(t, stackOptions{})
	for _, tc := range []struct{ name, answer, req string }{
		{"content-length", "HTTP/1.1 200 OK\r\nConnection: close, X-Secret\r\nX-Secret: s\r\nX-Kept: k\r\nContent-Length: 2\r\n\r\nok", "GET"},
		{"request with a body", "HTTP/1.1 200 OK\r\nConnection: close, X-Secret\r\nX-Secret: s\r\nX-Kept: k\r\nContent-Length: 2\r\n\r\nok", "POST"},
		{"chunked", "HTTP/1.1 200 OK\r\nConnection: X-Secret\r\nConnection: close\r\nX-Secret: s\r\nX-Kept: k\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n", "GET"},
		{"HTTP/1.0", "HTTP/1.0 200 OK\r\nConnection: close, x-secret\r\nX-Secret: s\r\nX-Kept: k\r\nContent-Length: 2\r\n\r\nok", "GET"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := newRawOrigin(t, tc.answer)
			req := tc.req + " http://" + o.addr + "/ HTTP/1.1\r\nHost: " + o.addr + "\r\n\r\n"
			if tc.req == "POST" {
				req = "POST http://" + o.addr + "/ HTTP/1.1\r\nHost: " + o.addr + "\r\nContent-Length: 3\r\n\r\nabc"
			}
			resp, body := exchangeRaw(t, s, req)
			o.head(t)
			if resp.StatusCode != http.StatusOK || body != "ok" {
				t.Fatalf("%d %q", resp.StatusCode, body)
			}
			if v := resp.Header.Get("X-Secret"); v != "" {
				t.Errorf("X-Secret: %q reached the client, though the origin's Connection named it", v)
			}
			if resp.Header.Get("X-Kept") != "k" {
				t.Errorf("X-Kept lost: %v", resp.Header)
			}
		})
	}
}

// A request without User-Agent reaches the origin without one (absent
// stays absent, on the fast path and on the fallback for requests with a
// body), and an X-Real-IP the client sent is not passed on.
func TestForwardSendsWhatTheClientSent(t *testing.T) {
	s := newStack(t, stackOptions{})
	o := newRawOrigin(t, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	for _, req := range []string{
		"GET http://" + o.addr + "/ HTTP/1.1\r\nHost: " + o.addr + "\r\nX-Real-IP: 203.0.113.9\r\n\r\n",
		"POST http://" + o.addr + "/ HTTP/1.1\r\nHost: " + o.addr + "\r\nX-Real-IP: 203.0.113.9\r\nContent-Length: 3\r\n\r\nabc",
	} {
		resp, _ := exchangeRaw(t, s, req)
		head := o.head(t)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%d", resp.StatusCode)
		}
		for _, f := range []string{"User-Agent", "X-Real-Ip"} {
			if strings.Contains(head, f+":") {
				t.Errorf("%s: the origin got %s:\n%s", strings.Fields(req)[0], f, head)
			}
		}
	}
}
