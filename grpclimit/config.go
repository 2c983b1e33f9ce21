package grpclimit

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"time"

	"github.com/seed-a07d1050/portcullis/limit"
)

// Defaults used where a [Config] field is left zero.
const (
	DefaultPermits    = limit.DefaultPermits // per key
	DefaultRetryAfter = time.Second
	DefaultLogEvery   = time.Second
)

// Policy is the shape of a limit shared by every layer of Portcullis;
// see [limit.Policy].
type Policy = limit.Policy[string]

// Config configures a [Limiter]: its [Policy], embedded, and what is gRPC's
// own (the key, the methods, the retry hint, hooks). The zero Config is
// valid: 64 calls at once per client address (IPv4 /32, IPv6 /64, no proxy
// trusted), on every method, no queue, refusals answered RESOURCE_EXHAUSTED
// with a retry hint of one second, unary calls' permits reclaimed after 10
// minutes. New copies the Config, its map and slice included; changing it
// afterwards has no effect.
type Config struct {
	// Policy is what each key is allowed: Permits (calls of one key at
	// once through the Limiter), Overrides and PermitsFor, the queue,
	// Shadow and ReclaimAfter, with the meanings [limit.Policy] gives them
	// (zero means the default, limit.Unlimited (-1) no limit, other
	// negative values are invalid). Here Overrides keys are written as the
	// Key function produces them ({"/pkg.Service/Export": 2} with
	// ByMethod, {"batch-key": 32}), an empty one being invalid; PermitsFor
	// may be called from the tap handle; with no queue a call over the
	// limit is refused by the tap handle when it is installed, and a
	// queued call waits until a permit comes or its context ends
	// (deadline, cancel, disconnect); shadow refusals are reported to
	// OnReject with ErrShadowRefused and counted in Totals.ShadowRefused;
	// only unary calls are reclaimed, since streaming calls may
	// legitimately last for hours.
	Policy

	// Key names what a call is counted under: each distinct key has its
	// own permits. It is called once per call, from the tap handle when it
	// is installed (on the transport's reader goroutine: it must not
	// block) or else from the interceptor. An empty key means the call is
	// not limited. Nil means ByPeer(nil): the peer address.
	Key KeyFunc

	// Methods scopes the Limiter to some methods: an entry is a full
	// method name ("/pkg.Service/Method") or a whole service, written with
	// its trailing slash ("/pkg.Service/"). Calls of other methods pass
	// untouched and uncounted. Nil or empty means every method. An entry of
	// another form makes New fail.
	Methods []string

	// RetryAfter is the retry hint of a RESOURCE_EXHAUSTED or UNAVAILABLE
	// refusal: a google.rpc.RetryInfo detail and, from the interceptors, a
	// grpc-retry-pushback-ms trailer. Zero means 1s; negative means no
	// hint.
	RetryAfter time.Duration

	// Store shares the counts with other processes (limit/redisstore). The
	// tap handle asks it without blocking (its cached view); the
	// interceptor waits for its answer, bounded by the call's context. Nil
	// means this process's counts only.
	Store limit.Store[string]

	// Observer is told of every decision, for example to feed a
	// promlimit.WaitHistogram. A stream the tap handle refuses because the
	// key's calls and queue are full is reported as limit.QueueFull. Nil
	// means none.
	Observer limit.Observer[string]

	// Clock tells the time, for queue waits and reclaim. Nil means the
	// real clock.
	Clock limit.Clock

	// OnReject, if set, is called for every refused call, and in shadow
	// mode for every call let through over the limit (with
	// ErrShadowRefused), with the reason: an error matching
	// limit.ErrLimited, limit.ErrQueueFull, limit.ErrQueueTimeout,
	// limit.ErrClosed or limit.ErrStore, or the call context's error. It
	// may be called from the tap handle: it must be fast and must not
	// block. Nil means no callback.
	OnReject func(ctx context.Context, method, key string, err error)

	// Logger receives one INFO line per refusal (and shadow refusal), at
	// most one per LogEvery with a count of the lines left out, and the
	// WARN of a reclaimed permit. Nil means no logs: a library logs only
	// where it is told to.
	Logger *slog.Logger

	// LogEvery is the shortest time between two refusal lines. Zero means
	// 1s; negative means every refusal is logged.
	LogEvery time.Duration

	// Name identifies the Limiter in logs. Empty means "grpclimit".
	Name string
}

