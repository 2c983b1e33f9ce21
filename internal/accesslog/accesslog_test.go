package accesslog

import (
	"bytes"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/config"
)

// recordingWriter records every Write it gets.
type recordingWriter struct {
	mu     sync.Mutex
	writes []string
	err    error
}

func (w *recordingWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes = append(w.writes, string(p))
	return len(p), w.err
}

func (w *recordingWriter) got() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.writes...)
}

func TestLineBufferBatchesLines(t *testing.T) {
	t.Run("a line waits at most accessFlushAfter", func(t *testing.T) {
		var out recordingWriter
		b := NewLineBuffer(&out)
		start := time.Now()
		_, _ = b.Write([]byte("one\n"))
		_, _ = b.Write([]byte("two\n"))
		if w := out.got(); len(w) != 0 {
			t.Fatalf("written at once: %q", w)
		}
		for len(out.got()) == 0 {
			if time.Since(start) > 5*time.Second {
				t.Fatal("the lines were never written")
			}
			time.Sleep(5 * time.Millisecond)
		}
		if took := time.Since(start); took < accessFlushAfter {
			t.Errorf("written after %v, before accessFlushAfter (%v)", took, accessFlushAfter)
		}
		if w := out.got(); len(w) != 1 || w[0] != "one\ntwo\n" {
			t.Errorf("writes %q, want both lines in one", w)
		}
	})
	t.Run("a full buffer is written at once, lines whole", func(t *testing.T) {
		var out recordingWriter
		b := NewLineBuffer(&out)
		line := strings.Repeat("x", 1000) + "\n"
		for range 100 {
			_, _ = b.Write([]byte(line))
		}
		b.Flush()
		var all bytes.Buffer
		for _, w := range out.got() {
			if len(w) > accessBufferSize || len(w)%len(line) != 0 {
				t.Errorf("a write of %d bytes: more than the buffer, or a line split", len(w))
			}
			all.WriteString(w)
		}
		if all.String() != strings.Repeat(line, 100) {
			t.Errorf("wrote %d bytes, want the 100 lines in order", all.Len())
		}
		if n := len(out.got()); n < 100*len(line)/accessBufferSize {
			t.Errorf("%d writes for %d bytes", n, 100*len(line))
		}
	})
	t.Run("access lines formatted in place, lines whole", func(t *testing.T) {
		var out recordingWriter
		b := NewLineBuffer(&out)
		at := time.Date(2026, 12, 5, 3, 0, 0, 0, time.UTC)
		var want bytes.Buffer
		longest := 0
		for i := range 400 {
			f := af("web", "127.0.0.2:1", "GET", "h", "/"+strings.Repeat("p", i*7%1500), "HTTP/1.1", 200, int64(i), time.Millisecond)
			if i%9 == 0 {
				f.Path += " with spaces" // slog's to quote: declined, nothing added
			}
			line, ok := appendAccessLine(nil, i%2 == 0, at, &f)
			if got := b.addAccessLine(i%2 == 0, at, &f); got != ok {
				t.Fatalf("line %d: addAccessLine %v, appendAccessLine %v", i, got, ok)
			}
			if ok {
				want.Write(line)
				longest = max(longest, len(line))
			}
		}
		b.Flush()
		var all bytes.Buffer
		for _, w := range out.got() {
			if !strings.HasSuffix(w, "\n") || len(w) > accessBufferSize-accessLineRoom+longest {
				t.Errorf("a write of %d bytes: a line split, or more than a batch holds", len(w))
			}
			all.WriteString(w)
		}
		if all.String() != want.String() {
			t.Errorf("wrote %d bytes, want the %d bytes of the lines in order", all.Len(), want.Len())
		}
		if n := len(out.got()); n < want.Len()/accessBufferSize {
			t.Errorf("%d writes for %d bytes", n, want.Len())
		}
	})
	t.Run("a panic while formatting leaves the buffer usable", func(t *testing.T) {
		var out recordingWriter
		b := NewLineBuffer(&out)
		func() {
			defer func() { _ = recover() }()
			b.addAccessLine(false, time.Now(), nil) // formatting nil fields panics
			t.Fatal("formatting nil fields did not panic")
		}()
		done := make(chan struct{})
		go func() {
			_, _ = b.Write([]byte("after\n"))
			b.Flush()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("a line after the panic waits for the lock for good")
		}
		if w := out.got(); len(w) != 1 || w[0] != "after\n" {
			t.Errorf("writes %q, want the line after the panic alone", w)
		}
	})
	t.Run("a line longer than the buffer", func(t *testing.T) {
		var out recordingWriter
		b := NewLineBuffer(&out)
		_, _ = b.Write([]byte("short\n"))
		long := strings.Repeat("y", 2*accessBufferSize) + "\n"
		_, _ = b.Write([]byte(long))
		if w := out.got(); len(w) != 2 || w[0] != "short\n" || w[1] != long {
			t.Errorf("writes of %d lines, want the short line then the long one, each whole", len(w))
		}
	})
	t.Run("a failed write is reported by the next line", func(t *testing.T) {
		out := recordingWriter{err: errors.New("disk full")}
		b := NewLineBuffer(&out)
		_, _ = b.Write([]byte("one\n"))
		b.Flush()
		if _, err := b.Write([]byte("two\n")); err == nil || err.Error() != "disk full" {
			t.Errorf("Write after a failed batch: %v, want the failure", err)
		}
		b.Flush()
	})
	t.Run("lines are added while a batch is written", func(t *testing.T) {
		// The first batch's write blocks until released: a line added
		// meanwhile does not wait for it, and goes out after it.
		out := &blockingWriter{release: make(chan struct{}), started: make(chan struct{})}
		b := NewLineBuffer(out)
		full := strings.Repeat("z", accessBufferSize-1) + "\n"
		go func() { _, _ = b.Write([]byte(full)) }()
		select {
		case <-out.started:
		case <-time.After(5 * time.Second):
			t.Fatal("the full batch was never written")
		}
		added := make(chan struct{})
		go func() {
			_, _ = b.Write([]byte("next\n"))
			close(added)
		}()
		select {
		case <-added:
		case <-time.After(5 * time.Second):
			t.Fatal("a line waited for the batch being written")
		}
		close(out.release)
		b.Flush()
		if w := out.got(); len(w) != 2 || w[0] != full || w[1] != "next\n" {
			t.Errorf("writes of %d batches, want the full one then the next line", len(w))
		}
	})
}

