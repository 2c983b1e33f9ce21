package daemon_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/daemon"
	"github.com/seed-a07d1050/portcullis/internal/evloop"
)

// TestLoopPanicGivesEverythingBack makes the event loops' exchange panic
// once its permits are taken, and again as it is about to write its
// answer: the client's connection ends, every permit comes back, and the
// daemon goes on serving, on the loops, as the server does after a
// handler's panic.
func TestLoopPanicGivesEverythingBack(t *testing.T) {
	for _, tc := range []struct {
		step    string
		overTLS bool
	}{{"begin", false}, {"reply", false}, {"begin", true}, {"reply", true}} {
		step, name := tc.step, tc.step
		if tc.overTLS {
			name += "/https"
		}
		t.Run(name, func(t *testing.T) {
			var srv *daemon.Server
			restore := daemon.SetLoopPanicHook(func(s string, r *http.Request) {
				if s == step && r.URL.Path == "/boom" {
					panic("test: panic in the loop's " + s)
				}
			})
			defer restore()
			b := startRawBackend(t, map[string]string{
				"/boom": leanAnswers["/simple"], "/simple": leanAnswers["/simple"],
			})
			text := leanDiffConfig
			dial := func() net.Conn { return dialFrom(t, "127.0.0.2", srv.Addr("web").String()) }
			if tc.overTLS {
				certFile, keyFile := certFiles(t)
				text = onHTTPS(text, certFile, keyFile)
				dial = func() net.Conn { return tlsDial(t, "127.0.0.2", srv.Addr("web").String(), "http/1.1") }
			}
			cfg := parseConfig(t, text, "http://"+b.ln.Addr().String())
			cfg.Listeners[0].HTTP1Server = config.HTTP1ServerEventLoop
			srv = startQuiet(t, cfg)

			bad := dial()
			defer bad.Close()
			_ = bad.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.WriteString(bad, "GET /boom HTTP/1.1\r\nHost: app.test\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			if n, err := bad.Read(make([]byte, 1)); err == nil {
				t.Fatalf("the connection whose exchange panicked read %d bytes, want its end", n)
			}
			if !waitUntil(func() bool { return srv.Snapshot().InUse() == 0 }) {
				t.Fatalf("after the panic, held: %+v", srv.Snapshot())
			}

			good := dial()
			defer good.Close()
			_ = good.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.WriteString(good, "GET /simple HTTP/1.1\r\nHost: app.test\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(good), nil)
			if err != nil {
				t.Fatalf("a request after the panic: %v", err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("a request after the panic: status %d, want 200", resp.StatusCode)
			}
			good.Close()
			if !waitUntil(func() bool { return srv.Snapshot().InUse() == 0 }) {
				t.Errorf("at the end, held: %+v", srv.Snapshot())
			}
		})
	}
}

// TestLoopsTakeOnlyWhatTheyCanServe runs the default server (eventloop)
// on a listener whose only route the loops can serve, and on one whose
// only route has a rate that adds its RateLimit fields to every answer
// (which the lean path does not take): the
// first listener's loops take the connection and hold it after its
// answers; the second's never take one (which would only be given back
// at its first request), its server serving it from the start.
func TestLoopsTakeOnlyWhatTheyCanServe(t *testing.T) {
	if !evloop.Supported() {
		t.Skip("no event loops on this system: eventloop serves as lean")
	}
	cases := []struct {
		name  string
		route string
		held  int // and adopted
	}{
		{"plain route", "", 1},
		{"route whose rate adds fields to every answer", "        rate: {rate: 1000r/s, burst: 1000, headers: always}\n", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := startRawBackend(t, map[string]string{"/simple": leanAnswers["/simple"]})
			base := strings.Replace(leanDiffConfig, leanDiffRate, "", 1)
			cfg, err := config.Parse("test.yaml", []byte(strings.ReplaceAll(base+tc.route,
				"{{backend}}", "http://"+b.ln.Addr().String())))
			if err != nil {
				t.Fatal(err)
			}
			srv := startQuiet(t, cfg)
			if got := daemon.HTTP1ServerOf(srv, "web"); got != config.HTTP1ServerEventLoop {
				t.Fatalf("default HTTP/1.1 server %q, want eventloop", got)
			}
			c := dialFrom(t, "127.0.0.2", srv.Addr("web").String())
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			br := bufio.NewReader(c)
			for i := range 2 {
				if _, err := io.WriteString(c, "GET /simple HTTP/1.1\r\nHost: app.test\r\n\r\n"); err != nil {
					t.Fatal(err)
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("request %d: %v", i+1, err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("request %d: status %d, want 200", i+1, resp.StatusCode)
				}
			}
			if held, adopted := daemon.LoopConnsOf(srv, "web"); held != tc.held || adopted != uint64(tc.held) {
				t.Errorf("after the answers the loops hold %d connections and took %d, want %d and %d",
					held, adopted, tc.held, tc.held)
			}
			c.Close()
			loopsEmpty := func() bool { held, _ := daemon.LoopConnsOf(srv, "web"); return held == 0 }
			if !waitUntil(func() bool { return loopsEmpty() && srv.Snapshot().InUse() == 0 }) {
				t.Errorf("after the client left: loops empty %v, held %+v", loopsEmpty(), srv.Snapshot())
			}
		})
	}
}

// startQuiet starts cfg's daemon, its logs discarded, and shuts it down
// when t ends.
func startQuiet(t *testing.T, cfg *config.Config) *daemon.Server {
	t.Helper()
	srv, err := daemon.Start(cfg, daemon.Options{LogOutput: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return srv
}

// TestClientKeyOfEachRequestOnOneConnection sends several requests over
// one kept-alive connection and checks the key each one holds its
// client_limit permit under: a trusted proxy's requests each under the
// client its X-Forwarded-For names, an untrusted peer's all under the
// peer, whatever they claim. The loops remember a connection's key, but
// only a key found from the peer's address alone.
func TestClientKeyOfEachRequestOnOneConnection(t *testing.T) {
	bothServers(t, testClientKeyOfEachRequestOnOneConnection)
}

func testClientKeyOfEachRequestOnOneConnection(t *testing.T) {
	d := startDaemon(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    trusted_proxies: ["127.0.0.9/32"]
    client_limit: {permits: 4}
    routes:
      - name: r
        upstreams: ["{{backend}}"]
`)
	busy := func() []string {
		var keys []string
		for _, k := range d.listener("web").ClientLimit.Busy {
			keys = append(keys, k.Key)
		}
		return keys
	}
	for _, tc := range []struct {
		peer string
		xff  []string
		want []string // the key each request holds
	}{
		{"127.0.0.9", []string{"203.0.113.1", "203.0.113.2", "203.0.113.1"}, []string{"203.0.113.1", "203.0.113.2", "203.0.113.1"}},
		{"127.0.0.2", []string{"203.0.113.3", "203.0.113.4"}, []string{"127.0.0.2", "127.0.0.2"}},
	} {
		conn := dialFrom(t, tc.peer, d.srv.Addr("web").String())
		_ = conn.SetDeadline(time.Now().Add(2 * waitLimit))
		br := bufio.NewReader(conn)
		for i, xff := range tc.xff {
			req := "GET /slow?ms=300 HTTP/1.1\r\nHost: web.test\r\nX-Forwarded-For: " + xff + "\r\n\r\n"
			if _, err := conn.Write([]byte(req)); err != nil {
				t.Fatal(err)
			}
			want := tc.want[i]
			d.waitFor(tc.peer+"'s request "+strconv.Itoa(i)+" held under "+want, func() bool {
				keys := busy()
				return len(keys) == 1 && keys[0] == want
			})
			readKeptOK(t, br, tc.peer+", request "+strconv.Itoa(i))
		}
		conn.Close()
	}
	d.checkIdle()
}

// TestRepeatedHeadRelayedAsItself sends, over one kept-alive connection,
// the same request head again and again, different ones between, and the
// same after a reload of the routes: the backend must see each request as
// the head that came asks. The loops relay a repeated head's upstream head
// again rather than build it anew, but only for a byte-identical head
// within one table.
func TestRepeatedHeadRelayedAsItself(t *testing.T) {
	bothServers(t, testRepeatedHeadRelayedAsItself)
}

func testRepeatedHeadRelayedAsItself(t *testing.T) {
	config := func(extraRoute string) string {
		return `
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    trusted_proxies: ["127.0.0.9/32"]
    routes:` + extraRoute + `
      - name: r
        upstreams: ["{{backend}}"]
`
	}
	d := startDaemon(t, config(""))
	d.manualStop = true // no admin listener: the final check reads the snapshot in process
	conn := dialFrom(t, "127.0.0.9", d.srv.Addr("web").String())
	_ = conn.SetDeadline(time.Now().Add(2 * waitLimit))
	br := bufio.NewReader(conn)
	head := func(trace, xff string) string {
		return "GET /headers?q=" + trace + " HTTP/1.1\r\nHost: web.test\r\nX-Forwarded-For: " + xff + "\r\nX-Trace: " + trace + "\r\n\r\n"
	}
	relayed := func(step, trace, xff string) {
		t.Helper()
		if _, err := conn.Write([]byte(head(trace, xff))); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		defer resp.Body.Close()
		var got map[string]string
		if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %v", step, resp.StatusCode, err)
		}
		want := xff + ", 127.0.0.9" // a trusted proxy's X-Forwarded-For, with the proxy
		if got["X-Trace"] != trace || got["X-Forwarded-For"] != want || got["Host"] != "web.test" {
			t.Errorf("%s: the backend saw X-Trace %q, X-Forwarded-For %q, Host %q; want %q, %q, web.test",
				step, got["X-Trace"], got["X-Forwarded-For"], got["Host"], trace, want)
		}
	}
	for i := range 3 {
		relayed("repeated "+strconv.Itoa(i), "a", "203.0.113.1")
	}
	relayed("another trace", "b", "203.0.113.1")
	relayed("another client", "b", "203.0.113.2")
	relayed("the first again", "a", "203.0.113.1")
	extra := `
      - name: other
        path_prefix: /other
        upstreams: ["{{backend}}"]`
	if err := d.srv.Reload(parseConfig(t, config(extra), d.backend.URL())); err != nil {
		t.Fatal(err)
	}
	relayed("after the reload", "a", "203.0.113.1")
	relayed("after the reload, again", "a", "203.0.113.1")
	conn.Close()
	d.checkIdle()
}
