package proxyauth_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/seed-a07d1050/portcullis/internal/proxyauth"
)

const waitLimit = 10 * time.Second

// writeUsers writes an htpasswd file of user:password pairs hashed at cost
// and returns its path.
func writeUsers(t testing.TB, dir string, cost int, pairs ...string) string {
	t.Helper()
	var b strings.Builder
	for i := 0; i+1 < len(pairs); i += 2 {
		h, err := bcrypt.GenerateFromPassword([]byte(pairs[i+1]), cost)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s:$2y$%s\n", pairs[i], h[4:])
	}
	path := filepath.Join(dir, "users.htpasswd")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func newAuth(t testing.TB, cfg proxyauth.Config) *proxyauth.Authenticator {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	a, err := proxyauth.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

// echoUser answers with the verified user and whether any credentials
// header reached it.
var echoUser = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	fmt.Fprintf(w, "user=%s proxy-authorization=%q authorization=%q",
		proxyauth.UserOf(r), r.Header.Get("Proxy-Authorization"), r.Header.Get("Authorization"))
})

func serve(t testing.TB, h http.Handler) string {
	t.Helper()
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return ts.URL
}

// clientFrom returns a keep-alive client whose connections come from ip.
func clientFrom(t testing.TB, ip string) *http.Client {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: waitLimit}
	tr := &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 16}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: waitLimit}
}

type answer struct {
	status int
	header http.Header
	body   string
}

func get(t testing.TB, c *http.Client, url, header, value string) answer {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if header != "" {
		req.Header.Set(header, value)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, string(body)}
}

func basic(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

func TestProxyChallenge(t *testing.T) {
	file := writeUsers(t, t.TempDir(), bcrypt.MinCost, "alice", "alice-pw", "bob", "bob-pw")
	a := newAuth(t, proxyauth.Config{File: file, Realm: "egress"})
	url := serve(t, a.Wrap(echoUser))
	c := clientFrom(t, "127.0.0.2")

	for _, tc := range []struct {
		name, value string
	}{
		{"no credentials", ""},
		{"wrong password", basic("alice", "nope")},
		{"unknown user", basic("mallory", "alice-pw")},
		{"malformed", "Basic !!"},
		{"other scheme", "Bearer xyz"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			header := "Proxy-Authorization"
			if tc.value == "" {
				header = ""
			}
			got := get(t, c, url, header, tc.value)
			if got.status != http.StatusProxyAuthRequired {
				t.Fatalf("status %d, want 407", got.status)
			}
			if ch := got.header.Get("Proxy-Authenticate"); ch != `Basic realm="egress", charset="UTF-8"` {
				t.Errorf("Proxy-Authenticate %q", ch)
			}
			if strings.Contains(got.body, "user=") {
				t.Error("the handler ran")
			}
		})
	}
	// A client claiming a user in Authorization is not authenticated by it.
	if got := get(t, c, url, "Authorization", basic("alice", "alice-pw")); got.status != http.StatusProxyAuthRequired {
		t.Errorf("Authorization taken for proxy credentials: %d", got.status)
	}

	got := get(t, c, url, "Proxy-Authorization", basic("alice", "alice-pw"))
	if got.status != http.StatusOK || got.body != `user=alice proxy-authorization="" authorization=""` {
		t.Fatalf("right credentials: %d %q", got.status, got.body)
	}
	st := a.Stats()
	// Four refusals with credentials were failures; the request without
	// any and the one with Authorization only were not.
	if st.Failed != 4 || st.Challenged != 6 || st.NoCredentials != 2 || st.Accepted != 1 || st.Verified != 1 || st.Users != 2 {
		t.Errorf("stats %+v", st)
	}
}

func TestOriginChallenge(t *testing.T) {
	file := writeUsers(t, t.TempDir(), bcrypt.MinCost, "alice", "alice-pw")
	a := newAuth(t, proxyauth.Config{File: file, Challenge: proxyauth.ChallengeOrigin})
	url := serve(t, a.Wrap(echoUser))
	c := clientFrom(t, "127.0.0.2")
	got := get(t, c, url, "Authorization", basic("alice", "wrong"))
	if got.status != http.StatusUnauthorized || got.header.Get("WWW-Authenticate") != `Basic realm="portcullis", charset="UTF-8"` {
		t.Fatalf("wrong password: %d %v", got.status, got.header)
	}
	got = get(t, c, url, "Authorization", basic("alice", "alice-pw"))
	if got.status != http.StatusOK || got.body != `user=alice proxy-authorization="" authorization=""` {
		t.Fatalf("right credentials: %d %q", got.status, got.body)
	}
}

