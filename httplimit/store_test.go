package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"

	"github.com/seed-a07d1050/portcullis/httplimit"
	"github.com/seed-a07d1050/portcullis/limit"
)

// recordingStore admits everything and records the keys it sees.
type recordingStore struct {
	mu  sync.Mutex
	log []string
}

var _ limit.Store[string] = (*recordingStore)(nil)

func (s *recordingStore) record(op, key string) {
	s.mu.Lock()
	s.log = append(s.log, op+" "+key)
	s.mu.Unlock()
}

func (s *recordingStore) Acquire(_ context.Context, key string, _, _ int) (bool, error) {
	s.record("acquire", key)
	return true, nil
}

func (s *recordingStore) TryAcquire(key string, _, _ int) (bool, error) {
	s.record("acquire", key)
	return true, nil
}

func (s *recordingStore) Release(key string) { s.record("release", key) }

// TestStoreKeepsTunnelsApart checks that, with separate tunnel permits,
// tunnels are counted in the shared Store under their own keys. A tunnel
// request also holds an exchange permit until it is established; this one
// never is (the handler answers nothing), so both come back at its end.
func TestStoreKeepsTunnelsApart(t *testing.T) {
	store := &recordingStore{}
	l := newLimiter(t, httplimit.Config{Store: store, TunnelPermits: 2})
	h := l.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for _, method := range []string{http.MethodGet, http.MethodConnect} {
		r := httptest.NewRequest(method, "/", nil)
		r.RemoteAddr = "192.0.2.7:1234"
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	want := []string{"acquire 192.0.2.7", "release 192.0.2.7",
		"acquire 192.0.2.7", "acquire tunnel:192.0.2.7", "release 192.0.2.7", "release tunnel:192.0.2.7"}
	if !slices.Equal(store.log, want) {
		t.Errorf("store saw %q, want %q", store.log, want)
	}
	expectIdle(t, l)
}

func TestWrapNilIsNotFound(t *testing.T) {
	l := newLimiter(t, httplimit.Config{})
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	l.Wrap(nil).ServeHTTP(w, r)
	if w.Code != http.StatusNotFound {
		t.Errorf("status %d, want 404", w.Code)
	}
}
