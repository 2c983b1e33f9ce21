package floorproxy

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-a07d1050/portcullis/clientkey"
	"github.com/seed-a07d1050/portcullis/internal/http1"
	"github.com/seed-a07d1050/portcullis/limit"
	"github.com/seed-a07d1050/portcullis/promlimit"
)

// Admission is the work per request that a data path relaying bytes,
// without an http.Request, could still not skip: the server's parse and
// checks of the head, the route, a permit of each limiter, the forwarding
// fields, the hop-by-hop fields dropped both ways, the response head
// checked, and the request metrics. [ServeAdmitting] does that and nothing
// more on top of the floor: it models the least such a path would cost,
// to tell what building one could gain. It is not a proxy to deploy: it
// relays only what [Serve] relays, and closes the connection on any other
// request, a refused permit included.
type Admission struct {
	// Limiters are asked for a permit each, in order, keyed by the
	// client's address, for every request; the permits are released once
	// the response is written.
	Limiters []*limit.Limiter[string]

	// Host and PathPrefix are the route: a request for another host
	// (any host when Host is empty, but one there must be) or path is not
	// relayed.
	Host, PathPrefix string

	// Requests, Duration and Upstream are the request metrics: a count, the
	// time from head to response written, and the time the upstream took.
	Requests           prometheus.Counter
	Duration, Upstream prometheus.Observer
}

// NewAdmission returns the admission of the daemon's benchmark
// configuration (internal/daemon's benchLimitsOn, bench/peers'
// portcullis.yaml): a client limit of 256 permits,
// a shadow limit of 128, and the route's limit of 128 with a queue of 64,
// each reporting to a wait histogram as the daemon's limiters do; a
// request counter and two histograms as the daemon's request metrics; any
// host, every path.
func NewAdmission() (*Admission, error) {
	a := &Admission{PathPrefix: "/"}
	for _, cfg := range []limit.Config[string]{
		{Policy: limit.Policy[string]{Permits: 256}},
		{Policy: limit.Policy[string]{Permits: 128, Shadow: true}},
		{Policy: limit.Policy[string]{Permits: 128, QueueSize: 64, QueueTimeout: time.Second}},
	} {
		cfg.Observer = promlimit.ObserverFor[string](promlimit.NewWaitHistogram(promlimit.Opts{Subsystem: "exchanges"}, nil))
		l, err := limit.New(cfg)
		if err != nil {
			return nil, fmt.Errorf("floor: %w", err)
		}
		a.Limiters = append(a.Limiters, l)
	}
	reqs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "requests_total"}, []string{"listener", "route", "code"})
	a.Requests = reqs.WithLabelValues("web", "default", "200")
	a.Duration = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "duration_seconds"})
	a.Upstream = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "upstream_seconds"})
	return a, nil
}

// ServeAdmitting is [Serve] with the work of a (probing the kept upstream
// connection).
func ServeAdmitting(ln net.Listener, upstream string, a *Admission) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go a.serve(c, upstream)
	}
}

// admitConn is one client connection's state, kept across its requests as
// a data path would keep it.
type admitConn struct {
	a       *Admission
	key     string // the client's key, computed once
	client  []byte // its address, as X-Forwarded-For carries it
	scan    http1.HeadScanner
	in, out []byte // request in, response in
	head    []byte // the head sent upstream
	resp    []byte // the response sent to the client
	permits []limit.Permit[string]
}

// serve relays the requests of client c that a admits, until either side
// closes or a request is not admitted.
func (a *Admission) serve(c net.Conn, upstream string) {
	defer c.Close()
	ac := newAdmitConn(a, c.RemoteAddr())
	ac.in, ac.out = make([]byte, 8<<10), make([]byte, 16<<10)
	var up net.Conn
	var peek *peeker
	defer func() {
		if up != nil {
			up.Close()
		}
	}()
	for {
		n, err := readHead(c, ac.in)
		if err != nil {
			return
		}
		start := time.Now()
		b := ac.in[:n]
		if !ac.admit(b) {
			return
		}
		if up == nil {
			if up, err = net.Dial("tcp", upstream); err != nil {
				ac.release()
				return
			}
			if peek, err = newPeeker(up); err != nil {
				ac.release()
				return
			}
		} else if !peek.idle() {
			ac.release()
			return
		}
		ok := ac.exchange(c, up, b, start)
		ac.release()
		if !ok {
			return
		}
	}
}

// newAdmitConn returns the admission state of a connection from client.
func newAdmitConn(a *Admission, client net.Addr) *admitConn {
	host, _, _ := net.SplitHostPort(client.String())
	return &admitConn{
		a: a, key: clientkey.FromNetAddr(client).String(), client: []byte(host),
		head: make([]byte, 0, 8<<10), resp: make([]byte, 0, 16<<10),
		permits: make([]limit.Permit[string], 0, len(a.Limiters)),
	}
}

