package quicadmit

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
)

// hookDriver drives a Controller through its hooks directly, as quic-go
// would, with a fake clock, so that counts and times are exact.
type hookDriver struct {
	t     *testing.T
	c     *Controller
	clock *fakeClock
	live  []*attempt
}

func newHookDriver(t *testing.T, cfg Config) *hookDriver {
	t.Helper()
	clock := newFakeClock()
	cfg.Clock = clock
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &hookDriver{t: t, c: c, clock: clock}
}

var testAddr = &net.UDPAddr{IP: net.IPv4(127, 0, 0, 9), Port: 4433}

// arrive plays one attempt without a valid token: it reports whether it
// was sent a Retry, and admits it otherwise.
func (d *hookDriver) arrive() (retried bool) {
	d.t.Helper()
	if d.c.VerifySourceAddress(testAddr) {
		return true
	}
	d.admit(false)
	return false
}

// admit plays ConnContext for one attempt and fails the test if refused.
func (d *hookDriver) admit(verified bool) *attempt {
	d.t.Helper()
	ctx, err := d.c.ConnContext(context.Background(), &quic.ClientInfo{RemoteAddr: testAddr, AddrVerified: verified})
	if err != nil {
		d.t.Fatalf("attempt refused: %v", err)
	}
	a := attemptOf(ctx)
	d.live = append(d.live, a)
	return a
}

// finish ends the oldest live attempt as quic-go would on failure.
func (d *hookDriver) finish() {
	a := d.live[0]
	d.live = d.live[1:]
	a.onConnDone(errors.New("handshake failed"))
}

// completeN admits n attempts and completes them.
func (d *hookDriver) completeN(n int) {
	for range n {
		a := d.admit(true)
		d.live = d.live[:len(d.live)-1]
		if !a.complete(nil) {
			d.t.Fatal("complete refused")
		}
	}
}

func (d *hookDriver) threshold() int64 {
	return d.c.currentThreshold(d.clock.Now().UnixNano())
}

func TestThresholdDynamics(t *testing.T) {
	type step struct {
		complete int           // handshakes completed now
		advance  time.Duration // then the clock moves
		want     int64         // threshold after that
	}
	cases := []struct {
		name  string
		cfg   Config
		steps []step
	}{
		{"idle sits at the minimum", Config{RetryThresholdMin: 10, RetryThresholdMax: 100}, []step{
			{0, 0, 10}, {0, time.Hour, 10},
		}},
		{"defaults", Config{}, []step{{0, 0, 256}, {5000, 0, 4096}}},
		{"rises within the second under a burst", Config{RetryThresholdMin: 10, RetryThresholdMax: 100}, []step{
			{9, 0, 10}, {41, 0, 50}, {0, 500 * time.Millisecond, 50},
		}},
		{"falls by an eighth of the gap per second", Config{RetryThresholdMin: 10, RetryThresholdMax: 100}, []step{
			{50, time.Second, 50}, // the window closed at 50
			{0, time.Second, 43},  // 50 - ceil(50/8)
			{0, time.Second, 37},  // 43 - ceil(43/8)
			{0, time.Second, 32},
			{0, time.Second, 28},
			{0, 2 * time.Second, 21}, // two idle windows at once: 28-4=24, 24-3=21
		}},
		{"falls towards the measured rate, not to zero", Config{RetryThresholdMin: 10, RetryThresholdMax: 100}, []step{
			{80, time.Second, 80},
			{40, time.Second, 75}, // 80 - ceil(40/8)
		}},
		{"a higher rate replaces it at once", Config{RetryThresholdMin: 10, RetryThresholdMax: 100}, []step{
			{30, time.Second, 30}, {0, time.Second, 26}, {60, 0, 60}, {0, time.Second, 60},
		}},
		{"clamped at the maximum", Config{RetryThresholdMin: 10, RetryThresholdMax: 100}, []step{
			{500, 0, 100}, {0, time.Second, 100}, {0, time.Second, 100},
		}},
		{"back to the minimum after a long idle", Config{RetryThresholdMin: 10, RetryThresholdMax: 100}, []step{
			{500, time.Second, 100}, {0, 10 * time.Minute, 10},
		}},
		{"zero minimum and maximum", Config{RetryThresholdMin: Zero, RetryThresholdMax: Zero}, []step{
			{0, 0, 0}, {100, time.Second, 0},
		}},
		{"minimum above maximum pins the minimum", Config{RetryThresholdMin: 20, RetryThresholdMax: 5}, []step{
			{0, 0, 20}, {500, 0, 20}, {0, time.Second, 20},
		}},
		{"capped by MaxInProgress", Config{RetryThresholdMin: 50, RetryThresholdMax: 100, MaxInProgress: 30}, []step{
			{0, 0, 30}, {90, 0, 30},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := newHookDriver(t, tc.cfg)
			for i, s := range tc.steps {
				d.completeN(s.complete)
				d.clock.Advance(s.advance)
				if got := d.threshold(); got != s.want {
					t.Fatalf("step %d (%d completed, then +%v): threshold %d, want %d", i, s.complete, s.advance, got, s.want)
				}
			}
			if n := d.c.Snapshot().InProgress; n != 0 {
				t.Fatalf("%d in progress after completions", n)
			}
		})
	}
}

