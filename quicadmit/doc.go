// Package quicadmit admits QUIC connection attempts to a quic-go server
// while it is under load.
//
// A server pays for every handshake it starts, and an attacker can send
// Initial packets from spoofed addresses for free. A [Controller] keeps
// that cost bounded:
//
//   - While few attempts are in progress, every attempt is admitted at once.
//   - Past the retry threshold, an attempt from an address that has not
//     proven it receives what is sent there (it carries no valid Retry or
//     NEW_TOKEN token) is answered with a stateless Retry (RFC 9000
//     §8.1.2). A spoofed flood then costs no handshake work, while a real
//     client returns the token one round trip later and is admitted.
//   - At MaxInProgress every attempt is refused with CONNECTION_REFUSED, so
//     clients fall back (for HTTP/3: to TCP) at once instead of waiting.
//
// An attempt is in progress from the moment it is admitted until its
// handshake completes, fails, times out or is abandoned; each attempt
// leaves the count exactly once, whichever of those happens first.
//
// The retry threshold follows what the endpoint actually completes: the
// handshakes completed in about the last second, smoothed so that it
// rises at once and falls by an eighth of the gap per second, clamped to
// [Config.RetryThresholdMin, Config.RetryThresholdMax] and capped by
// [Config.MaxInProgress]. Once crossed, Retry stays on until the attempts
// in progress fall below three quarters of the threshold, so that the
// endpoint does not flap at the boundary.
//
// Optionally a [limit.Limiter] keyed by [clientkey.Key] caps the QUIC
// connections of each client, counted only for addresses that are proven
// (a valid token, or a completed handshake), so that a spoofer can never
// spend a victim's budget.
//
// # Wiring
//
// quic-go reads the hooks of a [quic.Transport] when Listen or ListenEarly
// is called, so [Controller.Attach] must come first. quic-go tells nobody
// when a handshake completes except the [quic.Conn] itself, which the
// application first sees in Accept: wrap the listener with
// [Controller.WrapListener] (or use [Controller.Listen] or
// [Controller.ListenEarly], which do both) and accept through the wrapper.
// docs/quic.md in the repository explains the model, the defaults and what
// quic-go's public API cannot do.
package quicadmit
