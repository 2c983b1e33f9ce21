package daemon_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/daemon"
)

// fuzzBackend answers every request it reads with the bytes of answer,
// then closes the connection, so that each answer stands alone: a body
// shorter than its framing says ends with the connection, on every path.
type fuzzBackend struct {
	ln     net.Listener
	answer atomic.Pointer[string]
}

func startFuzzBackend(tb testing.TB) *fuzzBackend {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	b := &fuzzBackend{ln: ln}
	serveEach(tb, ln, b.serve)
	return b
}

func (b *fuzzBackend) serve(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return
		}
		if line == "\r\n" {
			break
		}
	}
	_, _ = io.WriteString(c, *b.answer.Load())
}

// FuzzLeanAnswerMatchesFast holds what a client receives from the lean
// path to what it receives from the fast path, byte for byte but for Date,
// whatever the upstream answers: the lean path writes the answers it
// judges simple itself and hands every other to the relay's code, and a
// misjudged answer (a field it should have cut or refused, a length it
// should not have trusted) would show here as different bytes. So is what
// it receives from the lean path on event loops (http1_server eventloop),
// which judges the same answers from the bytes as they come. The seeds
// are the differential test's answers.
//
// With head, the request is a HEAD and a GET pipelined behind it: the
// GET's answer is read after the HEAD's, so that a body written after the
// HEAD's head shows as a garbled second answer. With closing, the (last)
// request says "Connection: close", and the connection must then end.
//
// Each execution is two exchanges over loopback sockets. ci:fuzztime 3000x
func FuzzLeanAnswerMatchesFast(f *testing.F) {
	seeds := []string{
		"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\nabcEXTRA",
		"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
		"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length:  3 \r\nX-A:\tb \r\n\r\nabc",
		"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\nX-Bad: a\rb\r\n\r\nabc",
		"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\nabc",
		"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 3\r\nx-lower: 1\r\n\r\nabc",
		"HTTP/1.1 200 OK\r\nContent-Length: 99999999\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n",
	}
	for _, answer := range leanAnswers {
		seeds = append(seeds, answer)
	}
	for _, answer := range seeds {
		f.Add(answer, false, false)
		f.Add(answer, true, false)
		f.Add(answer, false, true)
	}

	type fuzzDaemon struct {
		srv     *daemon.Server
		addr    string
		backend *fuzzBackend
	}
	var daemons []fuzzDaemon
	servers := []config.HTTP1Server{config.HTTP1ServerFast, config.HTTP1ServerLean, config.HTTP1ServerEventLoop}
	for _, server := range servers {
		b := startFuzzBackend(f)
		cfg := parseConfig(f, leanDiffConfig, "http://"+b.ln.Addr().String())
		cfg.Listeners[0].HTTP1Server = server
		off := false
		cfg.Log.AccessLog = &off
		srv, err := daemon.Start(cfg, daemon.Options{LogOutput: io.Discard})
		if err != nil {
			f.Fatal(err)
		}
		daemons = append(daemons, fuzzDaemon{srv, srv.Addr("web").String(), b})
	}
	f.Cleanup(func() {
		for _, d := range daemons {
			if !waitUntil(func() bool { return d.srv.Snapshot().InUse() == 0 }) {
				f.Errorf("permits or connections still held after the last exchange: %+v", d.srv.Snapshot())
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = d.srv.Shutdown(ctx)
			cancel()
		}
	})

	const get = "GET /f?q=1 HTTP/1.1\r\nHost: app.test\r\nAccept: */*\r\n\r\n"
	const getClosing = "GET /f?q=1 HTTP/1.1\r\nHost: app.test\r\nAccept: */*\r\nConnection: close\r\n\r\n"
	const head = "HEAD /f?q=1 HTTP/1.1\r\nHost: app.test\r\nAccept: */*\r\n\r\n"
	f.Fuzz(func(t *testing.T, answer string, withHead, closing bool) {
		if len(answer) > 48<<10 {
			return
		}
		request, methods := get, []string{http.MethodGet}
		if closing {
			request = getClosing
		}
		if withHead {
			request, methods = head+request, []string{http.MethodHead, http.MethodGet}
		}
		var got [3]string
		for i, d := range daemons {
			d.backend.answer.Store(&answer)
			got[i] = exchangeResetting(t, d.addr, request, closing, methods...)
		}
		for i := 1; i < len(got); i++ {
			if oneChunk(got[0]) != oneChunk(got[i]) {
				t.Errorf("upstream answer %q to %v:\nthe fast path gave %q\n%s gave %q",
					answer, methods, got[0], servers[i], got[i])
			}
		}
	})
}

// exchangeResetting sends request on a new connection to addr and returns
// what came back, up to the end of the answers to methods or of the
// connection, without Date fields, as readAnswers reads it, and, when
// closing, whether the connection then ended; then it resets the
// connection, so that thousands of executions leave no TIME_WAIT behind
// to run out of ports. An answer slower than 3 s fails t: every upstream
// answer here comes at once and ends with its connection.
func exchangeResetting(t *testing.T, addr, request string, closing bool, methods ...string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.(*net.TCPConn).SetLinger(0)
	start := time.Now()
	_ = c.SetDeadline(start.Add(3 * time.Second))
	if _, err := io.WriteString(c, request); err != nil {
		t.Fatal(err)
	}
	got, _ := readAnswers(c, methods...)
	if closing {
		if _, err := io.Copy(io.Discard, c); err != nil {
			got += "[not closed]"
		}
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the exchange took %v; got %q", d, got)
	}
	return got
}

// oneChunk returns answers with every chunked body's chunks joined into
// one: where a body of unknown length is cut into chunks depends on how
// its bytes came to the server's reads, which an event loop handing an
// exchange over, with the bytes it read put back in front, changes. What
// the client learns (the fields, the body's bytes, where it ends) does
// not change. A body whose chunks do not parse is left as it is.
func oneChunk(answers string) string {
	const te = "Transfer-Encoding: chunked\r\n"
	var b strings.Builder
	for {
		i := strings.Index(answers, te)
		if i < 0 {
			b.WriteString(answers)
			return b.String()
		}
		j := strings.Index(answers[i:], "\r\n\r\n")
		if j < 0 {
			b.WriteString(answers)
			return b.String()
		}
		start := i + j + 4
		b.WriteString(answers[:start])
		data, rest := joinChunks(answers[start:])
		if data != "" {
			fmt.Fprintf(&b, "%x\r\n%s\r\n", len(data), data)
		}
		answers = rest
	}
}

// joinChunks reads chunks from s while they parse and returns their
// bytes, and what follows them (the last chunk on).
func joinChunks(s string) (data, rest string) {
	var d strings.Builder
	for {
		line, after, ok := strings.Cut(s, "\r\n")
		if !ok {
			return d.String(), s
		}
		n, err := strconv.ParseUint(line, 16, 32)
		if err != nil || n == 0 || uint64(len(after)) < n+2 || after[n:n+2] != "\r\n" {
			return d.String(), s
		}
		d.WriteString(after[:n])
		s = after[n+2:]
	}
}
