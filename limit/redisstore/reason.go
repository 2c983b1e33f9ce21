package redisstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// Reasons a Redis call failed, as [FailureReason] names them: the values
// of the reason label of the daemon's portcullis_cluster_degraded gauge.
const (
	// ReasonTimeout: Redis did not answer within the call's deadline
	// (Timeout): it is slow, overloaded, or the network drops packets.
	ReasonTimeout = "timeout"
	// ReasonAuth: Redis refused the credentials or the user's rights
	// (WRONGPASS, NOAUTH, NOPERM).
	ReasonAuth = "auth"
	// ReasonRefused: no connection: refused, reset, closed by the server,
	// or no route to it.
	ReasonRefused = "refused"
	// ReasonError: any other error, such as a script error or a reply the
	// store did not expect.
	ReasonError = "error"
)

// FailureReason classifies an error of a Redis call as one of
// ReasonTimeout, ReasonAuth, ReasonRefused and ReasonError, and returns ""
// for nil.
func FailureReason(err error) string {
	switch {
	case err == nil:
		return ""
	case isAuthError(err):
		return ReasonAuth
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, syscall.ETIMEDOUT):
		return ReasonTimeout
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return ReasonTimeout
	}
	var op *net.OpError
	if errors.As(err, &op) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, redis.ErrClosed) {
		return ReasonRefused
	}
	return ReasonError
}

// isAuthError reports whether err is Redis refusing the connection's
// credentials or the user's rights.
func isAuthError(err error) bool {
	for _, p := range []string{"WRONGPASS", "NOAUTH", "NOPERM"} {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	s := err.Error()
	return strings.Contains(s, "WRONGPASS") || strings.Contains(s, "NOAUTH") || strings.Contains(s, "NOPERM")
}

// ErrAuth is wrapped by [Probe]'s error when Redis refused the credentials
// or the user may not run what the stores need.
var ErrAuth = errors.New("redisstore: redis refused the credentials or the user's rights")

// Probe checks that c reaches Redis and may run every script the Store
// and the RateStore use: one PING, then SCRIPT LOAD of each script (which
// also spares the first calls a NOSCRIPT round trip), bounded by ctx. A
// refusal of the credentials or of the user's rights wraps [ErrAuth];
// [FailureReason] classifies the others. The daemon probes at start (an
// authentication error stops it) and `portcullis check --connect` reports
// the result.
func Probe(ctx context.Context, c redis.UniversalClient) error {
	if err := c.Ping(ctx).Err(); err != nil {
		return probeError("PING", err)
	}
	for _, s := range []*redis.Script{acquireScript, syncScript, rateScript} {
		if err := s.Load(ctx, c).Err(); err != nil {
			return probeError("SCRIPT LOAD", err)
		}
	}
	return nil
}

func probeError(what string, err error) error {
	if isAuthError(err) {
		return fmt.Errorf("%w: %s: %w", ErrAuth, what, err)
	}
	return fmt.Errorf("redisstore: %s: %w", what, err)
}
