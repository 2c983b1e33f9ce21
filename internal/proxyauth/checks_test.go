package proxyauth

import (
	"encoding/base64"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/seed-a07d1050/portcullis/clientkey"
)

// These tests hold a check inside bcrypt with the test hooks, so that what
// happens to the requests arriving meanwhile does not depend on how fast
// bcrypt runs on a loaded machine.

func hookedAuth(t *testing.T, cfg Config) *Authenticator {
	t.Helper()
	h, err := bcrypt.GenerateFromPassword([]byte("alice-pw"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	cfg.File = filepath.Join(t.TempDir(), "users")
	if err := os.WriteFile(cfg.File, []byte("alice:"+string(h)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Logger = slog.New(slog.DiscardHandler)
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		a.Close()
		testHookCheck, testHookBcrypt = nil, nil
	})
	return a
}

// Requests with the same uncached credentials arriving together share one
// bcrypt run, even with bcrypt slots to spare: six clients sending alice's
// credentials while her check runs cost one check, not six.
func TestSameCredentialsShareOneCheck(t *testing.T) {
	// In a bubble, synctest.Wait returns once every request is blocked:
	// one in bcrypt (on release), the others waiting on its shared run,
	// where a sleep could only guess that the last one had joined it.
	synctest.Test(t, func(t *testing.T) {
		a := hookedAuth(t, Config{MaxConcurrentChecks: 8, CheckTimeout: time.Minute})
		var entered atomic.Int32
		release := make(chan struct{})
		testHookCheck = func() { entered.Add(1) }
		testHookBcrypt = func() { <-release }

		var wg sync.WaitGroup
		errs := make(chan error, 6)
		for i := range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				client := clientkey.FromAddr(netip.AddrFrom4([4]byte{192, 0, 2, byte(i + 1)}))
				errs <- a.Verify(t.Context(), client, "alice", "alice-pw")
			}()
		}
		synctest.Wait()
		if n := entered.Load(); n != 6 {
			t.Fatalf("%d of 6 requests reached the check", n)
		}
		close(release)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
		}
		if st := a.Stats(); st.Checks != 1 {
			t.Fatalf("%d bcrypt checks for six requests with one credential", st.Checks)
		}
	})
}

// MaxConcurrentChecks bounds bcrypt over all clients: while a check runs,
// another client's uncached check waits CheckTimeout and gets 503 with
// Retry-After: 1, not counted as a failure; cached credentials pass.
func TestConcurrentChecksBounded(t *testing.T) {
	a := hookedAuth(t, Config{MaxConcurrentChecks: 1, CheckTimeout: 20 * time.Millisecond})
	// alice's credentials are cached before the slot is taken.
	cached := clientkey.FromAddr(netip.MustParseAddr("192.0.2.9"))
	if err := a.Verify(t.Context(), cached, "alice", "alice-pw"); err != nil {
		t.Fatal(err)
	}
	inBcrypt, release := make(chan struct{}), make(chan struct{})
	testHookBcrypt = func() { close(inBcrypt); <-release }
	srv := httptest.NewServer(a.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	defer srv.Close()

	first := make(chan error, 1)
	go func() {
		first <- a.Verify(t.Context(), clientkey.FromAddr(netip.MustParseAddr("192.0.2.1")), "alice", "wrong")
	}()
	<-inBcrypt
	req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	req.Header.Set("Proxy-Authorization", "Basic "+b64("alice:another-guess"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("a check while the only slot is busy: %d %v", resp.StatusCode, resp.Header)
	}
	if err := a.Verify(t.Context(), cached, "alice", "alice-pw"); err != nil {
		t.Fatalf("cached credentials while the slot is busy: %v", err)
	}
	close(release)
	if err := <-first; !errors.Is(err, ErrBadCredentials) {
		t.Fatalf("first check: %v", err)
	}
	if st := a.Stats(); st.Busy != 1 || st.Failed != 1 || st.Checks != 2 {
		t.Fatalf("stats %+v: want one busy refusal, not counted as a failure", st)
	}
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
