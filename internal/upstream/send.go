package upstream

import (
	"context"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/httpfield"
)

// SendOptions are the settings of one [Transport.Send]. The zero value is
// RoundTrip's behaviour.
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
	// them again. False checks them, as RoundTrip does.
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
