package route

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-a07d1050/portcullis/httplimit"
	"github.com/seed-a07d1050/portcullis/internal/config"
)

// waitLimit bounds every wait of these tests.
const waitLimit = 10 * time.Second

// slowBackend is an upstream on loopback: /slow answers once release is
// closed, after telling arrived; any other path answers at once.
type slowBackend struct {
	url     string
	arrived chan struct{}
	release chan struct{}
}

func newSlowBackend(t *testing.T) *slowBackend {
	t.Helper()
	b := &slowBackend{arrived: make(chan struct{}, 16), release: make(chan struct{})}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			b.arrived <- struct{}{}
			select {
			case <-b.release:
			case <-r.Context().Done():
			}
		}
		_, _ = io.WriteString(w, "ok\n")
	}))
	t.Cleanup(srv.Close)
	b.url = srv.URL
	return b
}

// listenerOf returns the effective configuration of the one listener of
// yaml, with {{backend}} replaced by backend.
func listenerOf(t *testing.T, yaml, backend string) *config.Listener {
	t.Helper()
	cfg, err := config.Parse("test.yaml", []byte(strings.ReplaceAll(yaml, "{{backend}}", backend)))
	if err != nil {
		t.Fatal(err)
	}
	return &cfg.Effective().Listeners[0]
}

// serve serves h on a loopback socket and returns its URL.
func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// get sends a GET and returns the status, the Retry-After header and the body.
func get(t *testing.T, url string) (int, string, string) {
	t.Helper()
	code, retry, body, err := tryGet(url)
	if err != nil {
		t.Fatal(err)
	}
	return code, retry, body
}

// tryGet is get for a goroutine other than the test's: it returns the
// error instead of failing the test.
func tryGet(url string) (code int, retry, body string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Retry-After"), string(b), err
}

// getInBackground sends a GET on its own goroutine; the channel gives its
// status, or 0 when it failed.
func getInBackground(url string) <-chan int {
	out := make(chan int, 1)
	go func() {
		code, _, _, err := tryGet(url)
		if err != nil {
			code = 0
		}
		out <- code
	}()
	return out
}

// waitArrived waits for an exchange to reach the backend's /slow.
func waitArrived(t *testing.T, be *slowBackend) {
	t.Helper()
	select {
	case <-be.arrived:
	case <-time.After(waitLimit):
		t.Fatal("the exchange never reached the upstream")
	}
}

// receive returns what ch gives, failing the test after waitLimit.
func receive(t *testing.T, ch <-chan int) int {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitLimit):
		t.Fatal("the exchange never ended")
		return 0
	}
}

// waitFor polls cond until it holds, failing the test after waitLimit.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// routeLimiter returns the limiter of t's first route.
func routeLimiter(t *testing.T, tb *Table) *httplimit.Limiter {
	t.Helper()
	at := tb.Admin(Serving{})
	if len(at.Routes) == 0 || at.Routes[0].Limit == nil {
		t.Fatalf("the table's first route has no limit: %+v", at)
	}
	return at.Routes[0].Limit.Limiter
}

const limitedListener = `
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    routes:
      - name: r
        upstreams: ["{{backend}}"]
        limit: {permits: %d}
`

// TestTableRouteLimit serves a table whose route admits one exchange at a
// time: a second exchange of the same client is refused with the limit's
// 429 and Retry-After while the first runs, the first is relayed, and the
// permit comes back when it ends.
func TestTableRouteLimit(t *testing.T) {
	be := newSlowBackend(t)
	tb, err := Build(Config{Listener: listenerOf(t, fmt.Sprintf(limitedListener, 1), be.url)})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	url := serve(t, tb.Handler())
	lim := routeLimiter(t, tb)

	first := getInBackground(url + "/slow")
	waitArrived(t, be)
	if code, retry, body := get(t, url+"/fast"); code != http.StatusTooManyRequests || retry != "1" || body != "Too Many Requests\n" {
		t.Fatalf("second exchange: %d Retry-After %q %q, want 429 Retry-After 1", code, retry, body)
	}
	if tot := lim.Totals(); tot.InUse != 1 || tot.Refused != 1 {
		t.Fatalf("while the first runs: in use %d, refused %d; want 1, 1", tot.InUse, tot.Refused)
	}
	close(be.release)
	if code := receive(t, first); code != http.StatusOK {
		t.Fatalf("first exchange: %d, want 200", code)
	}
	waitFor(t, "the permit to come back", func() bool { return lim.Totals().InUse == 0 })
	if code, _, body := get(t, url+"/fast"); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("after the first ended: %d %q, want 200", code, body)
	}
	if tot := lim.Totals(); tot.InUse != 0 || tot.Granted != 2 {
		t.Fatalf("at the end: in use %d, granted %d; want 0, 2", tot.InUse, tot.Granted)
	}
}

