// Package http1 is an HTTP/1.x server for an ordinary [http.Handler] that
// does per request only the work a request needs. It serves the same
// handlers as [http.Server], with the same answers to the same bytes, at
// a fraction of net/http's cost per keep-alive request: per connection it
// reuses its read and write buffers, the request's Header map, URL and
// header strings, and the ResponseWriter; it starts no goroutine and sets
// no deadline per request, and a small response leaves in one write. A
// keep-alive request costs two allocations (its context and its
// *http.Request), against fifteen in net/http.
//
// # What it serves
//
// HTTP/1.0 and HTTP/1.1 (and HTTP/1.2 to 1.9, which net/http reads as
// 1.x) on any net.Conn: keep-alive and pipelined requests, answered in
// order; Content-Length and chunked request bodies, request trailers;
// "Expect: 100-continue" (100 sent on the body's first read); responses
// with Content-Length, chunked (with trailers, declared or
// [http.TrailerPrefix]) or delimited by close, HEAD, 1xx informational
// responses through WriteHeader, Flush, Hijack and
// [http.ResponseController] (Flush, Hijack, SetReadDeadline,
// SetWriteDeadline, EnableFullDuplex); the "OPTIONS *" answer; panics in
// handlers (logged, connection closed; [http.ErrAbortHandler] silently).
// A *tls.Conn is handshaken by the server; a connection whose ALPN chose
// another protocol (h2) goes to [Server.TLSNextProto], and [Handoff]
// passes it on to an http.Server. [Server.Shutdown] and [Server.Close]
// behave as http.Server's.
//
// # Serving with bytes
//
// A Server whose [Server.Exchanges] is set offers it each request
// without a body or Expect before building an http.Request: the hook
// reads the parsed head ([Exchange.Head]) or its bytes ([Exchange.RawHead],
// [Exchange.Fields]) and either answers with bytes of its own through the
// connection's buffered writer ([Exchange.Write]), with the request's
// context, write deadlines, [Exchange.Abort] and [Exchange.CloseAfter] at
// hand, at no allocation per request (one with its context); or hands
// the request to a handler ([Exchange.Serve]); or declines it, and the
// request goes to Handler as if the hook were not there. Keep-alive,
// timeouts, the client-gone watch, Shutdown and Close, and panics apply to
// an exchange as to a handler.
//
// # What it accepts and refuses
//
// Every request head and body is read exactly as net/http's server reads
// it, decision for decision, but for two departures RFC 9112 asks for
// (issue 35): a Transfer-Encoding on HTTP/1.0, which net/http ignores, is
// refused with 400 and the connection closed (§6.1), and a request with
// both Content-Length and Transfer-Encoding, framed as chunked, has Close
// set and closes the connection after its response (§6.3). The
// differential tests and the fuzz target of this package feed the same
// bytes to both and require the same requests at the handler and the same
// bytes back, or exactly what a departure says. So, as net/http does,
// it refuses with 400 a malformed request line, method, target or
// version, a header line without colon or with a space or a CTL in its
// name, a CR, NUL or other CTL in a value, an initial header line that
// starts with whitespace, a missing Host on HTTP/1.1, several Host lines
// or an invalid one, differing or malformed Content-Length values (signed,
// hex, lists, overflow), a Trailer header naming a framing field; with
// 501 a Transfer-Encoding other than one "chunked" field on HTTP/1.1;
// with 505 a version other than 1.x; with 431 a head not complete within
// MaxHeaderBytes+4096 bytes; with 417 an Expect other than 100-continue.
// A malformed chunked body (size line, extension overhead, a missing CRLF,
// a trailer section over 4 KiB) fails the handler's Body.Read and closes
// the connection after the response. And, as net/http does, it accepts
// and normalizes (so that a handler or an upstream never sees the raw
// form): obs-fold continuation lines, joined with a space; a bare LF as
// a line end in the head; Content-Length beside chunked (the length is
// dropped, and the connection closes after the response); repeated equal
// Content-Length values (kept once); up to four CR or LF bytes after a
// POST's body. Settings of GODEBUG that relax net/http's parser
// (httplaxcontentlength) do not apply here.
//
// # Differences from net/http
//
//   - Reuse: the Request's Header, URL and Trailer, its Body, and the
//     ResponseWriter belong to the connection and serve its next request
//     once ServeHTTP returns; a handler must not use them after it
//     returns (net/http says so of the ResponseWriter and the Body). The
//     *http.Request itself, its strings and its context are the request's
//     own and may be kept.
//   - A request's context carries [http.LocalAddrContextKey] and the
//     values of the base and connection contexts, but not
//     [http.ServerContextKey]: there is no *http.Server.
//   - When the client goes away: the context is cancelled when the
//     handler returns, when the connection's base context ends, when a
//     read or write on the connection fails, when the Server is closed,
//     and when the client closes, half-closes or resets the connection
//     while the handler runs, from the moment the request body has been
//     read to its end (at once when there is none), as in net/http; and
//     when a read deadline the handler set through
//     http.ResponseController passes, from that same moment, as
//     net/http's background read fails then. On
//     Linux, for connections with a socket (through TLS and connlimit
//     wrappers), the kernel reports it (one epoll registration per
//     connection, no read, no goroutine per request); a client that
//     pipelines a request and then half-closes therefore cancels the
//     request in flight, where net/http may not. Elsewhere, a one-byte
//     background read as net/http's watches, started only once the
//     handler calls Done, Err or AfterFunc on its context.
//   - Timeouts mean what http.Server's mean but may expire up to an
//     eighth of their length (at most 500 ms) late, never early: a
//     deadline still within that margin is not set again, which spares
//     setting deadlines for each request.
//   - The 431 limit is MaxHeaderBytes+4096 bytes of head; net/http's is
//     the same number of bytes read from the connection, which can
//     include bytes after the head.
//   - After a 431, or a request whose unread body was too long to drop,
//     it half-closes and reads until the client closes, for at most
//     500 ms, where net/http sleeps 500 ms.
//   - [http.MaxBytesReader] cannot tell this ResponseWriter that its
//     limit was hit (it looks for an unexported method), so the
//     connection is kept and the rest of the body read and dropped (up to
//     256 KiB; more closes the connection) instead of closed at once.
//   - Not provided: HTTP/2 without TLS (h2c), SetKeepAlivesEnabled,
//     CloseNotifier, the ReaderFrom (sendfile) fast path of the
//     ResponseWriter, and the caller location in the log line of a
//     superfluous WriteHeader. Errors are logged with log/slog
//     ([Server.Logger]).
package http1