// admit checks the head b, matches the route, takes the permits and builds
// the upstream head. It reports whether the request is to be relayed.
func (ac *admitConn) admit(b []byte) bool {
	if n, err := ac.scan.Scan(b); err != nil || n != len(b) {
		return false
	}
	if !bytes.Equal(ac.scan.Proto(b), []byte("HTTP/1.1")) {
		return false
	}
	target := ac.scan.Target(b)
	if !bytes.HasPrefix(target, []byte(ac.a.PathPrefix)) {
		return false
	}
	h := append(ac.head[:0], ac.scan.Method(b)...)
	h = append(h, ' ')
	h = append(h, target...)
	h = append(h, " HTTP/1.1\r\nHost: "...)
	hostAt := len(h)
	var host []byte
	ok := ac.scan.Fields(b, func(name, value, line []byte) bool {
		switch {
		case asciiFold(name, "Host"):
			if host != nil {
				return false
			}
			host = value
			return true // sent first, as the daemon sends it
		case asciiFold(name, "Content-Length"), asciiFold(name, "Transfer-Encoding"),
			asciiFold(name, "Upgrade"), asciiFold(name, "Expect"):
			return false // a body or a protocol switch: not modelled
		case isHop(name), isForwarding(name):
			return true
		}
		h = append(h, line...)
		return true
	})
	if !ok || host == nil || ac.a.Host != "" && !bytes.Equal(host, []byte(ac.a.Host)) {
		return false
	}
	// The Host line goes right after the request line: the fields copied
	// so far move up behind it.
	fields := len(h) - hostAt
	h = append(h, host...)
	h = append(h, "\r\n"...)
	copy(h[hostAt+len(host)+2:], h[hostAt:hostAt+fields])
	copy(h[hostAt:], host)
	copy(h[hostAt+len(host):], "\r\n")
	h = append(h, "X-Forwarded-For: "...)
	h = append(h, ac.client...)
	h = append(h, "\r\nX-Forwarded-Host: "...)
	h = append(h, host...)
	h = append(h, "\r\nX-Forwarded-Proto: http\r\n\r\n"...)
	ac.head = h
	for _, l := range ac.a.Limiters {
		p, err := l.AcquireWith(context.Background(), ac.key, limit.AcquireOptions{NoWait: true})
		if err != nil {
			ac.release()
			return false
		}
		ac.permits = append(ac.permits, p)
	}
	return true
}

// release gives back the permits held.
func (ac *admitConn) release() {
	for _, p := range ac.permits {
		p.Release()
	}
	clear(ac.permits)
	ac.permits = ac.permits[:0]
}

// exchange sends the head upstream, checks the answer's head, and writes
// the answer to the client without its hop-by-hop fields.
func (ac *admitConn) exchange(c, up net.Conn, b []byte, start time.Time) bool {
	if _, err := up.Write(ac.head); err != nil {
		return false
	}
	m, err := readResponse(up, ac.out)
	if err != nil {
		return false
	}
	got := time.Now()
	r, ok := ac.answer(ac.out[:m])
	if !ok {
		return false
	}
	if _, err := c.Write(r); err != nil {
		return false
	}
	ac.record(start, got)
	return true
}

// answer returns the client's answer for resp, the upstream's whole
// answer: its head checked and without its hop-by-hop fields, then its
// body. It reports false when the head does not check.
func (ac *admitConn) answer(resp []byte) ([]byte, bool) {
	end := bytes.Index(resp, []byte("\r\n\r\n"))
	r, ok := filterResponse(ac.resp[:0], resp[:end+2])
	if !ok {
		return nil, false
	}
	r = append(r, "\r\n"...)
	r = append(r, resp[end+4:]...)
	ac.resp = r
	return r, true
}

// record counts an exchange that started at start, whose answer came at
// got and has just been written, in the request metrics.
func (ac *admitConn) record(start, got time.Time) {
	done := time.Now()
	ac.a.Requests.Inc()
	ac.a.Upstream.Observe(got.Sub(start).Seconds())
	ac.a.Duration.Observe(done.Sub(start).Seconds())
}

// filterResponse appends the response head (every line with its CRLF) to
// dst without its hop-by-hop fields, after checking its status line and
// each field as the daemon's reader does.
func filterResponse(dst, head []byte) ([]byte, bool) {
	lineEnd := bytes.IndexByte(head, '\r')
	if lineEnd < 12 || !bytes.HasPrefix(head, []byte("HTTP/1.1 ")) || head[12] != ' ' && lineEnd != 12 {
		return dst, false
	}
	if _, err := strconv.Atoi(string(head[9:12])); err != nil {
		return dst, false
	}
	dst = append(dst, head[:lineEnd+2]...)
	for pos := lineEnd + 2; pos < len(head); {
		n := bytes.IndexByte(head[pos:], '\r')
		if n < 0 || pos+n+1 >= len(head) || head[pos+n+1] != '\n' {
			return dst, false
		}
		line := head[pos : pos+n+2]
		pos += n + 2
		name, value, ok := bytes.Cut(line[:n], []byte(":"))
		if !ok || !validName(name) || !validValue(value) {
			return dst, false
		}
		if isHop(name) {
			continue
		}
		dst = append(dst, line...)
	}
	return dst, true
}

func validName(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if c <= ' ' || c >= 0x7f || c == ':' {
			return false
		}
	}
	return true
}

func validValue(b []byte) bool {
	for _, c := range b {
		if c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

func isHop(name []byte) bool {
	for _, h := range [...]string{"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade", "Proxy-Authorization", "Proxy-Authenticate"} {
		if asciiFold(name, h) {
			return true
		}
	}
	return false
}

func isForwarding(name []byte) bool {
	for _, h := range [...]string{"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "Forwarded", "X-Real-Ip"} {
		if asciiFold(name, h) {
			return true
		}
	}
	return false
}

// asciiFold reports whether b equals s, ASCII letters compared without
// case.
func asciiFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		x, y := b[i], s[i]
		if x|0x20 != y|0x20 || (x|0x20 < 'a' || x|0x20 > 'z') && x != y {
			return false
		}
	}
	return true
}
