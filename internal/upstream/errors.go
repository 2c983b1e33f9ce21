package upstream

import (
	"context"
	"errors"
)

// ErrInvalidRequest is wrapped by the error of a fast-path request that
// cannot be written as valid HTTP/1.1: a bad method, request target, Host or
// header field name or value; or of a [Head] that fails the checks of
// [Transport.SendHead]. Nothing was sent and no connection was used.
var ErrInvalidRequest = errors.New("upstream: invalid request")

// ErrHeadTooLarge is wrapped by the error of an exchange whose response
// head (informational heads included) exceeded [Config.MaxResponseHeaderBytes].
// The connection was closed.
var ErrHeadTooLarge = errors.New("upstream: response head too large")

// ErrMalformedResponse is wrapped by the error of an exchange whose response
// head has a field name that is not a token, such as "Content-Length : 5"
// (whitespace before the colon), which net/http's reader keeps as a field of
// another name: the body would then be framed as the upstream did not mean
// it. RFC 9112 §5.1 tells a proxy to refuse such a response or strip the
// whitespace; nginx and HAProxy answer 502, and so does the daemon. The
// connection was closed.
var ErrMalformedResponse = errors.New("upstream: malformed response head")

// ErrUnexpectedSwitch is wrapped by the error of an exchange whose upstream
// answered 101 Switching Protocols to a request that asked for no upgrade.
// The connection was closed.
var ErrUnexpectedSwitch = errors.New("upstream: 101 switching protocols to a request without upgrade")

// ErrHeadTimeout is wrapped by the error of an exchange whose response head
// did not arrive within the head timeout of [Transport.WithHeadTimeout].
// errors.Is(ErrHeadTimeout, context.DeadlineExceeded) is true and it is a
// net.Error whose Timeout method reports true, so callers that answer 504
// on either test see it as a timeout.
var ErrHeadTimeout error = headTimeoutError{}

type headTimeoutError struct{}

func (headTimeoutError) Error() string   { return "upstream: no response head in time" }
func (headTimeoutError) Timeout() bool   { return true }
func (headTimeoutError) Temporary() bool { return true }

// Is makes the error match context.DeadlineExceeded, which the daemon maps
// to 504 Gateway Timeout.
func (headTimeoutError) Is(target error) bool { return target == context.DeadlineExceeded }
