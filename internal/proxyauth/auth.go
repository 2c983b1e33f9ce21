package proxyauth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/bcrypt"
	"golang.org/x/sync/semaphore"
	"golang.org/x/sync/singleflight"

	"github.com/seed-a07d1050/portcullis/clientkey"
	"github.com/seed-a07d1050/portcullis/limit"
)

// Challenge says which side of HTTP authentication an [Authenticator]
// plays.
type Challenge int

const (
	// ChallengeProxy is proxy authentication (RFC 9110 §11.7): credentials
	// in Proxy-Authorization, refusals answered 407 with
	// Proxy-Authenticate. It is the zero value.
	ChallengeProxy Challenge = iota

	// ChallengeOrigin is server authentication (RFC 9110 §11.6), for a
	// reverse-proxy route that keys its limit by user: credentials in
	// Authorization, refusals answered 401 with WWW-Authenticate.
	ChallengeOrigin
)

// Defaults used where a [Config] field is left zero.
const (
	DefaultRealm        = "portcullis"
	DefaultCacheSize    = 10000
	DefaultCheckTimeout = 2 * time.Second
	DefaultLogEvery     = time.Second
	// checkQueue is how many requests of one client may wait while another
	// of its requests is being checked by bcrypt.
	checkQueue = 8
)

// Config configures an [Authenticator]. Only File is required.
type Config struct {
	// File is the htpasswd file (Apache's format, bcrypt hashes only; see
	// [ParseHtpasswd]). It is read by [New] and again by each
	// [Authenticator.Reload]. Required: empty is invalid.
	File string

	// Realm is the realm of the Basic challenge, shown by browsers. Empty
	// means "portcullis". It must be printable ASCII without '"' or '\'.
	Realm string

	// Challenge selects proxy authentication (the zero value: 407 and the
	// Proxy-* headers) or server authentication (401 and Authorization).
	Challenge Challenge

	// CacheSize is how many verified credentials are remembered, by a keyed
	// hash of user and password (never the password), so that a client
	// sending them again skips bcrypt. The cache is emptied when a reload
	// changes the file. Zero means 10000; negative means no cache (every
	// request pays bcrypt).
	CacheSize int

	// MaxConcurrentChecks bounds the bcrypt checks running at once over
	// all clients, so that failed attempts from many addresses cannot take
	// every CPU. Zero means half of GOMAXPROCS, at least 1. It must not be
	// negative.
	MaxConcurrentChecks int

	// CheckTimeout bounds how long a request whose credentials are not
	// cached waits for its turn to be checked (one check at a time per
	// client, MaxConcurrentChecks in all). A request that waits longer is
	// answered 503 with Retry-After: 1. Zero means 2 s. It must not be
	// negative.
	CheckTimeout time.Duration

	// Failures limits failed attempts per client. A client over its budget
	// is answered 429 at once, without any check, whatever credentials it
	// sends, until the budget comes back. Nil means
	// NewFailureLimiter(FailureConfig{}): 10 failures in a row, then one
	// every 6 s.
	Failures FailureLimiter

	// Resolver tells who the client is, for Failures and the per-client
	// check queue. Nil means the peer address with the default Keyer
	// (IPv4 /32, IPv6 /64).
	Resolver *clientkey.Resolver

	// Logger receives failed attempts at INFO (at most one line per
	// LogEvery, with a count of those left out) and reloads. Nil means
	// slog.Default().
	Logger *slog.Logger

	// LogEvery is the shortest time between two lines about failed
	// attempts. Zero means 1 s; negative means every failure is logged.
	LogEvery time.Duration
}

// Errors of [Authenticator.Verify]. Compare with errors.Is.
var (
	// ErrBadCredentials means the user is unknown or the password wrong.
	// The failure was counted against the client.
	ErrBadCredentials = errors.New("proxyauth: wrong user name or password")

	// ErrTooManyFailures means the client used up its failure budget; no
	// check was made. The error is a [*TooManyFailuresError].
	ErrTooManyFailures = errors.New("proxyauth: too many failed attempts")

	// ErrBusy means no bcrypt check could start within CheckTimeout (or
	// the context ended first). Nothing was counted against the client.
	ErrBusy = errors.New("proxyauth: too many checks in progress")
)

// TooManyFailuresError is returned when a client is over its failure
// budget. It matches [ErrTooManyFailures].
type TooManyFailuresError struct {
	RetryAfter time.Duration // until the client may try again
}

func (e *TooManyFailuresError) Error() string {
	return fmt.Sprintf("proxyauth: too many failed attempts, retry in %v", e.RetryAfter.Round(time.Millisecond))
}

// Is makes the error match [ErrTooManyFailures].
func (e *TooManyFailuresError) Is(target error) bool { return target == ErrTooManyFailures }