func TestZeroThresholdRetriesEveryUnvalidatedAttempt(t *testing.T) {
	d := newHookDriver(t, Config{RetryThresholdMin: Zero, RetryThresholdMax: Zero})
	for i := range 5 {
		if !d.arrive() {
			t.Fatalf("attempt %d admitted without a Retry", i)
		}
	}
	d.admit(true) // a token-bearing attempt is admitted
	if s := d.c.Snapshot(); s.Retried != 5 || s.Admitted != 1 || !s.RetryOn {
		t.Fatalf("snapshot %+v", s)
	}
}

func TestHysteresis(t *testing.T) {
	d := newHookDriver(t, Config{RetryThresholdMin: 8, RetryThresholdMax: 8, MaxInProgress: 100})
	expect := func(what string, wantRetry bool, wantInProgress int64) {
		t.Helper()
		if got := d.arrive(); got != wantRetry {
			t.Fatalf("%s: Retry %v, want %v", what, got, wantRetry)
		}
		if n := d.c.Snapshot().InProgress; n != wantInProgress {
			t.Fatalf("%s: %d in progress, want %d", what, n, wantInProgress)
		}
	}
	for i := range 8 {
		expect("below the threshold", false, int64(i+1))
	}
	if !d.c.Snapshot().RetryOn {
		t.Fatal("Retry off with 8 in progress at threshold 8")
	}
	expect("at the threshold", true, 8)
	d.admit(true) // a validated attempt still gets in: 9
	d.finish()    // 8
	d.finish()    // 7
	d.finish()    // 6 = 3/4 of 8: not below
	expect("at three quarters", true, 6)
	if !d.c.Snapshot().RetryOn {
		t.Fatal("Retry off at exactly three quarters")
	}
	d.finish() // 5: below three quarters
	if d.c.Snapshot().RetryOn {
		t.Fatal("Retry still on below three quarters")
	}
	expect("off again", false, 6)
	expect("off again", false, 7)
	expect("off again", false, 8)
	expect("on again at the threshold", true, 8)
}

func TestHysteresisUnevenThreshold(t *testing.T) {
	// 3/4 of 10 is 7.5: on at 8, off once fewer than 7.5 (7) are in progress.
	d := newHookDriver(t, Config{RetryThresholdMin: 10, RetryThresholdMax: 10})
	for range 10 {
		d.arrive()
	}
	d.finish()
	d.finish() // 8
	if !d.c.Snapshot().RetryOn {
		t.Fatal("Retry off at 8 of 10")
	}
	d.finish() // 7
	if d.c.Snapshot().RetryOn {
		t.Fatal("Retry on at 7 of 10")
	}
}

func TestMaxInProgressRefuses(t *testing.T) {
	d := newHookDriver(t, Config{RetryThresholdMin: 2, RetryThresholdMax: 2, MaxInProgress: 3})
	d.admit(false)
	d.admit(false)
	d.admit(true)
	if d.c.VerifySourceAddress(testAddr) {
		t.Fatal("Retry at the maximum; want a refusal by ConnContext")
	}
	for _, verified := range []bool{false, true} {
		_, err := d.c.ConnContext(context.Background(), &quic.ClientInfo{RemoteAddr: testAddr, AddrVerified: verified})
		if !errors.Is(err, ErrRefused) {
			t.Fatalf("verified=%v: err %v, want ErrRefused", verified, err)
		}
	}
	if s := d.c.Snapshot(); s.Refused != 2 || s.InProgress != 3 || s.Admitted != 3 {
		t.Fatalf("snapshot %+v", s)
	}
	d.finish()
	d.admit(true)
}

