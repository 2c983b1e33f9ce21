package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/seed-a07d1050/portcullis/limit"
)

// PushbackTrailer is the trailer through which the interceptors tell a
// grpc-go client with a retry policy how long to wait before it retries
// (gRFC A6), in milliseconds.
const PushbackTrailer = "grpc-retry-pushback-ms"

// refusal is why a call was refused, for which the status is built once.
type refusal uint8

const (
	refusedLimit refusal = iota
	refusedQueueFull
	refusedQueueTimeout
	refusedClosed
	refusedStore
	numRefusals
)

var refusalStatus = [numRefusals]struct {
	code codes.Code
	msg  string
}{
	refusedLimit:        {codes.ResourceExhausted, "grpclimit: too many concurrent calls"},
	refusedQueueFull:    {codes.ResourceExhausted, "grpclimit: too many concurrent calls, wait queue full"},
	refusedQueueTimeout: {codes.ResourceExhausted, "grpclimit: too many concurrent calls, wait limit reached"},
	refusedClosed:       {codes.Unavailable, "grpclimit: limiter closed"},
	refusedStore:        {codes.Unavailable, "grpclimit: shared limit store failed"},
}

// buildStatuses makes the refusal statuses, with their RetryInfo detail.
func (l *Limiter) buildStatuses() error {
	for r, st := range refusalStatus {
		s := status.New(st.code, st.msg)
		if l.s.retryAfter >= 0 {
			var err error
			s, err = s.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(l.s.retryAfter)})
			if err != nil {
				return fmt.Errorf("grpclimit: retry hint: %w", err)
			}
		}
		l.statuses[r] = s
	}
	return nil
}

// refusalOf classifies a limiter error; ok is false for a context error.
func refusalOf(err error) (r refusal, ok bool) {
	switch {
	case errors.Is(err, limit.ErrQueueFull):
		return refusedQueueFull, true
	case errors.Is(err, limit.ErrQueueTimeout):
		return refusedQueueTimeout, true
	case errors.Is(err, limit.ErrLimited):
		return refusedLimit, true
	case errors.Is(err, limit.ErrClosed):
		return refusedClosed, true
	case errors.Is(err, limit.ErrStore):
		return refusedStore, true
	}
	return 0, false
}

// statusErr returns whether the refusal for err carries a retry hint, and
// its status error.
func (l *Limiter) statusErr(err error) (bool, error) {
	r, ok := refusalOf(err)
	if !ok {
		return false, status.FromContextError(err).Err()
	}
	return l.s.retryAfter >= 0, l.statuses[r].Err()
}

// pushback is the trailer carrying the retry hint to grpc-go's retry
// policy.
func (l *Limiter) pushback() metadata.MD {
	return metadata.MD{PushbackTrailer: {strconv.FormatInt(l.s.retryAfter.Milliseconds(), 10)}}
}

// refused reports a refusal (OnReject, log) and returns what statusErr
// returns.
func (l *Limiter) refused(ctx context.Context, method, key string, err error) (bool, error) {
	if l.s.OnReject != nil {
		l.s.OnReject(ctx, method, key, err)
	}
	l.log.refused(ctx, method, key, err)
	return l.statusErr(err)
}

func (l *Limiter) shadowRefused(ctx context.Context, method, key string) {
	if l.s.OnReject != nil {
		l.s.OnReject(ctx, method, key, ErrShadowRefused)
	}
	l.log.refused(ctx, method, key, ErrShadowRefused)
}

// refusalLog writes refusal lines, at most one per period, so that a flood
// of refusals cannot flood the log; the next line written says how many
// were left out.
type refusalLog struct {
	logger  *slog.Logger
	name    string
	every   int64        // nanoseconds; 0: every refusal
	next    atomic.Int64 // Unix nanoseconds before which lines are left out
	skipped atomic.Int64
}

func (g *refusalLog) init(s *settings) {
	g.logger, g.name, g.every = s.Logger, s.Name, int64(s.logEvery)
}

func (g *refusalLog) refused(ctx context.Context, method, key string, err error) {
	if !g.logger.Enabled(ctx, slog.LevelInfo) {
		return
	}
	if g.every > 0 {
		now := time.Now().UnixNano()
		next := g.next.Load()
		if now < next || !g.next.CompareAndSwap(next, now+g.every) {
			g.skipped.Add(1)
			return
		}
	}
	msg := "call refused"
	if errors.Is(err, ErrShadowRefused) {
		msg = "call over the limit let through (shadow mode)"
	}
	g.logger.LogAttrs(ctx, slog.LevelInfo, msg,
		slog.String("limiter", g.name),
		slog.String("key", key),
		slog.String("method", method),
		slog.String("reason", refusalReason(err)),
		slog.Int64("suppressed", g.skipped.Swap(0)))
}

// refusalReason names why a call was refused as the limiter's metrics do
// (limit.EventKind names), and "closed" for a closed limiter, as httplimit
// does.
func refusalReason(err error) string {
	if errors.Is(err, ErrShadowRefused) {
		return limit.ShadowRefused.String()
	}
	if k := limit.RefusalKind(err); k != 0 {
		return k.String()
	}
	return "closed"
}
