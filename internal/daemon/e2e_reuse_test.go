package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/backend/misbehave"
	"github.com/seed-a07d1050/portcullis/internal/daemon"
)

// startDaemonBefore starts a daemon from text with {{backend}} replaced by
// url, and checks after the test that it holds nothing (no connection,
// permit or waiter).
func startDaemonBefore(t *testing.T, text, url string) *testDaemon {
	t.Helper()
	cfg := parseConfig(t, text, url)
	srv, err := daemon.Start(cfg, daemon.Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	checkServers(t, srv, cfg)
	d := &testDaemon{t: t, srv: srv}
	t.Cleanup(func() {
		if !t.Failed() {
			d.checkIdle()
		}
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return d
}

const reuseConfig = `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    routes:
      - upstreams: ["{{backend}}"]
        limit: {permits: 64}
`

// ask sends method target from c and checks the answer: its own, or, under
// a fault that cuts answers short, an error. It reports whether it got an
// error.
func ask(t *testing.T, d *testDaemon, c *http.Client, fault misbehave.Fault, method, target string) (failed bool) {
	req, err := http.NewRequest(method, d.url("web", target), nil)
	if err != nil {
		t.Error(err)
		return true
	}
	resp, err := c.Do(req)
	switch {
	case err != nil:
	case resp.Header.Get(misbehave.AnswerHeader) == "" && resp.StatusCode == http.StatusBadGateway:
		// The daemon's own answer to a failed exchange.
		resp.Body.Close()
		err = errors.New("502 from the daemon")
	default:
		err = misbehave.CheckAnswer(resp, method, target)
	}
	switch {
	case err == nil:
		return false
	case errors.Is(err, misbehave.ErrWrongAnswer):
		t.Errorf("%s %s: %v", method, target, err)
	case fault != misbehave.EarlyClose:
		t.Errorf("%s %s under %s: %v", method, target, fault, err)
	}
	return true
}

// TestEachClientGetsItsOwnResponse puts the daemon in front of a backend
// that misbehaves in each way the test backend knows (late bytes after a
// response, after HEAD, after 204 and 304, an idle 408 and close, an idle
// close or reset, two responses in one packet, an early close, a head
// split across reads, a chunked body followed by a stray response), and
// sends requests from distinct client addresses 127.0.0.X: first one at a
// time, releasing the backend's late bytes between them, then twelve at a
// time, in rounds. Each client must get the answer to its own request, or,
// where the backend cut the answer short, an error.
func TestEachClientGetsItsOwnResponse(t *testing.T) { bothServers(t, testEachClientGetsItsOwnResponse) }

func testEachClientGetsItsOwnResponse(t *testing.T) {
	for _, fault := range misbehave.Faults {
		t.Run(fault.String(), func(t *testing.T) {
			srv, err := misbehave.Start("127.0.0.1:0", misbehave.Config{Fault: fault})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { srv.Close() })
			d := startDaemonBefore(t, reuseConfig, srv.URL())

			// A reset cannot be awaited from here, and one that reaches the
			// daemon's connection after its check fails the request: only
			// replayable requests are sent again. So under IdleReset, only
			// GET and HEAD.
			methods := []string{"GET", "HEAD", "POST", "DELETE"}
			if fault == misbehave.IdleReset {
				methods = methods[:2]
			}
			// One client at a time.
			errs := 0
			for i := range 8 {
				method := methods[i%len(methods)]
				c := d.client(fmt.Sprintf("127.0.0.%d", 10+i))
				if ask(t, d, c, fault, method, fmt.Sprintf("/client-%d/one", i)) {
					errs++
				}
				srv.Release()
			}
			if fault != misbehave.EarlyClose && errs != 0 {
				t.Fatalf("%d requests failed", errs)
			}

			// Twelve clients at a time.
			for round := range 4 {
				var wg sync.WaitGroup
				for i := range 12 {
					c := d.client(fmt.Sprintf("127.0.0.%d", 30+i))
					wg.Add(1)
					go func() {
						defer wg.Done()
						method := methods[i%len(methods)]
						ask(t, d, c, fault, method, fmt.Sprintf("/client-%d/round-%d", i, round))
					}()
				}
				wg.Wait()
				srv.Release()
			}

			// No request reaches the backend twice. Under EarlyClose a
			// request can meet a connection the backend is closing after a
			// HEAD (whose answer left it idle before the close arrived): a
			// GET or HEAD is then sent again, anything else fails with 502,
			// and neither reached the backend on that connection. A reset
			// that arrives after the check does the same.
			const sent = 8 + 4*12
			got := srv.Requests()
			if got > sent || got < sent && fault != misbehave.EarlyClose && fault != misbehave.IdleReset {
				t.Fatalf("the backend read %d requests, want %d", got, sent)
			}
		})
	}
}

// TestIssue12Reproduction is the report's case through the daemon: the
// backend answers GET /a, then 300 ms later writes a second complete
// response on the idle connection. Clients from other addresses, before
// and after, get their own answers.
func TestIssue12Reproduction(t *testing.T) { bothServers(t, testIssue12Reproduction) }

func testIssue12Reproduction(t *testing.T) {
	srv, err := misbehave.Start("127.0.0.1:0", misbehave.Config{Fault: misbehave.LateResponse, LateAfter: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	d := startDaemonBefore(t, reuseConfig, srv.URL())
	ask(t, d, d.client("127.0.0.2"), misbehave.None, "GET", "/a")
	ask(t, d, d.client("127.0.0.3"), misbehave.None, "GET", "/b") // before the late bytes
	// Once the late responses were written, the daemon's connection has
	// them: every later request, from anyone, on any path, gets its own.
	d.waitFor("the late responses", func() bool { return srv.Pending() == 0 })
	for i := range 5 {
		ask(t, d, d.client(fmt.Sprintf("127.0.0.%d", 4+i)), misbehave.None, "GET", fmt.Sprintf("/after-%d", i))
	}
}
