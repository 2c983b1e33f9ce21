package connlimit

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/seed-a07d1050/portcullis/clientkey"
)

// fakeListener hands out what the test pushes: connections or errors.
type fakeListener struct {
	next    chan acceptResult
	accepts atomic.Int64
	done    chan struct{}
	once    sync.Once
}

type acceptResult struct {
	c   net.Conn
	err error
}

func newFakeListener() *fakeListener {
	return &fakeListener{next: make(chan acceptResult, 64), done: make(chan struct{})}
}

func (f *fakeListener) Accept() (net.Conn, error) {
	f.accepts.Add(1)
	select {
	case r := <-f.next:
		return r.c, r.err
	case <-f.done:
		return nil, net.ErrClosed
	}
}

func (f *fakeListener) Close() error   { f.once.Do(func() { close(f.done) }); return nil }
func (f *fakeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }

// push queues a connection from ip and returns the client's end.
func (f *fakeListener) push(ip string) net.Conn {
	server, client := net.Pipe()
	f.next <- acceptResult{c: &fakeConn{Conn: server, remote: &net.TCPAddr{IP: net.ParseIP(ip), Port: 1000}}}
	return client
}

type fakeConn struct {
	net.Conn
	remote net.Addr
}

func (c *fakeConn) RemoteAddr() net.Addr { return c.remote }

// acceptAsync runs Accept on a goroutine; its result arrives on the channel.
func acceptAsync(l *Listener) chan acceptResult {
	ch := make(chan acceptResult, 1)
	go func() {
		c, err := l.Accept()
		ch <- acceptResult{c, err}
	}()
	return ch
}

// At MaxConns, Accept stops calling the inner Accept until a connection
// closes: new connections wait in the backlog, not accepted and dropped.
func TestMaxConnsStopsAccepting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeListener()
		l := newTestListener(t, f, Config{MaxConns: 2})
		for _, ip := range []string{"192.0.2.1", "192.0.2.2", "192.0.2.3"} {
			f.push(ip)
		}
		first := (<-acceptAsync(l)).c
		(<-acceptAsync(l)).c.Close()
		second := (<-acceptAsync(l)).c // took the closed one's place
		waiting := acceptAsync(l)
		synctest.Wait()
		if n := f.accepts.Load(); n != 3 {
			t.Fatalf("inner Accept called %d times at the cap, want 3", n)
		}
		select {
		case r := <-waiting:
			t.Fatalf("Accept returned %v at the cap", r)
		default:
		}
		first.Close()
		synctest.Wait()
		if n := f.accepts.Load(); n != 4 {
			t.Fatalf("inner Accept called %d times after a close, want 4", n)
		}
		// Nothing queued: Close ends the waiting Accept.
		l.Close()
		if r := <-waiting; !errors.Is(r.err, net.ErrClosed) {
			t.Fatalf("Accept after Close = %v, want ErrClosed", r.err)
		}
		second.Close()
		checkDrained(t, l)
	})
}

func TestMaxConnsCloseWhileWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeListener()
		l := newTestListener(t, f, Config{MaxConns: 1})
		f.push("192.0.2.1")
		held := (<-acceptAsync(l)).c
		waiting := acceptAsync(l)
		synctest.Wait()
		l.Close()
		if r := <-waiting; !errors.Is(r.err, ErrClosed) {
			t.Fatalf("Accept = %v, want ErrClosed", r.err)
		}
		held.Close()
		checkDrained(t, l)
	})
}

func emfile() error {
	return &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
}

// Temporary accept errors back off like net/http: 5 ms doubling to 1 s.
func TestAcceptBackoff(t *testing.T) {
	for _, async := range []bool{false, true} {
		t.Run(map[bool]string{false: "inline", true: "async"}[async], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFakeListener()
				cfg := Config{}
				if async {
					cfg.Trusted, cfg.ProxyProtocol = mustProxySet("10.0.0.1"), true
				}
				l := newTestListener(t, f, cfg)
				for range 3 {
					f.next <- acceptResult{err: emfile()}
				}
				f.push("192.0.2.1")
				start := time.Now()
				r := <-acceptAsync(l)
				if r.err != nil {
					t.Fatalf("Accept: %v", r.err)
				}
				if d := time.Since(start); d != 35*time.Millisecond {
					t.Fatalf("backed off %v in all, want 5+10+20 ms", d)
				}
				if s := l.Stats(); s.AcceptErrors != 3 {
					t.Fatalf("AcceptErrors = %d, want 3", s.AcceptErrors)
				}
				r.c.Close()
				permanent := errors.New("listener broke")
				f.next <- acceptResult{err: permanent}
				if r := <-acceptAsync(l); !errors.Is(r.err, permanent) {
					t.Fatalf("Accept = %v, want the permanent error", r.err)
				}
				checkDrained(t, l)
			})
		})
	}
}

