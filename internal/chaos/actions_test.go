package chaos

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// The attackers' actions, one function each (see actions in
// attack_test.go). Each returns a short outcome for the tally and records
// a violation when it sees the daemon do what it must never do.

// resetMidHead sends part of a request head and resets the connection.
func (a *attacker) resetMidHead(ctx context.Context) string {
	c, err := a.open(ctx, a.pick("web", "tls", "raw"), a.src())
	if err != nil {
		return outcome(err)
	}
	head := a.head()
	_, err = io.WriteString(c, head[:1+a.rng.IntN(len(head)-1)])
	pause(ctx, a.between(0, 100*time.Millisecond))
	c.reset()
	return outcome(err)
}

// resetMidResponse asks for a large body (sometimes pipelined between other
// requests), reads part of it, and resets.
func (a *attacker) resetMidResponse(ctx context.Context) string {
	c, err := a.open(ctx, a.pick("web", "tls", "raw"), a.src())
	if err != nil {
		return outcome(err)
	}
	defer c.reset()
	head := requestHead("GET", a.pick(hostSteady, hostFlaky), "/bytes?n=1048576")
	if a.rng.IntN(3) == 0 { // pipelined behind a request to another route
		head = a.head() + head + a.head()
	}
	if _, err := io.WriteString(c, head); err != nil {
		return outcome(err)
	}
	_, err = io.CopyN(io.Discard, c, 1+a.rng.Int64N(256<<10))
	return outcome(err)
}

// halfOpen sends a request (whole or in part), shuts its sending side and
// lingers reading what comes back for a while.
func (a *attacker) halfOpen(ctx context.Context) string {
	c, err := a.open(ctx, a.pick("web", "tls", "raw"), a.src())
	if err != nil {
		return outcome(err)
	}
	defer c.Close()
	head := a.head()
	if a.rng.IntN(2) == 0 {
		head = head[:1+a.rng.IntN(len(head)-1)]
	}
	if _, err := io.WriteString(c, head); err != nil {
		return outcome(err)
	}
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = c.SetReadDeadline(time.Now().Add(a.between(200*time.Millisecond, 1500*time.Millisecond)))
	_, err = io.Copy(io.Discard, c)
	return outcome(err)
}

// tlsGarbage sends random bytes (sometimes behind a plausible TLS record
// header) to the https listener.
func (a *attacker) tlsGarbage(ctx context.Context) string {
	tc, err := dialFrom(ctx, a.src(), a.env.addr("tls"))
	if err != nil {
		return outcome(err)
	}
	c := &conn{tcp: tc, Conn: tc}
	defer c.reset()
	junk := make([]byte, 1+a.rng.IntN(4096))
	for i := range junk {
		junk[i] = byte(a.rng.Uint32())
	}
	if a.rng.IntN(2) == 0 && len(junk) >= 5 {
		copy(junk, []byte{0x16, 0x03, 0x01, byte(len(junk) >> 8), byte(len(junk))})
	}
	if _, err := c.Write(junk); err != nil {
		return outcome(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(a.between(50*time.Millisecond, 500*time.Millisecond)))
	_, err = io.Copy(io.Discard, c)
	return outcome(err)
}

// tlsHandshakeCut starts a TLS handshake and resets the connection at a
// random point: after the ClientHello, part way through the server's
// flight, or once the handshake is complete and nothing was sent.
func (a *attacker) tlsHandshakeCut(ctx context.Context) string {
	tc, err := dialFrom(ctx, a.src(), a.env.addr("tls"))
	if err != nil {
		return outcome(err)
	}
	c := &conn{tcp: tc, Conn: tc}
	defer c.reset()
	cut := &cutConn{Conn: tc, left: a.rng.IntN(1500)}
	if a.rng.IntN(4) == 0 {
		cut.left = 1 << 20 // the whole handshake, then nothing
	}
	err = tls.Client(cut, a.env.tlsConfig("h2", "http/1.1")).HandshakeContext(ctx)
	if errors.Is(err, errCut) {
		return "cut"
	}
	return outcome(err)
}

var errCut = errors.New("chaos: handshake cut")

// cutConn lets left bytes be read, then fails every read.
type cutConn struct {
	net.Conn
	left int
}

func (c *cutConn) Read(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, errCut
	}
	n, err := c.Conn.Read(p[:min(len(p), c.left)])
	c.left -= n
	return n, err
}

