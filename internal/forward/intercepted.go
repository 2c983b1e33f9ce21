package forward

import (
	"context"
)

// interceptedKey is the context key of the target of a request served
// inside an intercepted TLS session.
type interceptedKey struct{}

// WithInterceptedTarget returns ctx marking its request as one served
// inside an intercepted CONNECT's TLS session to t (internal/intercept):
// [ByTargetHost] then keys the request by t, the target its TLS session
// was made for, so that a target_host limit counts the requests inside a
// session one by one under the same key as the CONNECT. Only the code that
// took the session over may call it; nothing a client sends sets it.
//
// The mark does not make such a request acceptable to a [Proxy]: [TargetOf]
// still refuses an https:// request, which the interceptor's own upstream
// handler forwards over TLS.
func WithInterceptedTarget(ctx context.Context, t Target) context.Context {
	return context.WithValue(ctx, interceptedKey{}, t)
}

// InterceptedTarget returns the target [WithInterceptedTarget] put in ctx,
// and whether there is one.
func InterceptedTarget(ctx context.Context) (Target, bool) {
	t, ok := ctx.Value(interceptedKey{}).(Target)
	return t, ok && t.IsValid()
}

// ClassifyFailure maps the error of a failed connection to, or exchange
// with, a target to the status a proxy answers (502 Bad Gateway, or 504
// Gateway Timeout for a timeout) and a short reason fit for the client:
// it names what went wrong ("cannot resolve the host: no such host",
// "connection refused") without the proxy's internal details. A refusal of
// the destination policy (an error matching [ErrDenied]) is not a failure
// of the target; callers answer it 403 with the [*DeniedError]'s rule.
func ClassifyFailure(err error) (status int, reason string) {
	return classify(err)
}
