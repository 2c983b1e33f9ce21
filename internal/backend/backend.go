// Package backend is the small HTTP server Portcullis puts behind the proxy in
// `portcullis demo`, in tests and in benchmarks. It serves a few fixed paths
// whose cost is known in advance, so a measurement through the proxy can be
// compared with one taken directly against the backend:
//
//	/               a short fixed body (see [HelloBody])
//	/slow?ms=N      answers after N milliseconds, or earlier if the client goes away
//	/bytes?n=N      streams N bytes
//	/ws             a WebSocket echo
//
// Every other path answers 404. [Config.Delay] adds a fixed wait before every
// response, which is how the benchmarks model a backend that takes 2 ms.
package backend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/websocket"
)

// HelloBody is the body served at "/".
const HelloBody = "hello from the backend\n"

// Defaults for the bounds in [Config].
const (
	DefaultMaxSlow  = 60 * time.Second
	DefaultMaxBytes = 1 << 30
)

// ErrInvalidConfig is wrapped by the error [New] returns for a bad [Config].
var ErrInvalidConfig = errors.New("backend: invalid config")

// Config says how a [Handler] behaves. The zero value is a valid
// configuration: no delay, the default bounds, no logging.
type Config struct {
	// Delay is waited before every response, on every path, including the
	// WebSocket handshake. The wait ends early when the request's context
	// ends, and then nothing is written. Zero means no delay; negative is
	// invalid.
	Delay time.Duration

	// MaxSlow is the longest wait /slow accepts; a longer ms parameter gets
	// 400. Zero means [DefaultMaxSlow]; negative is invalid.
	MaxSlow time.Duration

	// MaxBytes is the largest n /bytes accepts; a larger one gets 400. Zero
	// means [DefaultMaxBytes]; negative is invalid.
	MaxBytes int64

	// Logger receives the HTTP server's own error log (a [Server] only).
	// Nil means discard: a backend under a deliberate attack would
	// otherwise log one line per broken connection.
	Logger *slog.Logger
}

func (c Config) withDefaults() (Config, error) {
	switch {
	case c.Delay < 0:
		return c, fmt.Errorf("%w: Delay must be ≥ 0, got %v", ErrInvalidConfig, c.Delay)
	case c.MaxSlow < 0:
		return c, fmt.Errorf("%w: MaxSlow must be ≥ 0, got %v", ErrInvalidConfig, c.MaxSlow)
	case c.MaxBytes < 0:
		return c, fmt.Errorf("%w: MaxBytes must be ≥ 0, got %d", ErrInvalidConfig, c.MaxBytes)
	}
	if c.MaxSlow == 0 {
		c.MaxSlow = DefaultMaxSlow
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = DefaultMaxBytes
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// Handler serves the backend's paths. Create it with [New]; it is safe for
// concurrent use.
type Handler struct {
	cfg      Config
	mux      *http.ServeMux
	requests atomic.Uint64
	inFlight atomic.Int64

	// tunnels are the hijacked WebSocket connections, which http.Server.Close
	// does not close by itself.
	mu      sync.Mutex
	tunnels map[*websocket.Conn]struct{}
	closed  bool
}

var _ http.Handler = (*Handler)(nil)

// New returns a Handler for cfg, or an error wrapping [ErrInvalidConfig]. cfg
// is copied; the caller may reuse it.
func New(cfg Config) (*Handler, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	h := &Handler{cfg: cfg, mux: http.NewServeMux(), tunnels: make(map[*websocket.Conn]struct{})}
	h.mux.HandleFunc("/{$}", h.serveHello)
	h.mux.HandleFunc("/slow", h.serveSlow)
	h.mux.HandleFunc("/bytes", h.serveBytes)
	h.mux.Handle("/ws", websocket.Server{Handler: h.echo, Handshake: acceptAnyOrigin})
	return h, nil
}

// ServeHTTP waits [Config.Delay], then serves the request's path.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.requests.Add(1)
	h.inFlight.Add(1)
	defer h.inFlight.Add(-1)
	if h.cfg.Delay > 0 && !sleep(r.Context(), h.cfg.Delay) {
		return
	}
	if r.URL.Path == "/ws" {
		if _, ok := w.(http.Hijacker); !ok {
			// x/net/websocket panics when it cannot hijack (HTTP/2).
			http.Error(w, "websocket needs HTTP/1.1", http.StatusHTTPVersionNotSupported)
			return
		}
	}
	h.mux.ServeHTTP(w, r)
}

// Requests reports how many requests ServeHTTP has started, on any path.
func (h *Handler) Requests() uint64 { return h.requests.Load() }

// InFlight reports how many requests are being served now, WebSocket echoes
// included until they close.
func (h *Handler) InFlight() int { return int(h.inFlight.Load()) }

func (h *Handler) serveHello(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(len(HelloBody)))
	_, _ = w.Write([]byte(HelloBody))
}

func (h *Handler) serveSlow(w http.ResponseWriter, r *http.Request) {
	ms, err := boundedParam(r, "ms", h.cfg.MaxSlow.Milliseconds())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if !sleep(r.Context(), time.Duration(ms)*time.Millisecond) {
		return
	}
	_, _ = fmt.Fprintf(w, "slept %d ms\n", ms)
}

// pattern is what /bytes repeats; one shared read-only buffer serves every request.
var pattern = func() []byte {
	b := make([]byte, 32<<10)
	for i := range b {
		b[i] = 'a' + byte(i%26)
	}
	return b
}()

func (h *Handler) serveBytes(w http.ResponseWriter, r *http.Request) {
	n, err := boundedParam(r, "n", h.cfg.MaxBytes)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
	for n > 0 {
		chunk := pattern[:min(n, int64(len(pattern)))]
		if _, err := w.Write(chunk); err != nil {
			return // the client went away
		}
		n -= int64(len(chunk))
	}
}

// boundedParam parses query parameter name as an integer in [0, max].
func boundedParam(r *http.Request, name string, max int64) (int64, error) {
	raw := r.URL.Query().Get(name)
	if raw == "" {
		return 0, fmt.Errorf("backend: missing query parameter %q", name)
	}
	v, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || v < 0 || v > max {
		return 0, fmt.Errorf("backend: %s must be an integer in [0, %d], got %q", name, max, raw)
	}
	return v, nil
}

func acceptAnyOrigin(*websocket.Config, *http.Request) error { return nil }

// echo sends every WebSocket frame back until either side closes.
func (h *Handler) echo(ws *websocket.Conn) {
	if !h.track(ws) {
		return
	}
	defer h.untrack(ws)
	buf := make([]byte, 4096)
	for {
		n, err := ws.Read(buf)
		if err != nil {
			return
		}
		if _, err := ws.Write(buf[:n]); err != nil {
			return
		}
	}
}

func (h *Handler) track(ws *websocket.Conn) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	h.tunnels[ws] = struct{}{}
	return true
}

func (h *Handler) untrack(ws *websocket.Conn) {
	h.mu.Lock()
	delete(h.tunnels, ws)
	h.mu.Unlock()
}

// closeTunnels closes every open WebSocket and refuses new ones.
func (h *Handler) closeTunnels() {
	h.mu.Lock()
	h.closed = true
	open := make([]*websocket.Conn, 0, len(h.tunnels))
	for ws := range h.tunnels {
		open = append(open, ws)
	}
	h.mu.Unlock()
	for _, ws := range open {
		_ = ws.Close()
	}
}

// sleep waits d or until ctx ends, and reports whether the whole wait passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
