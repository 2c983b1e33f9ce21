package quicadmit

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/seed-a07d1050/portcullis/clientkey"
	"github.com/seed-a07d1050/portcullis/limit"
	"github.com/seed-a07d1050/portcullis/rate"
)

// Defaults used where a [Config] field is left zero.
const (
	DefaultRetryThresholdMin = 256
	DefaultRetryThresholdMax = 4096
	DefaultMaxInProgress     = 16384
	// DefaultHandshakeTimeout is quic-go's own handshake timeout (twice its
	// default HandshakeIdleTimeout of 5 s) plus 5 s for the accept queue.
	DefaultHandshakeTimeout = 15 * time.Second
	// DefaultPerClientCloseCode is HTTP/3's H3_EXCESSIVE_LOAD (RFC 9114
	// §8.1).
	DefaultPerClientCloseCode quic.ApplicationErrorCode = 0x107
)

// Zero, given as one of the counts of a [Config], means a literal zero.
// It exists because a zero field selects the default.
const Zero = -1

// Config configures a [Controller]. The zero Config is valid and gives the
// defaults: retry threshold 256..4096, 16384 attempts in progress, a 15 s
// backstop, no per-client cap. [New] works on a copy: changing the Config
// afterwards has no effect.
type Config struct {
	// RetryThresholdMin is the retry threshold when the endpoint completes
	// few handshakes: a burst that large is admitted without a Retry even
	// on an idle endpoint. Zero means 256; [Zero] (-1) means a literal
	// zero. Any other negative value is an error. A minimum above
	// RetryThresholdMax pins the threshold at the minimum. A minimum and
	// maximum of zero send every attempt without a valid token a Retry.
	RetryThresholdMin int

	// RetryThresholdMax is the highest the retry threshold rises, however
	// many handshakes the endpoint completes. It bounds the handshake work a
	// spoofed flood can cause right after a busy period raised the
	// threshold. Zero means 4096; [Zero] means a literal zero; other
	// negative values are an error.
	RetryThresholdMax int

	// MaxInProgress is the most attempts in progress at once; beyond it
	// every attempt is refused with CONNECTION_REFUSED. It also caps the
	// retry threshold. Zero means 16384; [Zero] means a literal zero, which
	// refuses every attempt; other negative values are an error.
	MaxInProgress int

	// HandshakeTimeout is the backstop: an attempt still in progress this
	// long after it was admitted ends as timed out, for the paths where
	// quic-go reports neither completion nor failure (see docs/quic.md). It
	// must exceed quic-go's handshake timeout (2 × HandshakeIdleTimeout,
	// 10 s by default) plus the time a completed connection may wait in the
	// accept queue. Zero means 15 s; negative is an error.
	HandshakeTimeout time.Duration

	// TokenKey, if set, is the key that protects Retry and NEW_TOKEN
	// tokens. [Controller.Attach] puts it into every transport it attaches
	// to. Processes that share an address (SO_REUSEPORT, anycast, a load
	// balancer without connection-ID routing) must share this key, or a
	// token issued by one is rejected by another. Nil leaves the
	// transport's key alone (quic-go draws a random one per transport).
	TokenKey *quic.TokenGeneratorKey

	// PerClient, if set, caps the QUIC connections of each client. A
	// connection takes a permit of its client's key (see Keyer) only once
	// its address is proven: at admission if it carries a valid token,
	// otherwise when its handshake completes. The permit is held until the
	// connection closes. Only TryAcquire is used, so the limiter's queue
	// is never used. Nil means no per-client cap.
	PerClient *limit.Limiter[clientkey.Key]

	// PerClientRate, if set, limits how many handshakes per second each
	// client may complete: a connection counts one towards its client's
	// rate once its address is proven, at admission if it carries a valid
	// token (refused then with CONNECTION_REFUSED, before any handshake
	// work), otherwise when its handshake completes (closed then with
	// PerClientCloseCode), exactly as for PerClient; so a spoofer cannot
	// spend a victim's rate. Only [rate.Limiter.Allow] is used, and a
	// handshake is never delayed: the limiter's Delay setting makes no
	// difference (its burst is admitted at once). Nil means no rate.
	PerClientRate *rate.Limiter[clientkey.Key]

	// Keyer turns a client's address into its key for PerClient and
	// PerClientRate. The zero Keyer keys IPv4 by address and IPv6 by /64.
	Keyer clientkey.Keyer

	// PerClientCloseCode is the application error code that closes a
	// connection whose handshake completed but whose client is over its
	// PerClient cap or PerClientRate (a proven client before that gets
	// CONNECTION_REFUSED).
	// Zero means 0x107, HTTP/3's H3_EXCESSIVE_LOAD.
	PerClientCloseCode quic.ApplicationErrorCode

	// Clock tells the time and runs the backstop timers. Nil means the
	// real clock.
	Clock Clock

	// Logger receives refusals and Retry turning on and off, at most once
	// a second each, at LogLevel. Nil means no logs: a library logs only
	// where it is told to.
	Logger *slog.Logger

	// LogLevel is the level of those logs. Zero is [slog.LevelInfo].
	LogLevel slog.Level
}