// slowloris opens up to connCap+4 connections from one address, starts a
// request head on each and trickles header lines until the daemon cuts
// them (read_header_timeout) or the attacker gives up.
func (a *attacker) slowloris(ctx context.Context) string {
	ln, src := a.pick("web", "tls"), a.src()
	addr := a.env.addr(ln)
	var conns []*conn
	defer func() {
		for _, c := range conns {
			c.reset()
		}
	}()
	for range 1 + a.rng.IntN(connCap+4) {
		c, err := a.openAt(ctx, ln, addr, src)
		if err != nil {
			continue // refused at the cap: the TLS handshake fails
		}
		conns = append(conns, c)
		_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: "+hostSteady+"\r\n")
	}
	stop := time.Now().Add(a.between(500*time.Millisecond, 2500*time.Millisecond))
	cut := 0
	for i := 0; time.Now().Before(stop) && ctx.Err() == nil && len(conns) > 0; i++ {
		pause(ctx, a.between(100*time.Millisecond, 300*time.Millisecond))
		live := conns[:0]
		for _, c := range conns {
			if _, err := fmt.Fprintf(c, "X-Chaos-%d: %d\r\n", i, a.rng.IntN(1000)); err != nil {
				cut++
				c.reset()
				continue
			}
			live = append(live, c)
		}
		conns = live
	}
	if cut > 0 {
		return "cut by daemon"
	}
	return "gave up"
}

// blockingBody yields n random-looking bytes, then blocks until ctx ends:
// an upload that never finishes.
type blockingBody struct {
	ctx context.Context
	n   int
}

func (b *blockingBody) Read(p []byte) (int, error) {
	if b.n <= 0 {
		<-b.ctx.Done()
		return 0, b.ctx.Err()
	}
	k := min(len(p), b.n)
	for i := range p[:k] {
		p[i] = byte('a' + i%26)
	}
	b.n -= k
	return k, nil
}

// cancelledUpload announces a 1 MiB body (raw: sometimes with Expect:
// 100-continue, or as a chunk of a chunked body), sends part of it and then
// resets the connection (raw) or cancels the request (HTTP/1.1 or HTTP/2
// client).
func (a *attacker) cancelledUpload(ctx context.Context) string {
	host := a.pick(hostSteady, hostFlaky, hostLib, hostQueue)
	part := a.rng.IntN(256 << 10)
	if a.rng.IntN(2) == 0 {
		c, err := a.open(ctx, a.pick("web", "tls", "raw"), a.src())
		if err != nil {
			return outcome(err)
		}
		defer c.reset()
		extra := []string{"Content-Length: 1048576", "Content-Type: application/octet-stream"}
		switch a.rng.IntN(3) {
		case 0:
			extra = append(extra, "Expect: 100-continue")
			part /= 4
		case 1:
			extra = []string{"Transfer-Encoding: chunked"}
		}
		if _, err := io.WriteString(c, requestHead("POST", host, "/", extra...)); err != nil {
			return outcome(err)
		}
		if extra[0] == "Transfer-Encoding: chunked" {
			// One chunk announced at 1 MiB, cut part way.
			if _, err := io.WriteString(c, "100000\r\n"); err != nil {
				return outcome(err)
			}
		}
		_, err = io.CopyN(c, &blockingBody{ctx: ctx, n: part}, int64(part))
		return outcome(err)
	}
	client, base := a.plain, "http://"+a.env.addr("web")
	if a.rng.IntN(2) == 0 {
		client, base = a.h2, "https://"+a.env.addr("tls")
	}
	rctx, cancel := context.WithTimeout(ctx, a.between(10*time.Millisecond, 500*time.Millisecond))
	defer cancel()
	req, _ := http.NewRequestWithContext(rctx, "POST", base+"/", &blockingBody{ctx: rctx, n: part})
	req.Host = host
	req.ContentLength = 1 << 20
	resp, err := client.Do(req)
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return fmt.Sprintf("status %d", resp.StatusCode)
	}
	return outcome(err)
}