func TestNextDelay(t *testing.T) {
	d := time.Duration(0)
	var got []time.Duration
	for range 10 {
		d = nextDelay(d)
		got = append(got, d)
	}
	if got[0] != 5*time.Millisecond || got[1] != 10*time.Millisecond || got[9] != time.Second {
		t.Fatalf("delays = %v", got)
	}
}

// captureHandler records log records.
type captureHandler struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *captureHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *captureHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.records = append(h.records, r)
	h.mu.Unlock()
	return nil
}
func (h *captureHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *captureHandler) WithGroup(string) slog.Handler      { return h }

func (h *captureHandler) lines() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range h.records {
		var b strings.Builder
		b.WriteString(r.Level.String() + " " + r.Message)
		r.Attrs(func(a slog.Attr) bool {
			b.WriteString(" " + a.String())
			return true
		})
		out = append(out, b.String())
	}
	return out
}

// A flood of refusals writes one line a second, with the count of those
// it held back.
func TestRefusalLogRateLimited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &captureHandler{}
		f := newFakeListener()
		l := newTestListener(t, f, Config{Policy: Policy{Permits: 1}, Logger: slog.New(h), LogLevel: slog.LevelWarn})
		f.push("192.0.2.1")
		held := (<-acceptAsync(l)).c
		defer held.Close()
		for range 5 {
			f.push("192.0.2.1")
		}
		pending := acceptAsync(l)
		synctest.Wait()
		lines := h.lines()
		if len(lines) != 1 || !strings.Contains(lines[0], "WARN") || !strings.Contains(lines[0], "reason=client_cap") ||
			!strings.Contains(lines[0], "peer=192.0.2.1") || !strings.Contains(lines[0], "suppressed=0") {
			t.Fatalf("lines after 5 refusals = %q; want one WARN naming reason and peer", lines)
		}
		// A second after the first line held back, a line of its own
		// reports the count, with no refusal to carry it.
		time.Sleep(time.Second)
		synctest.Wait()
		if lines := h.lines(); len(lines) != 2 || !strings.Contains(lines[1], "connection refusals suppressed") ||
			!strings.Contains(lines[1], "suppressed=4") {
			t.Fatalf("lines = %q; want a second line reporting 4 suppressed", lines)
		}
		f.push("192.0.2.1")
		synctest.Wait()
		if lines := h.lines(); len(lines) != 3 || !strings.Contains(lines[2], "peer=192.0.2.1:") || !strings.Contains(lines[2], "suppressed=0") {
			t.Fatalf("lines = %q; want a third line, the count reported already", lines)
		}
		f.push("192.0.2.2")
		if r := <-pending; r.err != nil {
			t.Fatal(r.err)
		} else {
			r.c.Close()
		}
		if s := l.Stats(); s.Refused.ClientCap != 6 {
			t.Fatalf("refusals = %d, want 6 (logged or not, all counted)", s.Refused.ClientCap)
		}
	})
}

// fakeStore answers every request with its verdict and counts what it holds.
type fakeStore struct {
	mu      sync.Mutex
	allow   bool
	err     error
	held    int
	calls   int           // Acquire and TryAcquire calls
	waitFor time.Duration // Acquire blocks this long (bounded by ctx)
}

