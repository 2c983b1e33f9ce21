package quicadmit

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
)

func TestAttachErrors(t *testing.T) {
	key := NewTokenKey()
	other := NewTokenKey()
	cases := []struct {
		name    string
		cfg     Config
		prepare func(c *Controller, tr *quic.Transport)
		tr      func() *quic.Transport
		want    error
	}{
		{name: "nil transport", tr: func() *quic.Transport { return nil }, want: errNilTransport},
		{name: "twice", prepare: func(c *Controller, tr *quic.Transport) { _ = c.Attach(tr) }, want: ErrAlreadyAttached},
		{name: "after Close", prepare: func(c *Controller, _ *quic.Transport) { _ = c.Close() }, want: ErrClosed},
		{name: "different token key", cfg: Config{TokenKey: &key},
			prepare: func(_ *Controller, tr *quic.Transport) { tr.TokenGeneratorKey = &other }, want: ErrTokenKeyConflict},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			tr := &quic.Transport{}
			if tc.tr != nil {
				tr = tc.tr()
			}
			if tc.prepare != nil {
				tc.prepare(c, tr)
			}
			var before *quic.Transport
			if tr != nil {
				copied := quic.Transport{VerifySourceAddress: tr.VerifySourceAddress, TokenGeneratorKey: tr.TokenGeneratorKey}
				before = &copied
			}
			if err := c.Attach(tr); !errors.Is(err, tc.want) {
				t.Fatalf("Attach: %v, want %v", err, tc.want)
			}
			if tr != nil && tr.TokenGeneratorKey != before.TokenGeneratorKey {
				t.Fatal("a failed Attach changed the token key")
			}
		})
	}
}

func TestAttachSetsTokenKeyOnACopy(t *testing.T) {
	key := NewTokenKey()
	c, err := New(Config{TokenKey: &key})
	if err != nil {
		t.Fatal(err)
	}
	tr := &quic.Transport{}
	if err := c.Attach(tr); err != nil {
		t.Fatal(err)
	}
	if tr.TokenGeneratorKey == nil || *tr.TokenGeneratorKey != key || tr.TokenGeneratorKey == &key {
		t.Fatal("transport did not get its own copy of the configured key")
	}
	same := key
	tr2 := &quic.Transport{TokenGeneratorKey: &same}
	if err := c.Attach(tr2); err != nil {
		t.Fatalf("transport already holding the same key: %v", err)
	}
}

func TestOneControllerSeveralTransports(t *testing.T) {
	c, err := New(Config{RetryThresholdMin: 2, RetryThresholdMax: 2})
	if err != nil {
		t.Fatal(err)
	}
	a := &quic.Transport{}
	b := &quic.Transport{}
	for _, tr := range []*quic.Transport{a, b} {
		if err := c.Attach(tr); err != nil {
			t.Fatal(err)
		}
	}
	// Two attempts on a, then b sees the endpoint past its threshold.
	for range 2 {
		if _, err := a.ConnContext(context.Background(), &quic.ClientInfo{RemoteAddr: testAddr}); err != nil {
			t.Fatal(err)
		}
	}
	if !b.VerifySourceAddress(testAddr) {
		t.Fatal("second transport does not see the first one's attempts")
	}
}

func TestChainedHooks(t *testing.T) {
	errApp := errors.New("application says no")
	type ctxKey struct{}
	cases := []struct {
		name     string
		verify   func(net.Addr) bool
		connCtx  func(context.Context, *quic.ClientInfo) (context.Context, error)
		retry    bool
		wantErr  error
		panics   bool
		refused  uint64
		admitted uint64
	}{
		{name: "application asks for a Retry", verify: func(net.Addr) bool { return true }, retry: true},
		{name: "application declines a Retry", verify: func(net.Addr) bool { return false }, admitted: 1},
		{name: "application context kept", connCtx: func(ctx context.Context, _ *quic.ClientInfo) (context.Context, error) {
			return context.WithValue(ctx, ctxKey{}, "app"), nil
		}, admitted: 1},
		{name: "application context not derived from ours", connCtx: func(context.Context, *quic.ClientInfo) (context.Context, error) {
			return context.WithValue(context.Background(), ctxKey{}, "app"), nil
		}, admitted: 1},
		{name: "application refuses", connCtx: func(context.Context, *quic.ClientInfo) (context.Context, error) {
			return nil, errApp
		}, wantErr: errApp, refused: 1},
		{name: "application returns a nil context", connCtx: func(context.Context, *quic.ClientInfo) (context.Context, error) {
			return nil, nil
		}, wantErr: errNilContext, refused: 1},
		{name: "application panics", connCtx: func(context.Context, *quic.ClientInfo) (context.Context, error) {
			panic("application bug")
		}, panics: true, refused: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pc := newPerClient(t, 4)
			c, err := New(Config{PerClient: pc})
			if err != nil {
				t.Fatal(err)
			}
			tr := &quic.Transport{VerifySourceAddress: tc.verify, ConnContext: tc.connCtx}
			if err := c.Attach(tr); err != nil {
				t.Fatal(err)
			}
			if got := tr.VerifySourceAddress(testAddr); got != tc.retry {
				t.Fatalf("Retry %v, want %v", got, tc.retry)
			}
			if tc.retry {
				return
			}
			ctx, err := callConnContext(tr, tc.panics)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("ConnContext: %v, want %v", err, tc.wantErr)
			}
			if err == nil && !tc.panics {
				if attemptOf(ctx) == nil {
					t.Fatal("returned context does not carry the attempt")
				}
				if tc.connCtx != nil && ctx.Value(ctxKey{}) != "app" {
					t.Fatal("application's context value lost")
				}
			}
			snap := c.Snapshot()
			if snap.Refused != tc.refused || snap.Admitted != tc.admitted || snap.InProgress != int64(tc.admitted) {
				t.Fatalf("snapshot %+v", snap)
			}
			if n := pc.InUse(testKey); n != int(tc.admitted) {
				t.Fatalf("%d permits in use", n)
			}
		})
	}
}

// callConnContext plays quic-go: a proven attempt, and a panic in the hook
// recovered (quic-go itself would crash).
func callConnContext(tr *quic.Transport, wantPanic bool) (ctx context.Context, err error) {
	defer func() {
		r := recover()
		if (r != nil) != wantPanic {
			err = errors.New("panic expectation not met")
		}
	}()
	return tr.ConnContext(context.Background(), &quic.ClientInfo{RemoteAddr: testAddr, AddrVerified: true})
}

func TestNewRejectsBadConfig(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
	}{
		{"RetryThresholdMin below Zero", Config{RetryThresholdMin: -2}},
		{"RetryThresholdMax below Zero", Config{RetryThresholdMax: -5}},
		{"MaxInProgress below Zero", Config{MaxInProgress: -2}},
		{"negative HandshakeTimeout", Config{HandshakeTimeout: -time.Second}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(tc.cfg)
			if !errors.Is(err, ErrConfig) || c != nil {
				t.Fatalf("New: %v, %v", c, err)
			}
		})
	}
}

func TestNewDoesNotKeepCallerConfig(t *testing.T) {
	key := NewTokenKey()
	cfg := Config{TokenKey: &key}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := key
	key[0]++ // the caller changes its key afterwards
	tr := &quic.Transport{}
	if err := c.Attach(tr); err != nil {
		t.Fatal(err)
	}
	if *tr.TokenGeneratorKey != want {
		t.Fatal("Controller follows changes to the caller's key")
	}
	if cfg != (Config{TokenKey: &key}) {
		t.Fatal("New changed the caller's Config")
	}
}
