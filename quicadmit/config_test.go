package quicadmit

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/seed-a07d1050/portcullis/internal/doctest"
)

// TestConfigFieldsDocumented fails when a Config field has no doc comment
// in config.go or does not say what its zero (or nil) value means.
func TestConfigFieldsDocumented(t *testing.T) {
	doctest.ZeroValuesDocumented(t, "config.go", reflect.TypeFor[Config]())
}

// recordHandler keeps the messages of the records it handles.
type recordHandler struct {
	mu   sync.Mutex
	msgs []string
}

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *recordHandler) WithGroup(string) slog.Handler            { return h }
func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.msgs = append(h.msgs, r.Level.String()+" "+r.Message)
	return nil
}

func (h *recordHandler) count(prefix string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, m := range h.msgs {
		if strings.HasPrefix(m, prefix) {
			n++
		}
	}
	return n
}

func TestLogsAreThrottled(t *testing.T) {
	h := &recordHandler{}
	d := newHookDriver(t, Config{MaxInProgress: 1, Logger: slog.New(h), LogLevel: slog.LevelWarn})
	d.admit(false)
	for range 1000 {
		if _, err := d.c.ConnContext(context.Background(), &quic.ClientInfo{RemoteAddr: testAddr}); err == nil {
			t.Fatal("admitted over the maximum")
		}
	}
	if n := h.count("WARN quicadmit: refusing"); n != 1 {
		t.Fatalf("%d refusal logs for a burst within a second, want 1", n)
	}
	d.clock.Advance(time.Second)
	_, _ = d.c.ConnContext(context.Background(), &quic.ClientInfo{RemoteAddr: testAddr})
	if n := h.count("WARN quicadmit: refusing"); n != 2 {
		t.Fatalf("%d refusal logs a second later, want 2", n)
	}
	if s := d.c.Snapshot(); s.Refused != 1001 {
		t.Fatalf("Refused %d: throttling must not drop counts", s.Refused)
	}
}

func TestRetryChangesLogged(t *testing.T) {
	h := &recordHandler{}
	d := newHookDriver(t, Config{RetryThresholdMin: 1, RetryThresholdMax: 1, Logger: slog.New(h)})
	d.arrive()
	if n := h.count("INFO quicadmit: Retry on"); n != 1 {
		t.Fatalf("%d Retry-on logs, want 1", n)
	}
	d.clock.Advance(time.Second)
	d.finish()
	if n := h.count("INFO quicadmit: Retry off"); n != 1 {
		t.Fatalf("%d Retry-off logs, want 1", n)
	}
}

// A refusal logged as JSON names the client's address as a string, not as
// the fields of a *net.UDPAddr.
func TestRefusalLogJSONAddress(t *testing.T) {
	var buf bytes.Buffer
	d := newHookDriver(t, Config{MaxInProgress: 1, Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
	d.admit(false)
	if _, err := d.c.ConnContext(context.Background(), &quic.ClientInfo{RemoteAddr: testAddr}); err == nil {
		t.Fatal("admitted over the maximum")
	}
	lines := bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n"))
	var line map[string]any
	if err := json.Unmarshal(lines[len(lines)-1], &line); err != nil {
		t.Fatalf("log %q: %v", buf.String(), err)
	}
	if !strings.HasPrefix(line["msg"].(string), "quicadmit: refusing") {
		t.Fatalf("last line %v is no refusal", line)
	}
	if got := line["remote"]; got != testAddr.String() {
		t.Fatalf("remote = %#v, want %q", got, testAddr.String())
	}
}