func TestMaxInProgressZeroRefusesAll(t *testing.T) {
	d := newHookDriver(t, Config{MaxInProgress: Zero})
	if d.c.VerifySourceAddress(testAddr) {
		t.Fatal("Retry with MaxInProgress zero")
	}
	if _, err := d.c.ConnContext(context.Background(), &quic.ClientInfo{RemoteAddr: testAddr}); !errors.Is(err, ErrRefused) {
		t.Fatalf("err %v, want ErrRefused", err)
	}
}

func TestBackstop(t *testing.T) {
	d := newHookDriver(t, Config{HandshakeTimeout: 3 * time.Second})
	d.admit(false) // its context never ends: the path where quic-go reports nothing
	d.clock.Advance(2999 * time.Millisecond)
	if s := d.c.Snapshot(); s.InProgress != 1 {
		t.Fatalf("ended before the backstop: %+v", s)
	}
	d.clock.Advance(time.Millisecond)
	s := d.c.Snapshot()
	if s.InProgress != 0 || s.TimedOut != 1 {
		t.Fatalf("after the backstop: %+v", s)
	}
	// A late completion or failure of the same attempt counts nothing.
	a := d.live[0]
	a.complete(nil)
	a.onConnDone(errors.New("late"))
	if s2 := d.c.Snapshot(); s2 != s {
		t.Fatalf("late events changed counts: %+v -> %+v", s, s2)
	}
}

func TestBackstopStoppedOnEnd(t *testing.T) {
	d := newHookDriver(t, Config{})
	d.admit(false)
	d.admit(false).complete(nil)
	d.finish()
	if n := d.clock.pending(); n != 0 {
		t.Fatalf("%d backstop timers left running after every attempt ended", n)
	}
}

func TestExactlyOnceUnderRace(t *testing.T) {
	// Completion, failure and the backstop race for each attempt; each
	// attempt must leave the count exactly once.
	d := newHookDriver(t, Config{HandshakeTimeout: time.Second})
	const n = 200
	attempts := make([]*attempt, n)
	for i := range attempts {
		attempts[i] = d.admit(false)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, a := range attempts {
			a.complete(nil)
		}
	}()
	for _, a := range attempts {
		a.onConnDone(errors.New("x"))
	}
	d.clock.Advance(time.Second)
	<-done
	s := d.c.Snapshot()
	if s.InProgress != 0 || s.Completed+s.Failed+s.TimedOut != n {
		t.Fatalf("snapshot %+v", s)
	}
}

func TestClassify(t *testing.T) {
	cases := []struct {
		name  string
		cause error
		want  outcome
	}{
		{"handshake timeout", &quic.HandshakeTimeoutError{}, outcomeTimedOut},
		{"idle timeout", &quic.IdleTimeoutError{}, outcomeTimedOut},
		{"server closed", quic.ErrServerClosed, outcomeAbandoned},
		{"transport closed", quic.ErrTransportClosed, outcomeAbandoned},
		{"peer application close", &quic.ApplicationError{Remote: true}, outcomeAbandoned},
		{"peer NO_ERROR", &quic.TransportError{Remote: true, ErrorCode: quic.NoError}, outcomeAbandoned},
		{"refused locally (accept queue, closing)", &quic.TransportError{ErrorCode: quic.ConnectionRefused}, outcomeAbandoned},
		{"TLS alert from the peer", &quic.TransportError{Remote: true, ErrorCode: 0x12a}, outcomeFailed},
		{"local TLS failure", &quic.TransportError{ErrorCode: 0x178}, outcomeFailed},
		{"protocol violation", &quic.TransportError{Remote: true, ErrorCode: quic.ProtocolViolation}, outcomeFailed},
		{"stateless reset", &quic.StatelessResetError{}, outcomeFailed},
		{"nil", nil, outcomeFailed},
		{"anything else", errors.New("x"), outcomeFailed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := classify(tc.cause); got != tc.want {
				t.Fatalf("classify(%v) = %d, want %d", tc.cause, got, tc.want)
			}
		})
	}
}
