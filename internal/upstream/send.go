package upstream

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/httpfield"
)

// SendOptions are the settings of one [Transport.Send] or
// [Transport.SendHead]. The zero value is RoundTrip's behaviour.
type SendOptions struct {
	// HeadTimeout bounds the wait for the response head, as the d of
	// [Transport.WithHeadTimeout] does. Zero or negative means no bound.
	HeadTimeout time.Duration

	// Got1xx, if not nil, is called with the status code and header of
	// every informational response (1xx other than 101) that comes before
	// the final one; an error it returns fails the exchange. On the fast
	// path it runs on the goroutine that called Send, before Send returns;
	// on the fallback path it runs on the fallback's goroutine and may run
	// after Send returned with an error, so what it shares with the caller
	// must be guarded. Nil means the Got1xxResponse hook of the context's
	// [net/http/httptrace.ClientTrace], if any, as for RoundTrip.
	Got1xx func(code int, header http.Header) error

	// HeaderValid, when true, says that the caller vouches for every
	// field name and value of req.Header, as those of a request a server
	// accepted, with valid fields added: the fast path then does not check
	// them again. False checks them, as RoundTrip does. SendHead ignores
	// it: it never checks the fields of the head it is given.
	HeaderValid bool

	// Fields, if not nil, asks for the header of a final response whose
	// head the fast path reads itself (see readResponse) as a list of
	// fields instead of a map: *Fields is set to them, in the order they
	// came, and resp.Header is nil. The list is the response's header only
	// when resp.Header is nil; any other response has its header in
	// resp.Header, and *Fields may then hold anything. A caller that
	// passes on the response's header as it is (a proxy) is spared a map
	// built and copied for every response.
	Fields *[]httpfield.Field

	// Now, if not zero, is when the caller sends the request, read from
	// the clock just before Send: the head's deadline counts from it,
	// and idle connections are judged by it. Zero means Send reads the
	// clock itself. A caller that times the exchange anyway spares Send
	// its own reading.
	Now time.Time
}

// Send sends req as RoundTrip does, with ctx in place of req.Context() and
// with the options of opts. On the fast path (see [Transport.FastPath])
// it spares the copy of req that giving a request another context takes,
// and req, its URL and its Header are not used once Send has returned;
// the response's Request field is req. On the fallback path req is passed
// on with ctx (a copy, unless ctx is req.Context()), and the fallback may
// hold it until the response body is closed.
func (t *Transport) Send(ctx context.Context, req *http.Request, opts SendOptions) (*http.Response, error) {
	if t.FastPath(req) {
		return t.roundTripFast(ctx, req, opts)
	}
	if got := opts.Got1xx; got != nil {
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
			Got1xxResponse: func(code int, h textproto.MIMEHeader) error { return got(code, http.Header(h)) },
		})
	}
	if ctx != req.Context() {
		req = req.WithContext(ctx)
	}
	return t.roundTripFallback(req, opts.HeadTimeout)
}

// FastPath reports whether RoundTrip and Send serve req on the caller's
// goroutine (see [Transport]): scheme "http", no body, no upgrade, not
// CONNECT, on a system with a non-blocking peek. Every other request goes
// to the Fallback.
func (t *Transport) FastPath(req *http.Request) bool {
	return canProbeSockets && isFastPath(req)
}

// Head is a bodyless HTTP/1.1 request already written out by the caller,
// for [Transport.SendHead].
type Head struct {
	// Addr is the upstream's host:port, as Send takes it from the request
	// URL's host (a missing port means 80). Connections are pooled by it,
	// with Send's.
	Addr string

	// Method is the request's method, as in the request line: it decides
	// whether the response has a body (not after HEAD) and whether the
	// request may be sent again (see SendHead).
	Method string

	// Bytes is the head: request line through the empty line, CRLF line
	// ends. The caller vouches that it is a valid request head (RFC 9112)
	// with a Host field and no body framing (no Content-Length other than
	// 0, no Transfer-Encoding), as the fast path would write it. It is not
	// retained after SendHead returns, and not modified.
	Bytes []byte

	// Close says the head asks the upstream to close the connection after
	// the response (it carries "Connection: close"): the connection is
	// then not reused.
	Close bool
}

// SendHead sends h on the fast path as Send sends a request it takes there:
// the same idle connection checks, the same retry rules (a reused
// connection found closed before the request left, closed before any
// response byte for a replayable request, or answering 408), the same head
// timeout, context abort, and Got1xx, Fields and Now options
// (HeaderValid is ignored: the caller vouches for the head). It returns
// the response as Send does, but resp.Request is nil, and resp.Header is
// nil when opts.Fields took the fields.
//
// The request is replayable, as for Send, when its method is GET, HEAD,
// OPTIONS or TRACE, or when the head has an Idempotency-Key or
// X-Idempotency-Key field; the field names are matched whatever their
// case, as a server that parsed the head would see them.
//
// What is cheap to check is checked before any connection is used, and
// fails with an error wrapping [ErrInvalidRequest]: Addr not empty, Method
// a token and not CONNECT, Bytes lines ending in CRLF whose first is
// Method, a request target and HTTP/1.1, and whose first empty line is the
// last. The fields are not checked. A head that asks for an upgrade gets
// [ErrUnexpectedSwitch] if the upstream switches.
//
// Where [Transport.CanSendHead] is false, SendHead returns an error
// wrapping [errors.ErrUnsupported]; there is no fallback for a head
// already written.
func (t *Transport) SendHead(ctx context.Context, h Head, opts SendOptions) (*http.Response, error) {
	if !canProbeSockets {
		return nil, fmt.Errorf("upstream: SendHead needs a non-blocking peek, which this system lacks: %w", errors.ErrUnsupported)
	}
	head, err := headOf(h)
	if err != nil {
		return nil, err
	}
	return t.send(ctx, hostPort(h.Addr), head, opts)
}

// CanSendHead reports whether SendHead can be used on this system: the fast
// path needs a non-blocking peek (see [Transport.FastPath]). When it
// cannot, SendHead returns an error wrapping [errors.ErrUnsupported].
func (t *Transport) CanSendHead() bool {
	return canProbeSockets
}
