package exchange

import (
	"io"
	"log/slog"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/clientkey"
	"github.com/seed-a07d1050/portcullis/internal/accesslog"
	"github.com/seed-a07d1050/portcullis/internal/config"
)

// BenchmarkAccessLog is the cost of one access line as the daemon writes
// it, from the exchange's fields to the batch, in each format; the batch
// goes to io.Discard, so the write system call is not in it.
func BenchmarkAccessLog(b *testing.B) {
	for _, format := range []config.LogFormat{config.LogText, config.LogJSON} {
		b.Run(string(format), func(b *testing.B) {
			level := new(slog.LevelVar)
			lb := accesslog.NewLineBuffer(io.Discard)
			a := &accesslog.Logger{Log: accesslog.NewLogger(config.Log{Format: format}, lb, level), Out: lb, Level: level, JSON: format == config.LogJSON}
			o := benchExchangeOpts(a)
			r := httptest.NewRequest("GET", "http://app.test/api/items", nil)
			r.RemoteAddr = "127.0.0.10:41234"
			st := &State{}
			st.Bytes.Store(13)
			st.Route = "r"
			st.addKey("127.0.0.10")
			start := time.Now()
			for b.Loop() {
				logAccess(&o, r, st, 200, start, time.Now())
			}
			lb.Flush()
		})
	}
}

// benchExchangeOpts are the options of a listener that logs to a and
// trusts no proxy, as the daemon builds them.
func benchExchangeOpts(a *accesslog.Logger) Opts {
	return Opts{Listener: "web", Log: a, Clients: accesslog.NewClients(&clientkey.Resolver{Header: clientkey.HeaderXForwardedFor})}
}

// lineRecorder records every Write it gets.
type lineRecorder struct {
	mu     sync.Mutex
	writes []string
}

func (w *lineRecorder) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes = append(w.writes, string(p))
	return len(p), nil
}

func (w *lineRecorder) got() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.writes...)
}
