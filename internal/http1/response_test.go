package http1

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// responseCase is a handler and the requests it is asked, the follow-up
// request showing whether the connection was kept.
type responseCase struct {
	name    string
	req     string
	handler http.HandlerFunc
}

// responseDeviation is a documented difference from net/http: why, and
// what our server writes instead.
type responseDeviation struct {
	why      string
	oursWant string
}

var responseDeviations = map[string]responseDeviation{
	"max bytes reader": {
		why: "http.MaxBytesReader tells net/http's writer that its limit was hit through an " +
			"unexported method, so net/http closes the connection; ours reads and drops the rest of " +
			"the body (up to 256 KiB, more closes the connection) and serves the next request",
		oursWant: "HTTP/1.1 200 OK\r\nDate: *\r\nContent-Length: 28\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nhttp: request body too large" +
			"HTTP/1.1 200 OK\r\nDate: *\r\nContent-Length: 4\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nnext",
	},
}

const follow = "GET /next HTTP/1.1\r\nHost: x\r\n\r\n"

func write(s string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/next" {
			_, _ = io.WriteString(w, "next")
			return
		}
		_, _ = io.WriteString(w, s)
	}
}

func next(f http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/next" {
			_, _ = io.WriteString(w, "next")
			return
		}
		f(w, r)
	}
}

var responseCases = []responseCase{
	{"small body gets a length", get + follow, write("hello")},
	{"empty handler", get + follow, next(func(w http.ResponseWriter, r *http.Request) {})},
	{"body over 2 KiB is chunked", get + follow, write(strings.Repeat("a", 3000))},
	{"body of exactly 2 KiB", get + follow, write(strings.Repeat("a", 2048))},
	{"body of 2 KiB and one", get + follow, write(strings.Repeat("a", 2049))},
	{"many small writes", get + follow, next(func(w http.ResponseWriter, r *http.Request) {
		for range 500 {
			_, _ = io.WriteString(w, "0123456789")
		}
	})},
	{"flush makes it chunked", get + follow, next(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "one")
		w.(http.Flusher).Flush()
		_, _ = io.WriteString(w, "two")
	})},
	{"response controller flush", get + follow, next(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "one")
		_ = http.NewResponseController(w).Flush()
	})},
	{"declared length", get + follow, next(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "3000")
		_, _ = io.WriteString(w, strings.Repeat("b", 3000))
	})},
	{"declared length, short write", get + follow, next(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "10")
		_, _ = io.WriteString(w, "short")
	})},
	{"declared length, long write", get + follow, next(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "3")
		if _, err := io.WriteString(w, "toolong"); err != http.ErrContentLength {
			panic("want ErrContentLength")
		}
	})},
	{"invalid declared length", get + follow, next(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "abc")
		_, _ = io.WriteString(w, "x")
	})},
	{"head", "HEAD / HTTP/1.1\r\nHost: x\r\n\r\n" + follow, write("hello")},
	{"head, long body", "HEAD / HTTP/1.1\r\nHost: x\r\n\r\n" + follow, write(strings.Repeat("h", 5000))},
	{"head, nothing written", "HEAD / HTTP/1.1\r\nHost: x\r\n\r\n" + follow, next(func(w http.ResponseWriter, r *http.Request) {})},
	{"204 drops body", get + follow, next(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "5")
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusNoContent)
		if _, err := io.WriteString(w, "x"); err != http.ErrBodyNotAllowed {
			panic("want ErrBodyNotAllowed")
		}
	})},
	{"304 drops framing and type", get + follow, next(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Etag", `"x"`)
		w.WriteHeader(http.StatusNotModified)
	})},
	{"103 then 200", get + follow, next(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</a.css>; rel=preload")
		w.Header().Set("Content-Length", "99")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Content-Length")
		_, _ = io.WriteString(w, "body")
	})},
	{"declared trailers", get + follow, next(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Sum, x-other")
		_, _ = io.WriteString(w, "data")
		w.Header().Set("X-Sum", "42")
		w.Header().Set("X-Other", "o")
	})},
	{"prefixed trailers", get + follow, next(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "data")
		w.Header().Set(http.TrailerPrefix+"X-Late", "late")
	})},
	{"sniffed html", get + follow, write("<html><body>hi</body></html>")},
	{"no sniff with content-encoding", get + follow, next(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "gzip")
		_, _ = io.WriteString(w, "<html>")
	})},
	{"handler closes", get + follow, next(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		_, _ = io.WriteString(w, "bye")
	})},
	{"identity transfer encoding", get + follow, next(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Transfer-Encoding", "identity")
		_, _ = io.WriteString(w, "stream")
	})},
	{"chunked set by handler", get + follow, next(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Transfer-Encoding", "chunked")
		_, _ = io.WriteString(w, "stream")
	})},
	{"length and chunked", get + follow, next(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Transfer-Encoding", "chunked")
		w.Header().Set("Content-Length", "6")
		_, _ = io.WriteString(w, "stream")
	})},
	{"http/1.0 small", "GET / HTTP/1.0\r\n\r\n", write("hello")},
	{"http/1.0 long", "GET / HTTP/1.0\r\n\r\n", write(strings.Repeat("l", 5000))},
	{"http/1.0 keep-alive", "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /next HTTP/1.0\r\n\r\n", write("hello")},
	{"http/1.0 keep-alive long", "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /next HTTP/1.0\r\n\r\n", write(strings.Repeat("l", 5000))},
	{"http/1.0 keep-alive declared", "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /next HTTP/1.0\r\n\r\n", next(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "5000")
		w.Header().Set("Connection", "keep-alive")
		_, _ = io.WriteString(w, strings.Repeat("l", 5000))
	})},
	{"header sanitized", get + follow, next(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Injected", "a\r\nSet-Cookie: evil=1")
		w.Header().Set("X-Spaces", "  padded  ")
		w.Header()["Bad Name"] = []string{"v"}
		w.Header()["X-Empty"] = nil
		w.Header().Add("X-Multi", "1")
		w.Header().Add("X-Multi", "2")
	})},
	{"header changed after WriteHeader", get + follow, next(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Before", "1")
		w.WriteHeader(201)
		w.Header().Set("X-After", "2")
		w.Header().Del("X-Before")
		_, _ = io.WriteString(w, "x")
	})},
	{"superfluous WriteHeader", get + follow, next(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(202)
		w.WriteHeader(500)
	})},
	{"unknown status", get + follow, next(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(599) })},
	{"101 without hijack", get + follow, next(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Upgrade", "x")
		w.Header().Set("Connection", "Upgrade")
		w.WriteHeader(http.StatusSwitchingProtocols)
	})},
	{"unread small body is drained", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n0123456789" + follow, write("ok")},
	{"unread large body closes", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 300000\r\n\r\n" + strings.Repeat("z", 300000) + follow, write("ok")},
	{"unread chunked body is drained", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n" + follow, write("ok")},
	{"unread bad chunked body closes", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX\r\n0\r\n\r\n" + follow, write("ok")},
	{"body closed unread", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n0123456789" + follow, next(func(w http.ResponseWriter, r *http.Request) {
		_ = r.Body.Close()
		_, _ = io.WriteString(w, "ok")
	})},
	{"body replaced by handler", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n0123456789" + follow, next(func(w http.ResponseWriter, r *http.Request) {
		r.Body = io.NopCloser(strings.NewReader(""))
		_, _ = io.WriteString(w, "ok")
	})},
	{"full duplex", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n0123456789" + follow, next(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).EnableFullDuplex()
		_, _ = io.WriteString(w, "early")
		_ = http.NewResponseController(w).Flush()
		b, _ := io.ReadAll(r.Body)
		_, _ = w.Write(b)
	})},
	{"max bytes reader", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n0123456789" + follow, next(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 4))
		_, _ = io.WriteString(w, err.Error())
	})},
	{"expect continue unread", "POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 10\r\n\r\n0123456789" + follow, write("no")},
	{"expect continue, 100 by handler", "POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc" + follow, next(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusContinue)
		b, _ := io.ReadAll(r.Body)
		_, _ = w.Write(b)
	})},
	{"panic after writing", get + follow, next(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, strings.Repeat("p", 3000))
		panic(http.ErrAbortHandler)
	})},
	{"connection close request", "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" + follow, write("x")},
	{"write string", get + follow, next(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.(io.StringWriter).WriteString("via WriteString")
	})},
}