// A keep-alive client sending the same credentials pays bcrypt once.
func TestCachePaysBcryptOnce(t *testing.T) {
	file := writeUsers(t, t.TempDir(), bcrypt.MinCost, "alice", "alice-pw")
	a := newAuth(t, proxyauth.Config{File: file})
	url := serve(t, a.Wrap(echoUser))
	c := clientFrom(t, "127.0.0.2")
	for range 20 {
		if got := get(t, c, url, "Proxy-Authorization", basic("alice", "alice-pw")); got.status != http.StatusOK {
			t.Fatalf("status %d", got.status)
		}
	}
	st := a.Stats()
	if st.Checks != 1 || st.CacheHits != 19 || st.Verified != 1 || st.Cached != 1 {
		t.Fatalf("stats %+v, want 1 check, 1 verified and 19 cache hits", st)
	}
	// A wrong password is never cached: each costs a check.
	for range 3 {
		get(t, c, url, "Proxy-Authorization", basic("alice", "wrong"))
	}
	if st := a.Stats(); st.Checks != 4 {
		t.Fatalf("checks %d after three wrong passwords, want 4", st.Checks)
	}
}

// An unknown user is checked by bcrypt (against a stand-in hash) exactly as
// a wrong password is, so the two cannot be told apart by time.
func TestUnknownUserCostsACheck(t *testing.T) {
	file := writeUsers(t, t.TempDir(), bcrypt.MinCost, "alice", "alice-pw")
	a := newAuth(t, proxyauth.Config{File: file})
	ctx := t.Context()
	for i, user := range []string{"alice", "nobody"} {
		err := a.Verify(ctx, keyOf("192.0.2.1"), user, "wrong")
		if !errors.Is(err, proxyauth.ErrBadCredentials) {
			t.Fatalf("%s: %v", user, err)
		}
		if st := a.Stats(); st.Checks != uint64(i+1) {
			t.Fatalf("%s: %d checks, want %d", user, st.Checks, i+1)
		}
	}
}