// An Authenticator checks Basic credentials against an htpasswd file and
// puts the verified user name in the request context. It is safe for
// concurrent use; make it with [New] and stop it with Close.
type Authenticator struct {
	file      string
	realm     string // the whole challenge header value
	challenge Challenge
	cacheSize int
	timeout   time.Duration
	res       *clientkey.Resolver
	log       *slog.Logger
	gate      logGate

	dg        *digester
	set       atomic.Pointer[userSet]
	failures  FailureLimiter
	perClient *limit.Limiter[clientkey.Key]
	checks    *semaphore.Weighted

	stats counters
}

// userSet is one generation of the htpasswd file: its users, the stand-in
// hash unknown users are checked against, and the cache of credentials
// verified against this generation.
type userSet struct {
	users  *Users
	sum    [sha256.Size]byte // of the file's bytes, to see an unchanged file
	dummy  []byte
	cache  *credCache
	flight singleflight.Group // one bcrypt check per credential at a time
}

type counters struct {
	accepted, cacheHits, verified, checks, challenged, noCredentials, failed, overBudget, busy atomic.Uint64
	reloads, reloadErrors                                                                      atomic.Uint64
}

// New returns an Authenticator configured by cfg with the users of
// cfg.File, or an error naming the first invalid field or every problem
// of the file. On error nothing is left running.
func New(cfg Config) (*Authenticator, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	a := &Authenticator{
		file:      cfg.File,
		challenge: cfg.Challenge,
		cacheSize: cfg.CacheSize,
		timeout:   cfg.CheckTimeout,
		res:       cfg.Resolver,
		log:       cfg.Logger,
		failures:  cfg.Failures,
		dg:        newDigester(),
	}
	realm := cfg.Realm
	if realm == "" {
		realm = DefaultRealm
	}
	a.realm = `Basic realm="` + realm + `", charset="UTF-8"`
	if a.cacheSize == 0 {
		a.cacheSize = DefaultCacheSize
	}
	if a.timeout == 0 {
		a.timeout = DefaultCheckTimeout
	}
	if a.log == nil {
		a.log = slog.Default()
	}
	a.gate.every = cfg.LogEvery
	if a.gate.every == 0 {
		a.gate.every = DefaultLogEvery
	}
	if a.failures == nil {
		a.failures, _ = NewFailureLimiter(FailureConfig{}) // the zero config is valid
	}
	n := cfg.MaxConcurrentChecks
	if n == 0 {
		n = max(1, runtime.GOMAXPROCS(0)/2)
	}
	a.checks = semaphore.NewWeighted(int64(n))
	set, err := loadSet(cfg.File, a.cacheSize)
	if err != nil {
		return nil, err
	}
	a.set.Store(set)
	a.perClient, err = limit.New(limit.Config[clientkey.Key]{
		Policy: limit.Policy[clientkey.Key]{
			Permits:      1,
			QueueSize:    checkQueue,
			ReclaimAfter: -1, // a check is bounded by CheckTimeout and bcrypt's cost
		},
		Hash: clientkey.Key.Hash,
		Name: "proxyauth checks",
	})
	if err != nil {
		return nil, fmt.Errorf("proxyauth: per-client check queue: %w", err)
	}
	return a, nil
}

func (c Config) validate() error {
	switch {
	case c.File == "":
		return errors.New("proxyauth: File is required")
	case c.Challenge != ChallengeProxy && c.Challenge != ChallengeOrigin:
		return fmt.Errorf("proxyauth: Challenge must be ChallengeProxy or ChallengeOrigin (got %d)", c.Challenge)
	case c.MaxConcurrentChecks < 0:
		return fmt.Errorf("proxyauth: MaxConcurrentChecks must not be negative (got %d)", c.MaxConcurrentChecks)
	case c.CheckTimeout < 0:
		return fmt.Errorf("proxyauth: CheckTimeout must not be negative (got %v)", c.CheckTimeout)
	}
	for i := 0; i < len(c.Realm); i++ {
		if b := c.Realm[i]; b < 0x20 || b > 0x7e || b == '"' || b == '\\' {
			return fmt.Errorf("proxyauth: Realm must be printable ASCII without '\"' or '\\' (got %q)", c.Realm)
		}
	}
	return nil
}

// loadSet reads file into a new generation.
func loadSet(file string, cacheSize int) (*userSet, error) {
	data, err := readFile(file)
	if err != nil {
		return nil, err
	}
	users, err := ParseHtpasswd(file, data)
	if err != nil {
		return nil, err
	}
	return newUserSet(users, sha256.Sum256(data), cacheSize)
}

func readFile(file string) ([]byte, error) {
	fi, err := os.Stat(file)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrHtpasswd, err)
	}
	if fi.Size() > MaxHtpasswdBytes {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrHtpasswd, file, MaxHtpasswdBytes)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrHtpasswd, err)
	}
	return data, nil
}