// blockingWriter records its writes; the first one waits for release.
type blockingWriter struct {
	recordingWriter
	started, release chan struct{}
	once             sync.Once
}

func (w *blockingWriter) Write(p []byte) (int, error) {
	first := false
	w.once.Do(func() { first = true })
	if first {
		close(w.started)
		<-w.release
	}
	return w.recordingWriter.Write(p)
}

// af returns the fields of an access line from a peer, without the
// optional ones; the client is the peer's address, or invalid when the
// peer is not an address.
func af(listener, peer, method, host, path, proto string, status int, bytes int64, d time.Duration) Fields {
	ap, _ := netip.ParseAddrPort(peer)
	return Fields{
		Listener: listener, Client: ap.Addr(), Peer: peer, Method: method, Host: host, Path: path,
		Proto: proto, Status: status, Bytes: bytes, Duration: d,
	}
}

// TestAccessLineMatchesSlog is the differential test of the access line
// encoder: for plain values it must write, byte for byte, what slog's
// text and JSON handlers (as NewLogger builds them) write for the same
// record; for values it cannot write plainly it must decline, leaving the
// line to slog. Times in several zones and at every precision, durations
// from nanoseconds to hours, and 2000 seeded random field values.
func TestAccessLineMatchesSlog(t *testing.T) {
	zones := []*time.Location{time.UTC, time.FixedZone("", 5*3600+1800), time.FixedZone("", -8*3600), time.FixedZone("X", 45*60)}
	base := time.Date(2026, 12, 2, 9, 46, 19, 0, time.UTC)
	full := func(f Fields) Fields {
		f.Keys, f.Route, f.Upstream = []string{"192.0.2.7", "acme"}, "api", 812345*time.Nanosecond
		f.Admission, f.Queued, f.Limit, f.Reason = Refused, 25*time.Millisecond+7*time.Microsecond, "route_limit", "queue_timeout"
		return f
	}
	fields := []Fields{
		af("web", "127.0.0.2:41234", "GET", "app.test", "/", "HTTP/1.1", 200, 13, 1234567*time.Nanosecond),
		af("web", "[::1]:80", "POST", "app.test:8080", "/api/v1/items", "HTTP/2.0", 502, 0, 850*time.Microsecond),
		af("w-1", "192.0.2.1:1", "DELETE", "x", "/a/b/", "HTTP/1.0", 404, 1<<40, 3*time.Hour+2*time.Second),
		af("web", "1.2.3.4:5", "GET", "h", "/p", "HTTP/1.1", 101, 5, 0),
		af("web", "1.2.3.4:5", "GET", "h", "/p", "HTTP/1.1", 200, 5, 7),
		// Not plain: slog quotes or escapes these, and the encoder declines.
		af("web", "1.2.3.4:5", "GET", "h", "/a b", "HTTP/1.1", 200, 5, 1),
		af("web", "1.2.3.4:5", "GET", "", "/", "HTTP/1.1", 400, 5, 1),
		af("web", "1.2.3.4:5", "GET", "h", "/é", "HTTP/1.1", 200, 5, 1),
		af("web", "1.2.3.4:5", "GET", "h", "/a=b", "HTTP/1.1", 200, 5, 1),
		af("web", "1.2.3.4:5", "GET", "h", `/"q"`, "HTTP/1.1", 200, 5, 1),
		af("web", "1.2.3.4:5", "GET", "h", "/<script>&", "HTTP/1.1", 200, 5, 1),
		af("web", "1.2.3.4:5", "GET", "h", `/a\b`, "HTTP/1.1", 200, 5, 1),
		af("web", "1.2.3.4:5", "GET", "h", "/\x00\x7f", "HTTP/1.1", 200, 5, 1),
		// Every optional field, and a client a trusted proxy named.
		full(af("web", "10.0.0.1:443", "GET", "h", "/api/x", "HTTP/2.0", 429, 18, 25*time.Millisecond)),
		func() Fields {
			f := full(af("web", "[fe80::1%eth0]:8", "GET", "h", "/", "HTTP/1.1", 200, 1, time.Second))
			f.Client = netip.MustParseAddr("fe80::1%eth0") // a zone slog would quote
			return f
		}(),
	}
	// Durations at the edges of the integer form of the _ms fields.
	for _, us := range []int64{0, 1, 10, 100, 999, 1000, 1001, 1010, 1100, 123456, 999999999, 1e9, 1e9 + 1, 1e12 + 7, 1e15 - 1, 1e15, 1e15 + 1} {
		f := af("web", "1.2.3.4:5", "GET", "h", "/ms", "HTTP/1.1", 200, 5, time.Duration(us)*time.Microsecond+999)
		f.Upstream, f.Queued = time.Duration(us)*time.Microsecond, time.Duration(us)*time.Microsecond
		fields = append(fields, f)
	}
	rng := rand.New(rand.NewPCG(19, 19))
	plainChars := []byte("aZ09/.-_~:%!$'()*+,;@[]")
	allChars := append([]byte("= \"\\<>&\t\xc3\xa9"), plainChars...)
	for range 2000 {
		// Mostly plain words, and now and then one slog quotes.
		alphabet := plainChars
		if rng.IntN(20) == 0 {
			alphabet = allChars
		}
		word := func() string {
			b := make([]byte, 1+rng.IntN(8))
			if rng.IntN(200) == 0 {
				b = b[:0]
			}
			for i := range b {
				b[i] = alphabet[rng.IntN(len(alphabet))]
			}
			return string(b)
		}
		f := af(word(), word(), word(), word(), "/"+word(), word(),
			rng.IntN(600), rng.Int64N(1<<50), time.Duration(rng.Int64N(int64(10*time.Hour))))
		f.Client = netip.AddrFrom4([4]byte{byte(rng.IntN(256)), 0, 2, byte(rng.IntN(256))})
		if rng.IntN(2) == 0 {
			f.Keys = []string{word()}
			if rng.IntN(3) == 0 {
				f.Keys = append(f.Keys, word())
			}
		}
		if rng.IntN(2) == 0 {
			f.Route = word()
		}
		if rng.IntN(2) == 0 {
			f.Upstream = time.Duration(rng.Int64N(int64(10 * time.Hour)))
		}
		f.Admission = Outcome(rng.IntN(len(outcomeNames)))
		if f.Admission != Admitted && rng.IntN(2) == 0 {
			f.Queued = time.Duration(rng.Int64N(int64(time.Minute)))
			f.Limit, f.Reason = "client_limit", "queue_full"
		}
		fields = append(fields, f)
	}
	plain := 0
	for i, f := range fields {
		for _, format := range []config.LogFormat{config.LogText, config.LogJSON} {
			at := base.Add(time.Duration(rng.Int64N(int64(time.Second)))).In(zones[i%len(zones)])
			var want bytes.Buffer
			level := new(slog.LevelVar)
			a := &Logger{Log: NewLogger(config.Log{Format: format, Level: config.LevelInfo}, &want, level)}
			a.writeSlog(at, &f)
			got, ok := appendAccessLine(nil, format == config.LogJSON, at, &f)
			if !ok {
				continue
			}
			plain++
			if string(got) != want.String() {
				t.Fatalf("%s line for %+v at %v:\ngot  %q\nwant %q", format, f, at, got, want.String())
			}
		}
	}
	if plain < 2000 {
		t.Fatalf("only %d lines written by the encoder: the test compares too little", plain)
	}
	for _, i := range []int{5, 6, 7, 8, 9, 10, 11, 12, 14} {
		if _, ok := appendAccessLine(nil, false, base, &fields[i]); ok {
			t.Errorf("the encoder wrote %+v, which slog quotes", fields[i])
		}
	}
}