// TestTableRetire builds a table's successor twice: from the same
// settings it keeps the old limiter, from others it makes a new one, and
// retiring the old table closes its limiter only once the exchange
// holding a permit has ended; the retired limiter then refuses with 503.
func TestTableRetire(t *testing.T) {
	be := newSlowBackend(t)
	t1, err := Build(Config{Listener: listenerOf(t, fmt.Sprintf(limitedListener, 1), be.url)})
	if err != nil {
		t.Fatal(err)
	}
	t2, err := Build(Config{Listener: listenerOf(t, fmt.Sprintf(limitedListener, 1), be.url), Old: t1})
	if err != nil {
		t.Fatal(err)
	}
	if routeLimiter(t, t2) != routeLimiter(t, t1) {
		t.Fatal("a table built from the same settings did not keep the old limiter")
	}
	t3, err := Build(Config{Listener: listenerOf(t, fmt.Sprintf(limitedListener, 2), be.url), Old: t2})
	if err != nil {
		t.Fatal(err)
	}
	defer t3.Close()
	if routeLimiter(t, t3) == routeLimiter(t, t2) {
		t.Fatal("a table built from other settings kept the old limiter")
	}

	oldURL, newURL := serve(t, t2.Handler()), serve(t, t3.Handler())
	held := getInBackground(oldURL + "/slow")
	waitArrived(t, be)

	var group sync.WaitGroup
	stop, cancel := context.WithCancel(context.Background())
	defer cancel()
	t2.Retire(t3, Background{Group: &group, Stop: stop})
	retired := make(chan struct{})
	go func() { group.Wait(); close(retired) }()
	select {
	case <-retired:
		t.Fatal("the old limiter was closed while an exchange held its permit")
	default:
	}
	if code, _, _ := get(t, newURL+"/fast"); code != http.StatusOK {
		t.Fatalf("the new table: %d, want 200", code)
	}
	close(be.release)
	if code := receive(t, held); code != http.StatusOK {
		t.Fatalf("the exchange on the old table: %d, want 200", code)
	}
	select {
	case <-retired:
	case <-time.After(waitLimit):
		t.Fatal("the old limiter was not closed once its last permit came back")
	}
	if code, _, _ := get(t, oldURL+"/fast"); code != http.StatusServiceUnavailable {
		t.Fatalf("the retired limiter: %d, want 503", code)
	}
	if tot := routeLimiter(t, t2).Totals(); tot.InUse != 0 {
		t.Fatalf("the retired limiter holds %d permits, want 0", tot.InUse)
	}
}

// errStoreDown is the failure of failingStores.
var errStoreDown = errors.New("store down")

// failingStores gives the client limit a working Store and fails the
// Store of any other limit, for the failure path of Build.
type failingStores struct{ client *countingStore }

func (s failingStores) LimitStore(name string, _ prometheus.Labels) (LimitStore, error) {
	if name == "web/client_limit" {
		return s.client, nil
	}
	return nil, fmt.Errorf("cluster store %s: %w", name, errStoreDown)
}

func (failingStores) RateStore(string, prometheus.Labels) (RateStore, error) {
	return nil, errStoreDown
}

// countingStore admits everything in this process and counts its Closes.
type countingStore struct{ closed atomic.Int32 }

func (*countingStore) Acquire(context.Context, string, int, int) (bool, error) { return true, nil }
func (*countingStore) TryAcquire(string, int, int) (bool, error)               { return true, nil }
func (*countingStore) Release(string)                                          {}
func (s *countingStore) Close() error                                          { s.closed.Add(1); return nil }
func (*countingStore) Collector() prometheus.Collector {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: "test_store_calls_total", Help: "None."})
}

// TestBuildFailureLeavesNothingOpen fails a table's build at its route
// limit's Store: Build returns the Store's error, and the client limit it
// had built already is closed with its Store, once.
func TestBuildFailureLeavesNothingOpen(t *testing.T) {
	lc := listenerOf(t, `
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    client_limit: {permits: 4}
    routes:
      - name: r
        upstreams: ["http://127.0.0.1:1"]
        limit: {permits: 1}
`, "")
	stores := failingStores{client: new(countingStore)}
	tb, err := Build(Config{Listener: lc, Stores: stores})
	if !errors.Is(err, errStoreDown) || tb != nil {
		t.Fatalf("Build: %v, %v; want the Store's error and no table", tb, err)
	}
	if n := stores.client.closed.Load(); n != 1 {
		t.Fatalf("the client limit's Store was closed %d times, want 1", n)
	}
	if _, err := Build(Config{}); err == nil || !strings.HasPrefix(err.Error(), "route: ") {
		t.Fatalf("Build without a listener: %v, want a route: error", err)
	}
}

// BenchmarkPick measures picking a request's route among a few.
func BenchmarkPick(b *testing.B) {
	routes := []*route{
		{name: "root", prefix: "/"},
		{name: "api", prefix: "/api"},
		{name: "static", prefix: "/static/", hosts: []hostPattern{parseHostPattern("www.example.com")}},
	}
	req := httptest.NewRequest(http.MethodGet, "http://www.example.com/api/users", nil)
	b.ReportAllocs()
	for b.Loop() {
		if pickRequest(routes, req) == nil {
			b.Fatal("no route")
		}
	}
}
