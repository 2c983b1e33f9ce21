package floorproxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/seed-a07d1050/portcullis/internal/waitfor"
	"github.com/seed-a07d1050/portcullis/limit"
)

// admittingServers are the two admitting floors: on Go's poller, and on
// epoll loops of their own (Linux only).
var admittingServers = []struct {
	name  string
	serve func(t *testing.T, ln net.Listener, upstream string, a *Admission)
}{
	{"goroutines", func(t *testing.T, ln net.Listener, upstream string, a *Admission) {
		done := make(chan struct{})
		go func() { _ = ServeAdmitting(ln, upstream, a); close(done) }()
		t.Cleanup(func() { ln.Close(); <-done })
	}},
	{"epoll", func(t *testing.T, ln net.Listener, upstream string, a *Admission) {
		stop, err := ServeEpollAdmitting(ln, upstream, 2, a)
		if errors.Is(err, errors.ErrUnsupported) {
			t.Skip(err)
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(stop)
	}},
}

// startAdmitter starts one admitting floor with permits per limiter in front
// of a backend answering after delay (see startAdmitting).
type startAdmitter func(permits int, delay time.Duration) (string, *Admission)

// forEachAdmitting runs test against each admitting floor.
func forEachAdmitting(t *testing.T, test func(t *testing.T, start startAdmitter)) {
	for _, srv := range admittingServers {
		t.Run(srv.name, func(t *testing.T) {
			test(t, func(permits int, delay time.Duration) (string, *Admission) {
				return startAdmitting(t, permits, delay, srv.serve)
			})
		})
	}
}

// startAdmitting serves an admitting floor with two limiters of permits
// each in front of a backend that answers after delay, and returns its
// address and admission.
func startAdmitting(t *testing.T, permits int, delay time.Duration, serve func(*testing.T, net.Listener, string, *Admission)) (string, *Admission) {
	t.Helper()
	upstream, ln := startBackend(t, delay)
	a := &Admission{
		Host: "floor.test", PathPrefix: "/bytes",
		Requests: prometheus.NewCounter(prometheus.CounterOpts{Name: "requests_total"}),
		Duration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "duration_seconds"}),
		Upstream: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "upstream_seconds"}),
	}
	for range 2 {
		l, err := limit.New(limit.Config[string]{Policy: limit.Policy[string]{Permits: permits}})
		if err != nil {
			t.Fatal(err)
		}
		a.Limiters = append(a.Limiters, l)
	}
	serve(t, ln, upstream, a)
	return ln.Addr().String(), a
}

// TestAdmittingRelays: requests of the route on a kept-alive connection
// are answered, counted, and leave no permit held.
func TestAdmittingRelays(t *testing.T) {
	forEachAdmitting(t, testAdmittingRelays)
}

func testAdmittingRelays(t *testing.T, start startAdmitter) {
	addr, a := start(1, 0)
	getWhole(t, addr, "GET /bytes?n=100 HTTP/1.1\r\nHost: floor.test\r\nConnection: keep-alive\r\nAccept: */*\r\n\r\n", 3)
	// The count, like the permits' release, follows the answer's write:
	// the client may read the last answer first.
	if !waitfor.Until(5*time.Second, func() bool { return counted(t, a) == 3 }) {
		t.Fatalf("requests counted = %v, want 3", counted(t, a))
	}
	waitNoPermits(t, a)
}

func counted(t *testing.T, a *Admission) float64 {
	t.Helper()
	var m dto.Metric
	if err := a.Requests.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestAdmittingRefuses: what the model does not relay (another route,
// a body, a bad head, a client over its permits) closes the connection
// unanswered and leaves no permit held.
func TestAdmittingRefuses(t *testing.T) {
	forEachAdmitting(t, testAdmittingRefuses)
}

func testAdmittingRefuses(t *testing.T, start startAdmitter) {
	addr, a := start(1, 300*time.Millisecond)
	for _, req := range []string{
		"GET /other HTTP/1.1\r\nHost: floor.test\r\n\r\n",
		"GET /bytes?n=1 HTTP/1.1\r\nHost: other.test\r\n\r\n",
		"GET /bytes?n=1 HTTP/1.1\r\nHost: floor.test\r\nHost: floor.test\r\n\r\n",
		"GET /bytes?n=1 HTTP/1.0\r\nHost: floor.test\r\n\r\n",
		"POST /bytes HTTP/1.1\r\nHost: floor.test\r\nContent-Length: 0\r\n\r\n",
		"GET /bytes?n=1 HTTP/1.1\r\nHost: floor.test\r\nX: a\r\n b\r\n\r\n",
		"GET /bytes?n=1 HTTP/1.1\r\nHost : floor.test\r\n\r\n",
	} {
		expectClosed(t, addr, req)
	}
	// Over the limit: the first client holds the only permit of each
	// limiter while the backend waits.
	const req = "GET /bytes?n=1 HTTP/1.1\r\nHost: floor.test\r\n\r\n"
	first := dialFor(t, addr)
	defer first.Close()
	if _, err := io.WriteString(first, req); err != nil {
		t.Fatal(err)
	}
	waitHeld(t, a, len(a.Limiters))
	expectClosed(t, addr, req)
	resp, err := http.ReadResponse(bufio.NewReader(first), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("the first client: %v, %v", resp, err)
	}
	waitNoPermits(t, a)
}

// TestAdmittingReleasesOnReset: a client that resets its connection while
// its request is with the upstream leaves no permit held once the answer
// comes.
func TestAdmittingReleasesOnReset(t *testing.T) {
	forEachAdmitting(t, func(t *testing.T, start startAdmitter) {
		addr, a := start(1, 200*time.Millisecond)
		c := dialFor(t, addr)
		if _, err := io.WriteString(c, "GET /bytes?n=1 HTTP/1.1\r\nHost: floor.test\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		waitHeld(t, a, len(a.Limiters))
		_ = c.(*net.TCPConn).SetLinger(0)
		c.Close()
		waitNoPermits(t, a)
	})
}

func held(a *Admission) int {
	n := 0
	for _, l := range a.Limiters {
		n += l.Totals().InUse
	}
	return n
}

func waitHeld(t *testing.T, a *Admission, want int) {
	t.Helper()
	if !waitfor.Until(5*time.Second, func() bool { return held(a) == want }) {
		t.Fatalf("permits held = %d, want %d", held(a), want)
	}
}

func waitNoPermits(t *testing.T, a *Admission) { t.Helper(); waitHeld(t, a, 0) }