// queueCancel sends several slow requests at once to the route with a
// limit and a queue, from one client, and cancels them at random times, so
// that some leave while queued and some while running. Now and then it
// sends 20 to 40 at once as HTTP/2 streams, more than the listener's
// client limit admits.
func (a *attacker) queueCancel(ctx context.Context) string {
	client, base := a.plain, "http://"+a.env.addr("web")
	if a.rng.IntN(2) == 0 {
		client, base = a.h2, "https://"+a.env.addr("tls")
	}
	n := 2 + a.rng.IntN(4)
	if client == a.h2 && a.rng.IntN(4) == 0 {
		n = 20 + a.rng.IntN(20) // streams of one connection: over the client limit too
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[string]int{}
	for range n {
		after := a.between(20*time.Millisecond, 800*time.Millisecond)
		url := fmt.Sprintf("%s/slow?ms=%d", base, 100+a.rng.IntN(500))
		wg.Go(func() {
			rctx, cancel := context.WithTimeout(ctx, after)
			defer cancel()
			req, _ := http.NewRequestWithContext(rctx, "GET", url, nil)
			req.Host = hostQueue
			got := "cancelled"
			if resp, err := client.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				got = fmt.Sprintf("status %d", resp.StatusCode)
			}
			mu.Lock()
			statuses[got]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if statuses["cancelled"] > 0 {
		return "some cancelled"
	}
	return "none cancelled"
}

// wsDrop asks for a WebSocket upgrade (now and then a CONNECT tunnel) and
// drops the connection before the answer, after it, after one echoed
// frame (by reset, close or half-close), or after holding it a while.
func (a *attacker) wsDrop(ctx context.Context) string {
	c, err := a.open(ctx, a.pick("web", "tls"), a.src())
	if err != nil {
		return outcome(err)
	}
	defer c.reset()
	head := requestHead("GET", a.pick(hostSteady, hostFlaky), "/ws",
		"Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Version: 13",
		"Sec-WebSocket-Key: Y2hhb3MgY2hhb3MgY2hhb3M=", "Origin: http://"+hostSteady)
	if a.rng.IntN(5) == 0 { // a CONNECT tunnel request instead
		h := a.pick(hostSteady, hostLib, hostQueue)
		head = "CONNECT " + h + ":80 HTTP/1.1\r\nHost: " + h + ":80\r\n\r\n"
	}
	if _, err := io.WriteString(c, head); err != nil {
		return outcome(err)
	}
	stage := a.rng.IntN(4)
	if stage == 0 {
		return "dropped before the answer"
	}
	br := bufio.NewReader(c)
	status, err := br.ReadString('\n')
	if err != nil {
		return outcome(err)
	}
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return outcome(err)
		}
		if line == "\r\n" {
			break
		}
	}
	if !strings.Contains(status, " 101 ") {
		return "answered " + strings.TrimSpace(status)
	}
	if stage == 2 {
		_, _ = c.Write(maskedFrame([]byte("chaos"), a.rng.Uint32()))
		_, _ = io.CopyN(io.Discard, br, 2+5) // the echo, unmasked
		switch a.rng.IntN(3) {
		case 0:
			_ = c.Close()
		case 1:
			if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
				_ = cw.CloseWrite()
				pause(ctx, a.between(10*time.Millisecond, 300*time.Millisecond))
			}
		}
		return "dropped after a frame"
	}
	if stage == 3 {
		return a.holdTunnel(ctx, c, br)
	}
	return "dropped after 101"
}

// holdTunnel keeps a WebSocket open for 0.5 to 2.5 s, echoing a frame every
// 100 ms, then resets it. On the flaky route the upstream may die under it.
func (a *attacker) holdTunnel(ctx context.Context, c *conn, br *bufio.Reader) string {
	stop := time.Now().Add(a.between(500*time.Millisecond, 2500*time.Millisecond))
	for time.Now().Before(stop) && ctx.Err() == nil {
		if _, err := c.Write(maskedFrame([]byte("held"), a.rng.Uint32())); err != nil {
			return "held, then cut: " + outcome(err)
		}
		if _, err := io.CopyN(io.Discard, br, 2+4); err != nil {
			return "held, then cut: " + outcome(err)
		}
		pause(ctx, 100*time.Millisecond)
	}
	return "held to the end"
}