// TestAccessLogLevelAndOutput checks the encoder's path as the daemon uses
// it: lines at INFO go to the batch, and none when the level is above.
func TestAccessLogLevelAndOutput(t *testing.T) {
	var out recordingWriter
	level := new(slog.LevelVar)
	lb := NewLineBuffer(&out)
	a := &Logger{Log: NewLogger(config.Log{Format: config.LogText}, lb, level), Out: lb, Level: level}
	f := af("web", "127.0.0.2:1", "GET", "h", "/", "HTTP/1.1", 200, 1, time.Millisecond)
	a.Write(time.Now(), &f)
	f.Path = "/with space"
	a.Write(time.Now(), &f) // through slog
	level.Set(slog.LevelWarn)
	a.Write(time.Now(), &f)
	f.Path = "/"
	a.Write(time.Now(), &f)
	lb.Flush()
	lines := strings.Split(strings.TrimSuffix(strings.Join(out.got(), ""), "\n"), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], " path=/ ") || !strings.Contains(lines[1], ` path="/with space" `) {
		t.Fatalf("lines %q, want the two lines logged at INFO", lines)
	}
}

// FuzzAccessLine drives the access line encoder with arbitrary request
// values: it writes exactly what slog's handler writes for the same
// record, or declines and leaves the line to slog. A client controls the
// method, host and path, so nothing they hold may end a line early or
// forge a field.
func FuzzAccessLine(f *testing.F) {
	f.Add("GET", "app.test", "/a/b", "web", "api", "192.0.2.7", int64(1234567), int64(812345))
	f.Add("GET", "h", "/a\nlevel=ERROR msg=forged", "web", "", "", int64(0), int64(0))
	f.Add("P\x00ST", "h\"x", "/é\\", "w-1", "r=1", "k,k", int64(1<<40), int64(-1))
	at := time.Date(2026, 12, 2, 9, 46, 19, 123456789, time.FixedZone("", 5*3600+1800))
	f.Fuzz(func(t *testing.T, method, host, path, listener, route, key string, d, up int64) {
		fields := af(listener, "192.0.2.1:4321", method, host, path, "HTTP/1.1", 200, 13, time.Duration(d))
		fields.Route = route
		if key != "" {
			fields.Keys = []string{key}
		}
		if up > 0 {
			fields.Upstream = time.Duration(up)
		}
		for _, format := range []config.LogFormat{config.LogText, config.LogJSON} {
			var want bytes.Buffer
			a := &Logger{Log: NewLogger(config.Log{Format: format, Level: config.LevelInfo}, &want, new(slog.LevelVar))}
			a.writeSlog(at, &fields)
			got, ok := appendAccessLine(nil, format == config.LogJSON, at, &fields)
			if ok && string(got) != want.String() {
				t.Fatalf("%s line:\ngot  %q\nwant %q", format, got, want.String())
			}
			if n := bytes.Count(want.Bytes(), []byte("\n")); n != 1 {
				t.Fatalf("slog's %s line holds %d newlines: %q", format, n, want.String())
			}
		}
	})
}