func (s *fakeStore) Acquire(ctx context.Context, key clientkey.Key, limit, local int) (bool, error) {
	if s.waitFor > 0 {
		select {
		case <-time.After(s.waitFor):
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	return s.TryAcquire(key, limit, local)
}

func (s *fakeStore) TryAcquire(clientkey.Key, int, int) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.err != nil || !s.allow {
		return false, s.err
	}
	s.held++
	return true, nil
}

func (s *fakeStore) Release(clientkey.Key) {
	s.mu.Lock()
	s.held--
	s.mu.Unlock()
}

func (s *fakeStore) set(allow bool, err error, wait time.Duration) {
	s.mu.Lock()
	s.allow, s.err, s.waitFor = allow, err, wait
	s.mu.Unlock()
}

func TestStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &fakeStore{allow: true}
		f := newFakeListener()
		l := newTestListener(t, f, Config{Store: store, StoreTimeout: 100 * time.Millisecond})
		f.push("192.0.2.1")
		c := (<-acceptAsync(l)).c
		if store.held != 1 {
			t.Fatalf("store holds %d, want 1", store.held)
		}
		next := acceptAsync(l)
		store.set(false, nil, 0) // the cluster is full for this client
		f.push("192.0.2.1")
		synctest.Wait()
		store.set(false, errors.New("redis down"), 0)
		f.push("192.0.2.1")
		synctest.Wait()
		store.set(true, nil, time.Hour) // never answers in time
		f.push("192.0.2.1")
		time.Sleep(200 * time.Millisecond)
		synctest.Wait()
		r := l.Stats().Refused
		if r.ClientCap != 1 || r.Store != 2 {
			t.Fatalf("refusals = %+v; want 1 client cap and 2 store", r)
		}
		c.Close()
		store.mu.Lock()
		held := store.held
		store.mu.Unlock()
		if held != 0 {
			t.Fatalf("store holds %d after Close, want 0", held)
		}
		l.Close()
		if r := <-next; !errors.Is(r.err, net.ErrClosed) {
			t.Fatalf("Accept = %v", r)
		}
		checkDrained(t, l)
	})
}

// A client that no finite cap applies to is admitted without asking the
// Store, even while the Store fails; a client an override caps still asks
// it. A listener with no finite cap at all never goes asynchronous.
func TestStoreSkippedForUncappedClients(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &fakeStore{err: errors.New("redis down")}
		f := newFakeListener()
		capped := netip.MustParsePrefix("192.0.2.0/24")
		l := newTestListener(t, f, Config{
			Policy:          Policy{Permits: -1},
			Levels:          []Level{{IPv6Bits: 48, Max: 4}}, // IPv6 only: IPv4 clients stay uncapped
			PrefixOverrides: []Override{{Prefix: capped, Max: 2}},
			Store:           store,
		})
		var open []net.Conn
		for range 3 {
			f.push("198.51.100.7")
			r := <-acceptAsync(l)
			if r.err != nil {
				t.Fatalf("uncapped client while the Store fails: %v", r.err)
			}
			open = append(open, r.c)
		}
		store.mu.Lock()
		calls := store.calls
		store.mu.Unlock()
		if calls != 0 {
			t.Fatalf("%d Store calls for an uncapped client, want 0", calls)
		}
		next := acceptAsync(l)
		f.push("192.0.2.1")   // capped by its override: asks the Store, which fails
		f.push("2001:db8::1") // capped by the IPv6 level
		synctest.Wait()
		store.mu.Lock()
		calls = store.calls
		store.mu.Unlock()
		if r := l.Stats().Refused; r.Store != 2 || calls != 2 {
			t.Fatalf("capped clients: %d Store calls and refusals %+v, want 2 calls and 2 store refusals", calls, r)
		}
		for _, c := range open {
			c.Close()
		}
		l.Close()
		<-next
		checkDrained(t, l)

		none := newTestListener(t, newFakeListener(), Config{Policy: Policy{Permits: -1}, Store: store})
		if none.async {
			t.Fatal("a listener without any finite cap admits asynchronously, for a Store it never asks")
		}
	})
}

// recordingConn implements ReadFrom and WriteTo and records their use.
type recordingConn struct {
	net.Conn
	readFrom, writeTo atomic.Int64
	written           bytes.Buffer
}

func (c *recordingConn) ReadFrom(r io.Reader) (int64, error) {
	c.readFrom.Add(1)
	return c.written.ReadFrom(r)
}

