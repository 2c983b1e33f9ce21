package quicadmit

import "errors"

// Sentinel errors. Compare with [errors.Is]: returned errors may wrap them.
var (
	// ErrConfig means a [Config] field is invalid; the message names it.
	ErrConfig = errors.New("quicadmit: invalid config")

	// ErrRefused is what [Controller.ConnContext] returns when
	// MaxInProgress attempts are already in progress; quic-go then answers
	// the attempt with CONNECTION_REFUSED.
	ErrRefused = errors.New("quicadmit: too many connection attempts in progress")

	// ErrPerClient is what [Controller.ConnContext] returns when a client
	// with a proven address is over its per-client cap; it wraps the
	// limiter's error.
	ErrPerClient = errors.New("quicadmit: client over its connection limit")

	// ErrPerClientRate is what [Controller.ConnContext] returns when a
	// client with a proven address has completed handshakes faster than
	// Config.PerClientRate allows; it wraps the rate limiter's error.
	ErrPerClientRate = errors.New("quicadmit: client over its handshake rate")

	// ErrClosed is returned by [Controller.ConnContext] and
	// [Controller.Attach] after [Controller.Close].
	ErrClosed = errors.New("quicadmit: controller closed")

	// ErrAlreadyAttached means [Controller.Attach] was called twice for the
	// same transport.
	ErrAlreadyAttached = errors.New("quicadmit: transport already attached")

	// ErrTokenKeyConflict means the transport already has a token key that
	// differs from Config.TokenKey: either it was set by hand, or the
	// transport was already used (quic-go draws a random key on first use),
	// which also means Attach came too late.
	ErrTokenKeyConflict = errors.New("quicadmit: transport has a different token key")

	// ErrTokenKey means a token key could not be parsed.
	ErrTokenKey = errors.New("quicadmit: invalid token key")
)