// TestPlainValueEveryByte checks plainValue's table byte by byte, at the
// start, middle and end of values: a value it calls plain must be one
// both of slog's handlers write as it is, and it declines only the bytes
// its comment names beyond those slog quotes or escapes.
func TestPlainValueEveryByte(t *testing.T) {
	for c := range 256 {
		b := string([]byte{byte(c)})
		want := slogWritesPlain(b) && slogWritesPlain("a"+b+"b") &&
			c != '<' && c != '>' && c != '&' && c != 0x7f
		for _, v := range []string{b, "a" + b, b + "a", "ab" + b + "cd/", "/abcdefgh" + b, b + "abcdefghij/"} {
			if got := plainValue(v); got != want {
				t.Errorf("plainValue(%q) = %v, want %v", v, got, want)
				break
			}
		}
	}
	if plainValue("") {
		t.Error(`plainValue("") = true: slog quotes an empty value`)
	}
}

// slogWritesPlain reports whether both of slog's handlers write v as it is.
func slogWritesPlain(v string) bool {
	var text, json bytes.Buffer
	slog.New(slog.NewTextHandler(&text, nil)).Info("m", "k", v)
	slog.New(slog.NewJSONHandler(&json, nil)).Info("m", "k", v)
	return strings.HasSuffix(text.String(), " k="+v+"\n") && strings.HasSuffix(json.String(), `,"k":"`+v+`"}`+"\n")
}