// TestResponsesMatchNetHTTP serves each handler with net/http's server and
// ours over in-memory connections and requires the same bytes back (Date
// values masked): status line, header fields and their order, framing
// (Content-Length, chunking, trailers) and whether the connection was
// kept for the request that follows.
func TestResponsesMatchNetHTTP(t *testing.T) {
	for _, tc := range responseCases {
		t.Run(tc.name, func(t *testing.T) {
			std := &stdServer{srv: &http.Server{Handler: tc.handler, ErrorLog: discardLog}, ln: newChanListener(), rec: &recorder{}}
			go func() { _ = std.srv.Serve(std.ln) }()
			defer std.close()
			ours := &ourServer{srv: &Server{Handler: tc.handler, Logger: discardSlog}, rec: &recorder{}}
			a := std.serve([]byte(tc.req), 0)
			o := ours.serve([]byte(tc.req), 0)
			if d, ok := responseDeviations[tc.name]; ok {
				if a.output == o.output || o.output != d.oursWant {
					t.Fatalf("documented deviation (%s) not seen:\nnet/http: %q\nours:     %q", d.why, a.output, o.output)
				}
				return
			}
			if a.output != o.output {
				t.Fatalf("net/http: %q\nours:     %q", a.output, o.output)
			}
			if a.output == "" {
				t.Fatal("no output: the case checks nothing")
			}
		})
	}
}
