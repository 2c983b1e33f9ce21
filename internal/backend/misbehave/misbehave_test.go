package misbehave_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/backend/misbehave"
	"github.com/seed-a07d1050/portcullis/internal/doctest"
)

func start(t *testing.T, cfg misbehave.Config) *misbehave.Server {
	t.Helper()
	s, err := misbehave.Start("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// rawClient is one connection to the server, read by hand.
type rawClient struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func dial(t *testing.T, s *misbehave.Server) *rawClient {
	t.Helper()
	c, err := net.DialTimeout("tcp", s.Addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return &rawClient{t: t, c: c, br: bufio.NewReader(c)}
}

// send writes a bodyless request and reads the head of its response.
func (r *rawClient) send(method, target string) *http.Response {
	r.t.Helper()
	if _, err := io.WriteString(r.c, method+" "+target+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		r.t.Fatal(err)
	}
	req, _ := http.NewRequest(method, target, nil)
	resp, err := http.ReadResponse(r.br, req)
	if err != nil {
		r.t.Fatalf("%s %s: %v", method, target, err)
	}
	return resp
}

// expectAnswer reads a whole response and checks that it is the answer to
// method and target, with status and, if withBody, the answer's body.
func (r *rawClient) expectAnswer(resp *http.Response, status int, method, target string, withBody bool) {
	r.t.Helper()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		r.t.Fatalf("body: %v", err)
	}
	if resp.StatusCode != status || resp.Header.Get(misbehave.AnswerHeader) != method+" "+target {
		r.t.Fatalf("status %d %s %q, want %d for %s %s", resp.StatusCode, misbehave.AnswerHeader, resp.Header.Get(misbehave.AnswerHeader), status, method, target)
	}
	want := ""
	if withBody {
		want = misbehave.Answer(method, target)
	}
	if string(body) != want {
		r.t.Fatalf("body %q, want %q", body, want)
	}
}

// expectStray reads the complete stray response that follows an answer.
func (r *rawClient) expectStray(method, target string) {
	r.t.Helper()
	resp, err := http.ReadResponse(r.br, nil)
	if err != nil {
		r.t.Fatalf("stray response: %v", err)
	}
	r.expectAnswer(resp, 200, method, target, true)
}

// expectEnd checks that the connection ends with err (io.EOF or a reset)
// and nothing before it.
func (r *rawClient) expectEnd(reset bool) {
	r.t.Helper()
	b, err := r.br.ReadByte()
	switch {
	case err == nil:
		r.t.Fatalf("byte %q, want the connection to end", b)
	case reset && !errors.Is(err, syscall.ECONNRESET):
		r.t.Fatalf("err %v, want a reset", err)
	case !reset && err != io.EOF:
		r.t.Fatalf("err %v, want EOF", err)
	}
}

// expectQuiet checks that nothing is readable within a short wait.
func (r *rawClient) expectQuiet() {
	r.t.Helper()
	r.c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	defer r.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if b, err := r.br.ReadByte(); err == nil || !errors.Is(err, syscall.ETIMEDOUT) && !isTimeout(err) {
		r.t.Fatalf("read %q, %v; want nothing", b, err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestFaults(t *testing.T) {
	cases := []struct {
		fault  misbehave.Fault
		method string
		check  func(r *rawClient, s *misbehave.Server)
	}{
		{misbehave.None, "GET", func(r *rawClient, s *misbehave.Server) {
			if n := s.Release(); n != 0 {
				t.Fatalf("Release did %d faults, want 0", n)
			}
			r.expectQuiet()
		}},
		{misbehave.LateResponse, "GET", func(r *rawClient, s *misbehave.Server) {
			r.expectQuiet()
			if n := s.Release(); n != 1 {
				t.Fatalf("Release did %d faults, want 1", n)
			}
			r.expectStray("GET", "/a")
		}},
		{misbehave.HeadWithBody, "HEAD", func(r *rawClient, _ *misbehave.Server) { r.expectStray("HEAD", "/a") }},
		{misbehave.HeadWithBody, "GET", func(r *rawClient, _ *misbehave.Server) { r.expectQuiet() }},
		{misbehave.NoContentWithBody, "GET", func(r *rawClient, _ *misbehave.Server) { r.expectStray("GET", "/a") }},
		{misbehave.NotModifiedWithBody, "GET", func(r *rawClient, _ *misbehave.Server) { r.expectStray("GET", "/a") }},
		{misbehave.IdleTimeout, "GET", func(r *rawClient, s *misbehave.Server) {
			r.expectQuiet()
			s.Release()
			resp, err := http.ReadResponse(r.br, nil)
			if err != nil || resp.StatusCode != http.StatusRequestTimeout || !resp.Close {
				t.Fatalf("after release: %v %v, want 408 with Connection: close", resp, err)
			}
			r.expectEnd(false)
		}},
		{misbehave.IdleClose, "GET", func(r *rawClient, s *misbehave.Server) { s.Release(); r.expectEnd(false) }},
		{misbehave.IdleReset, "GET", func(r *rawClient, s *misbehave.Server) { s.Release(); r.expectEnd(true) }},
		{misbehave.TwoResponses, "GET", func(r *rawClient, _ *misbehave.Server) {
			if r.br.Buffered() == 0 {
				t.Fatal("the stray response did not arrive with the answer")
			}
			r.expectStray("GET", "/a")
		}},
		{misbehave.SplitHead, "GET", func(r *rawClient, _ *misbehave.Server) { r.expectQuiet() }},
		{misbehave.ChunkedTrailingGarbage, "GET", func(r *rawClient, _ *misbehave.Server) { r.expectStray("GET", "/a") }},
	}
	for _, tc := range cases {
		t.Run(tc.fault.String()+"/"+tc.method, func(t *testing.T) {
			s := start(t, misbehave.Config{Fault: tc.fault})
			r := dial(t, s)
			resp := r.send(tc.method, "/a")
			r.expectAnswer(resp, tc.fault.Status(), tc.method, "/a", tc.fault.HasBody(tc.method))
			tc.check(r, s)
			if s.Requests() != 1 || s.Accepted() != 1 {
				t.Fatalf("%d requests on %d connections, want 1 and 1", s.Requests(), s.Accepted())
			}
		})
	}
}

func TestEarlyClose(t *testing.T) {
	s := start(t, misbehave.Config{Fault: misbehave.EarlyClose})
	r := dial(t, s)
	resp := r.send("GET", "/a")
	body, err := io.ReadAll(resp.Body)
	if !errors.Is(err, io.ErrUnexpectedEOF) || string(body) != misbehave.Answer("GET", "/a") {
		t.Fatalf("body %q, %v; want the answer then an unexpected EOF", body, err)
	}
}

// TestEvery checks that a fault applies to every Every-th answer only.
func TestEvery(t *testing.T) {
	s := start(t, misbehave.Config{Fault: misbehave.NoContentWithBody, Every: 2})
	r := dial(t, s)
	r.expectAnswer(r.send("GET", "/1"), 200, "GET", "/1", true)
	r.expectAnswer(r.send("GET", "/2"), 204, "GET", "/2", false)
	r.expectStray("GET", "/2")
	r.expectAnswer(r.send("GET", "/3"), 200, "GET", "/3", true)
}

// TestLateAfter checks that a late fault acts on its own, and that the
// next request on the connection is answered after it.
func TestLateAfter(t *testing.T) {
	s := start(t, misbehave.Config{Fault: misbehave.LateResponse, LateAfter: 30 * time.Millisecond})
	r := dial(t, s)
	r.expectAnswer(r.send("GET", "/a"), 200, "GET", "/a", true)
	if n := s.Pending(); n != 1 {
		t.Fatalf("%d faults pending before LateAfter, want 1", n)
	}
	r.expectStray("GET", "/a") // within the 10 s deadline
	if n := s.Pending(); n != 0 {
		t.Fatalf("%d faults pending after LateAfter, want 0", n)
	}
	if n := s.Release(); n != 0 {
		t.Fatalf("Release did %d faults after LateAfter, want 0", n)
	}
}

func TestInvalidConfig(t *testing.T) {
	for _, cfg := range []misbehave.Config{{Fault: -1}, {Fault: 99}, {Every: -1}, {LateAfter: -time.Second}} {
		if _, err := misbehave.Start("127.0.0.1:0", cfg); !errors.Is(err, misbehave.ErrInvalidConfig) {
			t.Errorf("Start(%+v): %v, want ErrInvalidConfig", cfg, err)
		}
	}
}

func TestFaultNames(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range append([]misbehave.Fault{misbehave.None}, misbehave.Faults...) {
		name := f.String()
		if seen[name] || strings.HasPrefix(name, "fault(") {
			t.Errorf("fault %d has name %q", int(f), name)
		}
		seen[name] = true
	}
}

func TestConfigDocumented(t *testing.T) {
	doctest.ZeroValuesDocumented(t, "misbehave.go", reflect.TypeFor[misbehave.Config]())
}

func TestCheckAnswer(t *testing.T) {
	mk := func(status int, answerTo, body string) *http.Response {
		h := http.Header{}
		if answerTo != "" {
			h.Set(misbehave.AnswerHeader, answerTo)
		}
		return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader(body))}
	}
	cases := []struct {
		name   string
		resp   *http.Response
		method string
		wrong  bool
	}{
		{"own", mk(200, "GET /a", misbehave.Answer("GET", "/a")), "GET", false},
		{"own HEAD", mk(200, "HEAD /a", ""), "HEAD", false},
		{"own 204", mk(204, "GET /a", ""), "GET", false},
		{"another request's", mk(200, "GET /b", misbehave.Answer("GET", "/b")), "GET", true},
		{"another method's", mk(200, "HEAD /a", ""), "GET", true},
		{"no header", mk(200, "", misbehave.Answer("GET", "/a")), "GET", true},
		{"another body", mk(200, "GET /a", misbehave.Answer("GET", "/b")), "GET", true},
		{"a body on HEAD", mk(200, "HEAD /a", "x"), "HEAD", true},
		{"a 408", mk(408, "GET /a", ""), "GET", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := misbehave.CheckAnswer(tc.resp, tc.method, "/a")
			if tc.wrong != errors.Is(err, misbehave.ErrWrongAnswer) || !tc.wrong && err != nil {
				t.Fatalf("CheckAnswer: %v, want wrong %v", err, tc.wrong)
			}
		})
	}
}