func newUserSet(users *Users, sum [sha256.Size]byte, cacheSize int) (*userSet, error) {
	// Unknown users are checked against a hash of a random password at the
	// file's usual cost, so that they take as long as a wrong password.
	var secret [16]byte
	_, _ = rand.Read(secret[:])
	dummy, err := bcrypt.GenerateFromPassword([]byte(fmt.Sprintf("%x", secret)), users.cost)
	if err != nil {
		return nil, fmt.Errorf("proxyauth: stand-in hash: %w", err)
	}
	return &userSet{users: users, sum: sum, dummy: dummy, cache: newCredCache(cacheSize)}, nil
}

// compare runs bcrypt for (user, pass): against the user's hash, or the
// stand-in hash when the user is unknown, so both cost the same.
func (s *userSet) compare(user, pass string) bool {
	hash, known := s.users.hashes[user]
	if !known {
		hash = s.dummy
	}
	err := bcrypt.CompareHashAndPassword(hash, []byte(pass))
	return known && err == nil
}

// Reload reads the htpasswd file again. On success the new users take
// effect for the requests checked from then on, and the credential cache
// starts empty (unless the file is byte for byte unchanged, when the
// current generation and its cache are kept). On failure the users loaded
// before stay in effect, the failure is logged at ERROR, and the error
// says why; it matches [ErrHtpasswd] for a bad or unreadable file.
func (a *Authenticator) Reload() error {
	commit, err := a.PrepareReload()
	if err != nil {
		a.log.Error("htpasswd reload failed; keeping the users loaded before", "file", a.file, "users", a.set.Load().users.Len(), "error", err)
		return err
	}
	commit()
	return nil
}

// PrepareReload is the first half of [Authenticator.Reload], for a caller
// that must reload several things all or nothing: it reads and checks the
// htpasswd file (and computes the stand-in hash) without changing what
// the Authenticator uses, and returns the function that puts what it read
// in effect. The commit function cannot fail; it logs the reload at INFO.
// Not calling it leaves the Authenticator as it was. On error nothing
// changed, the failure is counted in Stats.ReloadErrors (not logged: the
// caller decides), and the error matches [ErrHtpasswd] for a bad or
// unreadable file. Only one prepared reload should be committed at a
// time; a later commit wins.
func (a *Authenticator) PrepareReload() (commit func(), err error) {
	old := a.set.Load()
	data, err := readFile(a.file)
	var users *Users
	if err == nil {
		users, err = ParseHtpasswd(a.file, data)
	}
	if err == nil && sha256.Sum256(data) == old.sum {
		return func() {
			a.stats.reloads.Add(1)
			a.log.Info("htpasswd file unchanged", "file", a.file, "users", old.users.Len())
		}, nil
	}
	var set *userSet
	if err == nil {
		set, err = newUserSet(users, sha256.Sum256(data), a.cacheSize)
	}
	if err != nil {
		a.stats.reloadErrors.Add(1)
		return nil, fmt.Errorf("proxyauth: reload %s (keeping the %d users loaded before): %w", a.file, old.users.Len(), err)
	}
	return func() {
		a.set.Store(set)
		a.stats.reloads.Add(1)
		a.log.Info("htpasswd reloaded", "file", a.file, "users", users.Len())
	}, nil
}