// A Clock tells the time and runs functions later. Tests inject a fake
// one; the real one uses [time.Now] and [time.AfterFunc].
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has passed.
	AfterFunc(d time.Duration, f func()) Timer
}

// A Timer is the part of [time.Timer] the Controller uses.
type Timer interface {
	// Stop prevents the function from running. It reports whether it
	// stopped it before it ran.
	Stop() bool
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// settings is a Config with its defaults applied and checked.
type settings struct {
	minThreshold, maxThreshold, maxInProgress int64
	handshakeTimeout                          time.Duration
	tokenKey                                  *quic.TokenGeneratorKey
	perClient                                 *limit.Limiter[clientkey.Key]
	perClientRate                             *rate.Limiter[clientkey.Key]
	keyer                                     clientkey.Keyer
	closeCode                                 quic.ApplicationErrorCode
	clock                                     Clock
	logger                                    *slog.Logger
	logLevel                                  slog.Level
}

func (c Config) settings() (settings, error) {
	s := settings{
		perClient:     c.PerClient,
		perClientRate: c.PerClientRate,
		keyer:         c.Keyer,
		closeCode:     c.PerClientCloseCode,
		clock:         c.Clock,
		logger:        c.Logger,
		logLevel:      c.LogLevel,
	}
	var err error
	if s.minThreshold, err = count("RetryThresholdMin", c.RetryThresholdMin, DefaultRetryThresholdMin); err != nil {
		return s, err
	}
	if s.maxThreshold, err = count("RetryThresholdMax", c.RetryThresholdMax, DefaultRetryThresholdMax); err != nil {
		return s, err
	}
	if s.maxInProgress, err = count("MaxInProgress", c.MaxInProgress, DefaultMaxInProgress); err != nil {
		return s, err
	}
	switch {
	case c.HandshakeTimeout < 0:
		return s, fmt.Errorf("%w: HandshakeTimeout must not be negative (got %v)", ErrConfig, c.HandshakeTimeout)
	case c.HandshakeTimeout == 0:
		s.handshakeTimeout = DefaultHandshakeTimeout
	default:
		s.handshakeTimeout = c.HandshakeTimeout
	}
	if c.TokenKey != nil {
		k := *c.TokenKey
		s.tokenKey = &k
	}
	if s.closeCode == 0 {
		s.closeCode = DefaultPerClientCloseCode
	}
	if s.clock == nil {
		s.clock = realClock{}
	}
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	return s, nil
}

// count applies the zero-means-default, Zero-means-zero rule to a count.
func count(name string, v, def int) (int64, error) {
	switch {
	case v == 0:
		return int64(def), nil
	case v == Zero:
		return 0, nil
	case v < 0:
		return 0, fmt.Errorf("%w: %s must be positive, 0 (default %d) or quicadmit.Zero (got %d)", ErrConfig, name, def, v)
	}
	return int64(v), nil
}

// threshold clamps a completion rate into the configured retry threshold.
func (s *settings) threshold(rate int64) int64 {
	t := s.minThreshold
	if s.minThreshold <= s.maxThreshold {
		t = min(max(rate, s.minThreshold), s.maxThreshold)
	}
	return min(t, s.maxInProgress)
}
