package grpclimit

import (
	"context"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/seed-a07d1050/portcullis/limit"
)

// A grant is what the tap handle hands the interceptor through the
// stream's context: the key it computed and the permit it took, a call
// permit without a queue, a stream permit with one.
type grant struct {
	key    string
	permit limit.Permit[string]
	// stop detaches the release tied to the stream's context; it reports
	// false when that release already ran (the stream ended).
	stop func() bool
}

// giveBack releases the grant's permit now and detaches the release tied
// to the stream's context.
func (g *grant) giveBack() {
	g.stop()
	g.permit.Release()
}

type grantKey struct{ l *Limiter }

// TapHandle returns a [tap.ServerInHandle] for grpc.InTapHandle that
// refuses a new stream of a client over its limit before grpc-go creates
// it, starts its handler or reads its first message. It never blocks (see
// the package documentation for how it meets the queue); it is meant to be
// installed with the Limiter's interceptors, which hold the permit for the
// whole call. A server has one tap handle: for several Limiters use
// [ServerOptions].
func (l *Limiter) TapHandle() tap.ServerInHandle {
	return func(ctx context.Context, info *tap.Info) (context.Context, error) {
		ctx, _, err := l.tapAdmit(ctx, info)
		return ctx, err
	}
}

// tapAdmit admits a new stream without waiting. On success it returns the
// context to give the stream, carrying the grant (nil when the stream is
// not limited); on refusal a status error.
func (l *Limiter) tapAdmit(ctx context.Context, info *tap.Info) (context.Context, *grant, error) {
	if l.s.Shadow || !l.s.applies(info.FullMethodName) {
		return ctx, nil, nil
	}
	key := l.s.Key(Call{ctx: ctx, method: info.FullMethodName, md: info.Header})
	if key == "" {
		return ctx, nil, nil
	}
	lim := l.calls
	if l.streams != nil {
		lim = l.streams
	}
	p, err := lim.TryAcquire(key)
	if err != nil {
		if l.streams != nil && errors.Is(err, limit.ErrLimited) {
			err = limit.ErrQueueFull // its calls run and its queue is full
		}
		_, st := l.refused(ctx, info.FullMethodName, key, err)
		return ctx, nil, st
	}
	// grpc-go cancels a stream's context whenever the stream ends, on
	// every path; a stream that never reaches the interceptor gives its
	// permit back there.
	g := &grant{key: key, permit: p}
	g.stop = context.AfterFunc(ctx, p.Release)
	return context.WithValue(ctx, grantKey{l}, g), g, nil
}

// tapHandle is one tap handle over several Limiters, in order. A refusal
// by one gives back what the Limiters before it took: grpc-go does not end
// the context of a stream it refused.
func tapHandle(ls []*Limiter) tap.ServerInHandle {
	if len(ls) == 1 {
		return ls[0].TapHandle()
	}
	return func(ctx context.Context, info *tap.Info) (context.Context, error) {
		var taken []*grant
		for _, l := range ls {
			var g *grant
			var err error
			ctx, g, err = l.tapAdmit(ctx, info)
			if err != nil {
				for _, g := range taken {
					g.giveBack()
				}
				return ctx, err
			}
			if g != nil {
				taken = append(taken, g)
			}
		}
		return ctx, nil
	}
}

// admission is what a call holds while it runs.
type admission struct {
	call, stream limit.Permit[string]
}

func (a admission) release() {
	a.call.Release()
	a.stream.Release()
}

// admit takes the permit of a call, or adopts the one its tap handle
// took. On refusal it returns a status error, and whether that carries a
// retry hint.
func (l *Limiter) admit(ctx context.Context, method string, streaming bool) (admission, bool, error) {
	var a admission
	if !l.s.applies(method) {
		return a, false, nil
	}
	var key string
	if g, ok := ctx.Value(grantKey{l}).(*grant); ok {
		if !g.stop() {
			// The stream ended before its handler ran, and its permit
			// went back with it.
			return a, false, status.FromContextError(ctx.Err()).Err()
		}
		if l.streams == nil {
			if streaming {
				g.permit.Exempt()
			}
			a.call = g.permit
			return a, false, nil
		}
		a.stream, key = g.permit, g.key
	} else {
		key = l.s.Key(Call{ctx: ctx, method: method})
		if key == "" {
			return a, false, nil
		}
	}
	p, err := l.acquire(ctx, key)
	if err != nil {
		a.stream.Release()
		hint, st := l.refused(ctx, method, key, err)
		return admission{}, hint, st
	}
	if p.Shadowed() {
		l.shadowRefused(ctx, method, key)
	}
	if streaming {
		p.Exempt()
	}
	a.call = p
	return a, false, nil
}

// acquire takes a call permit, waiting when the queue allows.
func (l *Limiter) acquire(ctx context.Context, key string) (limit.Permit[string], error) {
	if l.s.QueueSize == 0 && l.s.Store == nil {
		// Cannot wait, and no Store to ask: skip the context.
		return l.calls.TryAcquire(key)
	}
	return l.calls.Acquire(ctx, key)
}

// UnaryServerInterceptor returns an interceptor that holds a permit of
// the call's key while the handler runs, released exactly once when it
// returns or panics (the panic goes on). A call over the limit waits in
// its key's queue when Config.QueueSize allows, leaving it when its
// context ends; a refused call gets its status error (with the
// grpc-retry-pushback-ms trailer when it carries a retry hint) and the
// handler is not called.
func (l *Limiter) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		a, hint, err := l.admit(ctx, info.FullMethod, false)
		if err != nil {
			if hint {
				_ = grpc.SetTrailer(ctx, l.pushback())
			}
			return nil, err
		}
		defer a.release()
		return handler(ctx, req)
	}
}

// StreamServerInterceptor returns an interceptor that holds a permit of
// the call's key until the streaming handler returns or panics, that is
// until the stream ends, as [Limiter.UnaryServerInterceptor] does for a
// unary call. Streaming calls' permits are exempt from reclaim.
func (l *Limiter) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		a, hint, err := l.admit(ss.Context(), info.FullMethod, true)
		if err != nil {
			if hint {
				ss.SetTrailer(l.pushback())
			}
			return err
		}
		defer a.release()
		return handler(srv, ss)
	}
}

// ServerOptions returns the grpc.ServerOptions that install the Limiters:
// one tap handle over all of them, in order, and their unary and stream
// interceptors, chained in order after any interceptors given in earlier
// options. A call is admitted only if every Limiter that applies to its
// method admits it. grpc-go takes one tap handle per server: do not add
// another grpc.InTapHandle (grpc.NewServer panics). It panics if a Limiter
// is nil; with no Limiter it returns nil.
func ServerOptions(ls ...*Limiter) []grpc.ServerOption {
	if len(ls) == 0 {
		return nil
	}
	unary := make([]grpc.UnaryServerInterceptor, len(ls))
	stream := make([]grpc.StreamServerInterceptor, len(ls))
	for i, l := range ls {
		if l == nil {
			panic("grpclimit: ServerOptions with a nil Limiter")
		}
		unary[i], stream[i] = l.UnaryServerInterceptor(), l.StreamServerInterceptor()
	}
	return []grpc.ServerOption{
		grpc.InTapHandle(tapHandle(append([]*Limiter(nil), ls...))),
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(stream...),
	}
}