// Verify checks user and pass for the client key, as the middleware does:
//
//   - a client over its failure budget gets a [*TooManyFailuresError] at
//     once, before any check and even for right credentials, so that an
//     attacker over the budget learns nothing;
//   - credentials found in the cache are accepted without bcrypt;
//   - otherwise the request waits (at most CheckTimeout, and never past
//     ctx) for the client's single check slot and one of the
//     MaxConcurrentChecks bcrypt slots, or fails with [ErrBusy]; identical
//     credentials checked at once share one bcrypt run;
//   - an unknown user costs the same bcrypt run as a wrong password; both
//     return [ErrBadCredentials] and count one failure against the client.
//
// It returns nil when the credentials are right.
func (a *Authenticator) Verify(ctx context.Context, client clientkey.Key, user, pass string) error {
	if err := a.allow(client); err != nil {
		return err
	}
	set := a.set.Load()
	d := a.dg.of(user, pass)
	if set.cache.has(d) {
		a.stats.cacheHits.Add(1)
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	p, err := a.perClient.Acquire(ctx, client)
	if err != nil {
		a.stats.busy.Add(1)
		return fmt.Errorf("%w: waiting for this client's check slot: %w", ErrBusy, err)
	}
	defer p.Release()
	// Failures may have been recorded while this request waited.
	if err := a.allow(client); err != nil {
		return err
	}
	ok, err := a.check(ctx, set, d, user, pass)
	if err != nil {
		a.stats.busy.Add(1)
		return fmt.Errorf("%w: waiting for a bcrypt slot: %w", ErrBusy, err)
	}
	if !ok {
		a.failures.Fail(client)
		a.stats.failed.Add(1)
		return ErrBadCredentials
	}
	a.stats.verified.Add(1)
	return nil
}

func (a *Authenticator) allow(client clientkey.Key) error {
	if ok, wait := a.failures.Allow(client); !ok {
		a.stats.overBudget.Add(1)
		return &TooManyFailuresError{RetryAfter: wait}
	}
	return nil
}

// check runs one bcrypt comparison under the global bound, shared by every
// request checking the same credentials at the same time.
func (a *Authenticator) check(ctx context.Context, set *userSet, d digest, user, pass string) (bool, error) {
	if testHookCheck != nil {
		testHookCheck()
	}
	v, err, _ := set.flight.Do(string(d[:]), func() (any, error) {
		if set.cache.has(d) {
			return true, nil
		}
		if err := a.checks.Acquire(ctx, 1); err != nil {
			return false, err
		}
		defer a.checks.Release(1)
		a.stats.checks.Add(1)
		if testHookBcrypt != nil {
			testHookBcrypt()
		}
		ok := set.compare(user, pass)
		if ok {
			set.cache.add(d)
		}
		return ok, nil
	})
	if err != nil {
		return false, err
	}
	return v.(bool), nil
}

// Test hooks, nil outside tests, set before and reset after a test's
// requests: testHookCheck runs when a request is about to check its
// credentials, testHookBcrypt when the shared run is about to call bcrypt.
var testHookCheck, testHookBcrypt func()

// Stats are an Authenticator's counts since New.
type Stats struct {
	Users         int    // users in the file loaded now
	Cached        int    // credentials in the cache now
	Accepted      uint64 // requests let through
	CacheHits     uint64 // credentials accepted without bcrypt
	Verified      uint64 // credentials accepted after a bcrypt check (their own, or one they shared)
	Checks        uint64 // bcrypt comparisons run
	Challenged    uint64 // requests answered 407 (or 401): no, malformed or wrong credentials
	NoCredentials uint64 // of those, requests without credentials (how every client starts)
	Failed        uint64 // wrong user or password (counted against the client)
	OverBudget    uint64 // requests refused with 429: the client used up its failure budget
	Busy          uint64 // requests refused with 503: no check slot within CheckTimeout
	Reloads       uint64 // successful reloads
	ReloadErrors  uint64 // failed reloads (the previous users were kept)
}

// Stats returns the Authenticator's counts.
func (a *Authenticator) Stats() Stats {
	set := a.set.Load()
	c := &a.stats
	return Stats{
		Users:         set.users.Len(),
		Cached:        set.cache.len(),
		Accepted:      c.accepted.Load(),
		CacheHits:     c.cacheHits.Load(),
		Verified:      c.verified.Load(),
		Checks:        c.checks.Load(),
		Challenged:    c.challenged.Load(),
		NoCredentials: c.noCredentials.Load(),
		Failed:        c.failed.Load(),
		OverBudget:    c.overBudget.Load(),
		Busy:          c.busy.Load(),
		Reloads:       c.reloads.Load(),
		ReloadErrors:  c.reloadErrors.Load(),
	}
}

// Idle returns a channel that is closed once no request is being checked
// or waiting to be, which may be at once: wait on it, then Close, to
// retire an Authenticator without answering 503 to the requests it is
// checking. Requests that arrive later are checked as usual.
func (a *Authenticator) Idle() <-chan struct{} {
	return a.perClient.Idle()
}

// Close stops the per-client check queue; requests waiting in it are
// answered 503. Close is idempotent and returns nil.
func (a *Authenticator) Close() error {
	return a.perClient.Close()
}

// logGate lets at most one line through per period and counts the others.
type logGate struct {
	every   time.Duration // ≤ 0: every line
	next    atomic.Int64  // Unix nanoseconds before which lines are held
	skipped atomic.Int64
}

// allow reports whether a line may be written now and, if so, how many
// were held since the last one.
func (g *logGate) allow() (bool, int64) {
	if g.every <= 0 {
		return true, 0
	}
	now := time.Now().UnixNano()
	next := g.next.Load()
	if now < next || !g.next.CompareAndSwap(next, now+int64(g.every)) {
		g.skipped.Add(1)
		return false, 0
	}
	return true, g.skipped.Swap(0)
}

// describe is a user name fit for a log line: bounded and quoted by slog.
func describe(user string) string {
	const max = 64
	if len(user) > max {
		return strings.ToValidUTF8(user[:max], "?") + "…"
	}
	return user
}