func TestFailureBudgetRefusesWithoutCheck(t *testing.T) {
	file := writeUsers(t, t.TempDir(), bcrypt.MinCost, "alice", "alice-pw")
	fl, err := proxyauth.NewFailureLimiter(proxyauth.FailureConfig{Burst: 3, Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	a := newAuth(t, proxyauth.Config{File: file, Failures: fl})
	url := serve(t, a.Wrap(echoUser))
	attacker, other := clientFrom(t, "127.0.0.2"), clientFrom(t, "127.0.0.3")
	for range 3 {
		if got := get(t, attacker, url, "Proxy-Authorization", basic("alice", "guess")); got.status != http.StatusProxyAuthRequired {
			t.Fatalf("guess: %d", got.status)
		}
	}
	checks := a.Stats().Checks
	for _, creds := range []string{basic("alice", "guess"), basic("alice", "alice-pw"), "Basic !!"} {
		got := get(t, attacker, url, "Proxy-Authorization", creds)
		if got.status != http.StatusTooManyRequests || got.header.Get("Retry-After") != "3600" {
			t.Fatalf("over budget: %d Retry-After %q", got.status, got.header.Get("Retry-After"))
		}
	}
	if st := a.Stats(); st.Checks != checks || st.OverBudget != 3 {
		t.Fatalf("over budget: stats %+v (checks before %d)", st, checks)
	}
	if got := get(t, other, url, "Proxy-Authorization", basic("alice", "alice-pw")); got.status != http.StatusOK {
		t.Fatalf("another client: %d", got.status)
	}
}

func TestReload(t *testing.T) {
	dir := t.TempDir()
	file := writeUsers(t, dir, bcrypt.MinCost, "alice", "alice-pw")
	a := newAuth(t, proxyauth.Config{File: file})
	url := serve(t, a.Wrap(echoUser))
	c := clientFrom(t, "127.0.0.2")
	ok := func(user, pass string, want int) {
		t.Helper()
		if got := get(t, c, url, "Proxy-Authorization", basic(user, pass)); got.status != want {
			t.Fatalf("%s: status %d, want %d", user, got.status, want)
		}
	}
	ok("alice", "alice-pw", http.StatusOK)

	// An unchanged file keeps the cache.
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	ok("alice", "alice-pw", http.StatusOK)
	if st := a.Stats(); st.Checks != 1 {
		t.Fatalf("unchanged reload dropped the cache: %d checks", st.Checks)
	}

	// A broken file is refused, naming the line; the old users stay.
	if err := os.WriteFile(file, []byte("alice:$apr1$x$y\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := a.Reload()
	if !errors.Is(err, proxyauth.ErrHtpasswd) || !strings.Contains(err.Error(), file+":1:") || !strings.Contains(err.Error(), "keeping the 1 users") {
		t.Fatalf("reload of a broken file: %v", err)
	}
	ok("alice", "alice-pw", http.StatusOK)

	// A new file takes effect and empties the cache: alice's cached
	// credentials no longer pass.
	writeUsers(t, dir, bcrypt.MinCost, "bob", "bob-pw")
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	ok("alice", "alice-pw", http.StatusProxyAuthRequired)
	ok("bob", "bob-pw", http.StatusOK)
	if st := a.Stats(); st.Reloads != 2 || st.ReloadErrors != 1 || st.Users != 1 {
		t.Fatalf("stats %+v", st)
	}

	// A missing file is refused too.
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if err := a.Reload(); err == nil {
		t.Fatal("reload of a missing file succeeded")
	}
	ok("bob", "bob-pw", http.StatusOK)
}

func TestConfigErrors(t *testing.T) {
	file := writeUsers(t, t.TempDir(), bcrypt.MinCost, "alice", "alice-pw")
	for _, tc := range []struct {
		cfg  proxyauth.Config
		want string
	}{
		{proxyauth.Config{}, "File is required"},
		{proxyauth.Config{File: file, Realm: `a"b`}, "Realm"},
		{proxyauth.Config{File: file, Challenge: 7}, "Challenge"},
		{proxyauth.Config{File: file, MaxConcurrentChecks: -1}, "MaxConcurrentChecks"},
		{proxyauth.Config{File: file, CheckTimeout: -1}, "CheckTimeout"},
		{proxyauth.Config{File: file + ".missing"}, "no such file"},
	} {
		_, err := proxyauth.New(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error about %s", tc.cfg, err, tc.want)
		}
	}
}

func TestWithUserAndUserOf(t *testing.T) {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("Authorization", basic("mallory", "x"))
	if u := proxyauth.UserOf(r); u != "" {
		t.Fatalf("UserOf read a claimed user %q", u)
	}
	r = r.WithContext(proxyauth.WithUser(context.Background(), "alice"))
	if u, ok := proxyauth.User(r.Context()); !ok || u != "alice" {
		t.Fatalf("User = %q, %v", u, ok)
	}
}

// TestPrepareReload checks the two halves of a reload: preparing reads the
// new file but changes nothing until the commit, and a prepared reload
// that is never committed leaves the Authenticator as it was.
func TestPrepareReload(t *testing.T) {
	dir := t.TempDir()
	file := writeUsers(t, dir, bcrypt.MinCost, "alice", "alice-pw")
	a := newAuth(t, proxyauth.Config{File: file})
	url := serve(t, a.Wrap(echoUser))
	c := clientFrom(t, "127.0.0.2")
	status := func(user, pass string) int {
		t.Helper()
		return get(t, c, url, "Proxy-Authorization", basic(user, pass)).status
	}
	writeUsers(t, dir, bcrypt.MinCost, "bob", "bob-pw")
	commit, err := a.PrepareReload()
	if err != nil {
		t.Fatal(err)
	}
	if st := status("alice", "alice-pw"); st != http.StatusOK {
		t.Fatalf("before the commit, alice: %d, want the old users in effect", st)
	}
	if st := status("bob", "bob-pw"); st != http.StatusProxyAuthRequired {
		t.Fatalf("before the commit, bob: %d, want 407", st)
	}
	commit()
	if st := status("bob", "bob-pw"); st != http.StatusOK {
		t.Fatalf("after the commit, bob: %d", st)
	}
	if st := status("alice", "alice-pw"); st != http.StatusProxyAuthRequired {
		t.Fatalf("after the commit, alice: %d, want 407", st)
	}

	// Prepared and dropped: nothing changes.
	writeUsers(t, dir, bcrypt.MinCost, "carol", "carol-pw")
	if _, err := a.PrepareReload(); err != nil {
		t.Fatal(err)
	}
	if st := status("bob", "bob-pw"); st != http.StatusOK {
		t.Fatalf("after a dropped reload, bob: %d", st)
	}

	// A broken file fails the prepare and is counted.
	if err := os.WriteFile(file, []byte("bob\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := a.PrepareReload(); !errors.Is(err, proxyauth.ErrHtpasswd) {
		t.Fatalf("prepare of a broken file: %v", err)
	}
	if st := a.Stats(); st.Reloads != 1 || st.ReloadErrors != 1 {
		t.Fatalf("stats %+v, want 1 reload and 1 error", st)
	}
	select {
	case <-a.Idle():
	case <-time.After(waitLimit):
		t.Fatal("an Authenticator checking nothing is not idle")
	}
}