func (c *recordingConn) WriteTo(w io.Writer) (int64, error) {
	c.writeTo.Add(1)
	return io.Copy(w, strings.NewReader("inner"))
}

// io.Copy through a Conn uses the inner connection's ReadFrom and WriteTo,
// which is where *net.TCPConn does splice and sendfile.
func TestFastPathsDelegate(t *testing.T) {
	inner := &recordingConn{}
	l := &Listener{}
	c := &Conn{conn: inner, l: l}
	if _, err := io.Copy(c, io.LimitReader(strings.NewReader("payload"), 100)); err != nil {
		t.Fatal(err)
	}
	if inner.readFrom.Load() != 1 || inner.written.String() != "payload" {
		t.Fatalf("io.Copy into Conn: inner ReadFrom calls %d, wrote %q", inner.readFrom.Load(), inner.written.String())
	}
	c.pending = []byte("after header ")
	c.hasPending.Store(true)
	var out bytes.Buffer
	if _, err := io.Copy(&out, c); err != nil {
		t.Fatal(err)
	}
	if inner.writeTo.Load() != 1 || out.String() != "after header inner" {
		t.Fatalf("io.Copy out of Conn: inner WriteTo calls %d, read %q", inner.writeTo.Load(), out.String())
	}
	// A Conn as the source of another Conn's ReadFrom is unwrapped, so the
	// inner ReadFrom sees the inner source (a *net.TCPConn can then splice).
	src := &Conn{conn: &recordingConn{}, l: l}
	var seen io.Reader
	dst := &Conn{conn: readFromFunc(func(r io.Reader) { seen = r }), l: l}
	dst.ReadFrom(src)
	if seen != src.conn {
		t.Fatalf("ReadFrom passed %T on, want the source's inner conn", seen)
	}
	if _, err := (&Conn{conn: pipeOnly{}}).SyscallConn(); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("SyscallConn on a conn without one = %v, want ErrUnsupported", err)
	}
	if err := (&Conn{conn: pipeOnly{}}).CloseWrite(); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("CloseWrite = %v, want ErrUnsupported", err)
	}
}

type readFromFunc func(io.Reader)

func (f readFromFunc) ReadFrom(r io.Reader) (int64, error) { f(r); return 0, nil }
func (readFromFunc) Read([]byte) (int, error)              { return 0, io.EOF }
func (readFromFunc) Write(b []byte) (int, error)           { return len(b), nil }
func (readFromFunc) Close() error                          { return nil }
func (readFromFunc) LocalAddr() net.Addr                   { return nil }
func (readFromFunc) RemoteAddr() net.Addr                  { return nil }
func (readFromFunc) SetDeadline(time.Time) error           { return nil }
func (readFromFunc) SetReadDeadline(time.Time) error       { return nil }
func (readFromFunc) SetWriteDeadline(time.Time) error      { return nil }

type pipeOnly struct{ net.Conn }

// Over real sockets, the fast paths move the bytes: a file sent through
// the wrapper arrives whole, and the wrapper hands *net.TCPConn its own
// ReadFrom.
func TestFastPathsOverTCP(t *testing.T) {
	l := newTestListener(t, nil, Config{})
	client := dialFrom(t, "127.0.0.2", l.Addr())
	conn := acceptOne(t, l)
	if _, ok := conn.NetConn().(*net.TCPConn); !ok {
		t.Fatalf("NetConn is %T, want *net.TCPConn", conn.NetConn())
	}
	f, err := os.CreateTemp(t.TempDir(), "payload")
	if err != nil {
		t.Fatal(err)
	}
	payload := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB
	f.Write(payload)
	f.Seek(0, io.SeekStart)
	errc := make(chan error, 1)
	go func() {
		_, err := io.Copy(conn, f) // Conn.ReadFrom -> TCPConn.ReadFrom -> sendfile
		conn.CloseWrite()
		errc <- err
	}()
	client.SetReadDeadline(time.Now().Add(waitTimeout))
	got, err := io.ReadAll(client)
	if err != nil || !bytes.Equal(got, payload) || <-errc != nil {
		t.Fatalf("received %d of %d bytes, err %v", len(got), len(payload), err)
	}
	if _, err := conn.SyscallConn(); err != nil {
		t.Fatalf("SyscallConn: %v", err)
	}
}