// maskedFrame is a final text frame from a client (RFC 6455 §5.3).
func maskedFrame(payload []byte, mask uint32) []byte {
	m := [4]byte{byte(mask >> 24), byte(mask >> 16), byte(mask >> 8), byte(mask)}
	f := []byte{0x81, 0x80 | byte(len(payload)), m[0], m[1], m[2], m[3]}
	for i, b := range payload {
		f = append(f, b^m[i%4])
	}
	return f
}

// panicking sends a burst of requests to the library-middleware backend:
// some make its handler panic, some abort mid-body, some are slow enough to
// queue in the daemon's route limit or in the middleware, and some are
// cancelled by the client. A panicking handler must never look like a
// success.
func (a *attacker) panicking(ctx context.Context) string {
	client, base := a.plain, "http://"+a.env.addr("web")
	if a.rng.IntN(2) == 0 {
		client, base = a.h2, "https://"+a.env.addr("tls")
	}
	var wg sync.WaitGroup
	n := 1 + a.rng.IntN(6)
	for range n {
		path := a.pick("/?do=panic", "/?do=abort", fmt.Sprintf("/?ms=%d", 50+a.rng.IntN(400)), "/")
		after := a.between(100*time.Millisecond, 1500*time.Millisecond)
		wg.Go(func() {
			rctx, cancel := context.WithTimeout(ctx, after)
			defer cancel()
			req, _ := http.NewRequestWithContext(rctx, "GET", base+path, nil)
			req.Host = hostLib
			resp, err := client.Do(req)
			if err != nil {
				return
			}
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			switch {
			case path == "/?do=panic" && resp.StatusCode == http.StatusOK:
				a.tally.violate("lib %s: a panicking handler was answered 200", path)
			case path == "/?do=abort" && resp.StatusCode == http.StatusOK && err == nil:
				a.tally.violate("lib %s: a body cut by the upstream reached the client as complete", path)
			}
		})
	}
	wg.Wait()
	if n > 3 {
		return "big burst"
	}
	return "small burst"
}

// rawTCP abuses the tcp listener: connect and reset, send a request and
// reset mid-answer, or hold a connection idle for a while.
func (a *attacker) rawTCP(ctx context.Context) string {
	c, err := a.open(ctx, "raw", a.src())
	if err != nil {
		return outcome(err)
	}
	defer c.reset()
	switch a.rng.IntN(3) {
	case 0:
		return "reset at once"
	case 1:
		if _, err := io.WriteString(c, requestHead("GET", hostFlaky, "/bytes?n=262144")); err != nil {
			return outcome(err)
		}
		_, err = io.CopyN(io.Discard, c, 1+a.rng.Int64N(128<<10))
		return outcome(err)
	default:
		pause(ctx, a.between(50*time.Millisecond, time.Second))
		return "held idle"
	}
}

// connFlood opens connCap+4 connections from one address at once to one
// listener socket and sends a slow request on each: at most connCap of them
// may be open at once. A connection the daemon closes while the flood goes
// on (a draining listener closes its idle keep-alive connections at once)
// frees its slot for a later one, so what is checked is the connections
// open together: those answered after the last one was opened, each of
// which held its slot from its own opening to its answer.
func (a *attacker) connFlood(ctx context.Context) string {
	ln, src := a.pick("web", "tls"), a.src()
	addr := a.env.addr(ln)
	var conns []*conn
	defer func() {
		for _, c := range conns {
			c.reset()
		}
	}()
	for range connCap + 4 {
		c, err := a.openAt(ctx, ln, addr, src)
		if err != nil {
			continue
		}
		conns = append(conns, c)
		_, _ = io.WriteString(c, requestHead("GET", hostSteady, "/slow?ms=1000"))
	}
	lastOpened := time.Now()
	answeredAt := make([]time.Time, len(conns))
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() {
			line, err := bufio.NewReader(c).ReadString('\n')
			if err == nil && strings.HasPrefix(line, "HTTP/1.1 200") {
				answeredAt[i] = time.Now()
			}
		})
	}
	wg.Wait()
	answered, together := 0, 0
	for _, at := range answeredAt {
		if at.IsZero() {
			continue
		}
		answered++
		if !at.Before(lastOpened) {
			together++
		}
	}
	if together > connCap {
		a.tally.violate("connection flood on %s from %s: %d connections open at once, cap %d", ln, src, together, connCap)
	}
	return fmt.Sprintf("%d answered", answered)
}
