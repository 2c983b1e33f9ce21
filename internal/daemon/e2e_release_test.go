package daemon_test

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"
)

// Every way an exchange or a connection can end badly gives its permit or
// slot back; startDaemon's cleanup checks /debug/limits reads zero.
func TestPermitsComeBackOnEveryFailure(t *testing.T) {
	bothServers(t, testPermitsComeBackOnEveryFailure)
}

func testPermitsComeBackOnEveryFailure(t *testing.T) {
	certFile, keyFile, _ := selfSigned(t)
	d := startDaemon(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    client_limit: {permits: 8}
    routes:
      - name: r
        upstreams: ["{{backend}}"]
        limit: {permits: 1, queue: {size: 2, timeout: 200ms}}
        shadow_limit: {permits: 1}
  - name: tls
    protocol: https
    listen: "127.0.0.1:0"
    tls: {cert_file: "`+certFile+`", key_file: "`+keyFile+`"}
    routes:
      - upstreams: ["{{backend}}"]
`)
	c := d.client("127.0.0.2")
	route := func() (inUse, waiting int) {
		tot := d.route("web", "r").Limit.Totals
		return tot.InUse, tot.Waiting
	}

	t.Run("client gone mid-exchange and while queued", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		held := make(chan error, 2)
		for range 2 {
			go func() {
				req, _ := http.NewRequestWithContext(ctx, "GET", d.url("web", "/?ms=5000"), nil)
				resp, err := c.Do(req)
				if err == nil {
					resp.Body.Close()
				}
				held <- err
			}()
		}
		d.waitFor("one running, one queued", func() bool { u, w := route(); return u == 1 && w == 1 })
		cancel()
		for range 2 {
			select {
			case <-held:
			case <-time.After(waitLimit):
				t.Fatal("canceled requests did not end")
			}
		}
		d.waitFor("permits back", func() bool { u, w := route(); return u == 0 && w == 0 })
	})

	t.Run("queue timeout", func(t *testing.T) {
		slow := getAsync(c, d.url("web", "/?ms=1500"))
		d.waitFor("permit held", func() bool { u, _ := route(); return u == 1 })
		if st, _, _ := get(t, c, d.url("web", "/")); st != http.StatusTooManyRequests {
			t.Fatalf("after the queue timeout: %d, want 429", st)
		}
		await(t, slow)
		if tot := d.route("web", "r").Limit.Totals; tot.QueueTimeouts == 0 {
			t.Fatalf("no queue timeout counted: %+v", tot)
		}
	})

	t.Run("upstream cuts the body", func(t *testing.T) {
		resp, err := c.Get(d.url("web", "/abort"))
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		if err == nil {
			t.Fatal("a cut body arrived whole")
		}
		d.waitFor("permit back after the abort", func() bool { u, _ := route(); return u == 0 })
	})

	t.Run("TLS handshake failure", func(t *testing.T) {
		conn := dialFrom(t, "127.0.0.3", d.srv.Addr("tls").String())
		_, _ = conn.Write([]byte("this is not a TLS client hello\r\n\r\n"))
		_ = conn.SetReadDeadline(time.Now().Add(waitLimit))
		_, _ = io.ReadAll(conn)
		conn.Close()
		d.waitFor("slot back", func() bool { return d.listener("tls").Connections.Open == 0 })
	})
	c.CloseIdleConnections()
	d.waitFor("client and shadow limits back to zero", func() bool {
		l := d.listener("web")
		r := routeFinder{d.snapshot()}.route("web", "r")
		return l.ClientLimit.Totals.InUse == 0 && r.ShadowLimit.Totals.InUse == 0
	})
}