// settings is a Config with its defaults applied and checked.
type settings struct {
	Config
	methods    map[string]bool // full methods and "/service/" prefixes; nil: all
	retryAfter time.Duration   // negative: no hint
	logEvery   time.Duration   // 0: every refusal
}

func (c Config) settings() (settings, error) {
	s := settings{Config: c}
	if err := c.validate(); err != nil {
		return s, err
	}
	// The call limiter copies the Policy's map; the stream limiter's
	// permits read this copy.
	s.Overrides = maps.Clone(c.Overrides)
	s.Methods = append([]string(nil), c.Methods...)
	if len(c.Methods) > 0 {
		s.methods = make(map[string]bool, len(c.Methods))
		for _, m := range c.Methods {
			s.methods[m] = true
		}
	}
	if s.Key == nil {
		s.Key = ByPeer(nil)
	}
	s.retryAfter = c.RetryAfter
	if c.RetryAfter == 0 {
		s.retryAfter = DefaultRetryAfter
	}
	switch {
	case c.LogEvery == 0:
		s.logEvery = DefaultLogEvery
	case c.LogEvery > 0:
		s.logEvery = c.LogEvery
	}
	if s.Logger == nil {
		s.Logger = slog.New(slog.DiscardHandler)
	}
	if s.Name == "" {
		s.Name = "grpclimit"
	}
	return s, nil
}

func (c Config) validate() error {
	if err := c.Policy.Validate(); err != nil {
		return fmt.Errorf("grpclimit: %w", err)
	}
	if _, ok := c.Overrides[""]; ok {
		return fmt.Errorf("grpclimit: Overrides has an empty key, which is never limited")
	}
	for i, m := range c.Methods {
		if err := checkMethod(m); err != nil {
			return fmt.Errorf("grpclimit: Methods[%d] %q: %w", i, m, err)
		}
	}
	return nil
}

// checkMethod accepts "/service/method" and "/service/", with no other
// slash and no space.
func checkMethod(m string) error {
	rest, ok := strings.CutPrefix(m, "/")
	if !ok {
		return fmt.Errorf("must start with '/' (\"/pkg.Service/Method\" or \"/pkg.Service/\")")
	}
	service, method, ok := strings.Cut(rest, "/")
	switch {
	case !ok || service == "":
		return fmt.Errorf("want \"/pkg.Service/Method\" or \"/pkg.Service/\"")
	case strings.Contains(method, "/"):
		return fmt.Errorf("more than two slashes")
	case strings.ContainsAny(m, " \t\r\n"):
		return fmt.Errorf("contains white space")
	}
	return nil
}

// applies reports whether the Limiter counts calls of the full method m.
func (s *settings) applies(m string) bool {
	if s.methods == nil {
		return true
	}
	if s.methods[m] {
		return true
	}
	if i := strings.LastIndexByte(m, '/'); i > 0 {
		return s.methods[m[:i+1]]
	}
	return false
}

// callPermits returns a key's permits as the call limiter reads its
// Policy: Overrides first, then PermitsFor; nil when neither is set.
func (s *settings) callPermits() func(string) int {
	overrides, permitsFor := s.Overrides, s.PermitsFor
	switch {
	case len(overrides) == 0:
		return permitsFor
	case permitsFor == nil:
		return func(key string) int { return overrides[key] }
	}
	return func(key string) int {
		if n, ok := overrides[key]; ok {
			return n
		}
		return permitsFor(key)
	}
}

// streamPermits returns the per-key permits of the stream limiter used
// with a queue: a key's call permits plus the queue, unlimited stays
// unlimited.
func (s *settings) streamPermits() (int, func(string) int) {
	base := s.Permits
	if base == 0 {
		base = DefaultPermits
	}
	widen := func(n int) int {
		if n < 0 {
			return -1
		}
		return n + s.QueueSize
	}
	calls := s.callPermits()
	if calls == nil {
		return widen(base), nil
	}
	return widen(base), func(key string) int {
		n := calls(key)
		if n == 0 {
			n = base
		}
		return widen(n)
	}
}
