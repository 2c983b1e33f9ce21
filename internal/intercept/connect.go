package intercept

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/seed-a07d1050/portcullis/httplimit"
	"github.com/seed-a07d1050/portcullis/internal/forward"
	"github.com/seed-a07d1050/portcullis/internal/proxyauth"
)

// establishedLine is the answer to an intercepted CONNECT over HTTP/1.1.
const establishedLine = "HTTP/1.1 200 Connection established\r\n\r\n"

func newTLSConfig(i *Interceptor, h2 bool) *tls.Config {
	protos := []string{"http/1.1"}
	if h2 {
		protos = []string{"h2", "http/1.1"}
	}
	return &tls.Config{
		GetCertificate: i.getCertificate,
		NextProtos:     protos,
		MinVersion:     tls.VersionTLS12,
	}
}

// serveConnect intercepts the CONNECT r to t: answer 200, take the
// client's handshake, release the CONNECT's permits, and hand the TLS
// session to the inner server. Over HTTP/2 it returns only when the
// session has ended, since the stream is the session.
func (i *Interceptor) serveConnect(w http.ResponseWriter, r *http.Request, t forward.Target) {
	if i.isClosed() {
		writePlain(w, http.StatusServiceUnavailable, "service unavailable: the proxy is shutting down\n")
		return
	}
	i.stats.connects.Add(1)
	s := &session{i: i, connect: t, client: r.RemoteAddr, opened: time.Now(), fwd: forwardingHeaders(r.Header)}
	s.user, s.hasUser = proxyauth.User(r.Context())
	var stream *streamConn
	if r.ProtoMajor == 1 {
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			writePlain(w, http.StatusInternalServerError, "internal server error: cannot take over the connection for interception\n")
			return
		}
		// net/http may leave its deadlines on a hijacked connection; the
		// handshake has its own.
		_ = conn.SetDeadline(time.Time{})
		// Bytes the client sent right behind its CONNECT (a ClientHello
		// in the same packet) are in the server's buffer.
		if n := brw.Reader.Buffered(); n > 0 {
			b, _ := brw.Reader.Peek(n)
			s.prefix = bytes.Clone(b)
		}
		s.Conn = conn
	} else {
		// http.Server's ReadTimeout and WriteTimeout bound a stream from
		// its start; the session has its own bounds.
		rc := http.NewResponseController(w)
		_ = rc.SetReadDeadline(time.Time{})
		_ = rc.SetWriteDeadline(time.Time{})
		stream = newStreamConn(w, r)
		s.Conn = stream
		s.abortFn = stream.abort
	}
	if !i.track(s) {
		if stream == nil {
			_, _ = io.WriteString(s.Conn, "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
			s.Conn.Close()
			return
		}
		writePlain(w, http.StatusServiceUnavailable, "service unavailable: the proxy is shutting down\n")
		return
	}
	if !i.answerEstablished(w, s, stream) {
		s.Close()
	} else if tc := i.takeHandshake(s); tc != nil {
		// Interception has started: from now on each request inside
		// takes its own permits, and the CONNECT holds none.
		released := httplimit.ReleaseTunnelPermits(w)
		i.stats.sessions.Add(1)
		i.log.LogAttrs(r.Context(), slog.LevelDebug, "intercepted session opened",
			slog.String("client", s.client),
			slog.String("connect", t.String()),
			slog.String("target", s.target.String()),
			slog.Bool("sni", s.sni),
			slog.String("alpn", tc.ConnectionState().NegotiatedProtocol),
			slog.Int("limiters_released", released))
		if !i.ln.push(tc) {
			tc.Close() // shutting down
		}
	}
	if stream != nil {
		stream.wait()
	}
}

// answerEstablished tells the client its tunnel is open.
func (i *Interceptor) answerEstablished(w http.ResponseWriter, s *session, stream *streamConn) bool {
	if stream == nil {
		_, err := io.WriteString(s.Conn, establishedLine)
		return err == nil
	}
	w.WriteHeader(http.StatusOK)
	return stream.rc.Flush() == nil
}

// takeHandshake checks that the client speaks TLS and takes its
// handshake, within the handshake timeout. It returns the session's TLS
// connection, or nil once it has answered and closed a client that does
// not speak TLS or failed its handshake.
func (i *Interceptor) takeHandshake(s *session) *tls.Conn {
	if i.handshake > 0 {
		_ = s.Conn.SetDeadline(time.Now().Add(i.handshake))
	}
	verdict, err := s.sniff()
	if verdict != TLSClientHello {
		i.refuseNotTLS(s, verdict, err)
		return nil
	}
	tc := tls.Server(s, i.tlsConf)
	if err := tc.Handshake(); err != nil {
		i.stats.handshakeFailures.Add(1)
		reason := err.Error()
		if s.badSNI != "" {
			reason = s.badSNI
		}
		i.log.LogAttrs(context.Background(), slog.LevelDebug, "intercepted handshake failed",
			slog.String("client", s.client),
			slog.String("connect", s.connect.String()),
			slog.String("reason", reason))
		s.Close()
		return nil
	}
	_ = s.Conn.SetDeadline(time.Time{})
	// A resumed session skipped GetCertificate: its target is chosen
	// here, from the name the client sends now, under the same rules.
	if _, err := i.chooseTarget(context.Background(), s, tc.ConnectionState().ServerName); err != nil {
		i.stats.handshakeFailures.Add(1)
		i.log.LogAttrs(context.Background(), slog.LevelDebug, "intercepted handshake failed",
			slog.String("client", s.client),
			slog.String("connect", s.connect.String()),
			slog.String("reason", err.Error()))
		tc.Close()
		return nil
	}
	return tc
}

// refuseNotTLS answers a client that sent something other than a TLS
// ClientHello into its intercepted tunnel: a plain-text 400 for a plain
// HTTP request, nothing for anything else, then the connection is closed.
func (i *Interceptor) refuseNotTLS(s *session, verdict FirstBytes, err error) {
	what := verdict.String()
	if len(s.prefix) == 0 && err != nil {
		// Nothing came: the client gave up or timed out before its
		// handshake.
		i.stats.handshakeFailures.Add(1)
		i.log.LogAttrs(context.Background(), slog.LevelDebug, "intercepted handshake failed",
			slog.String("client", s.client),
			slog.String("connect", s.connect.String()),
			slog.String("reason", "no ClientHello: "+err.Error()))
		s.Close()
		return
	}
	i.stats.notTLS.Add(1)
	if verdict == PlainHTTP {
		body := "bad request: this proxy intercepts the TLS inside CONNECT tunnels to " + s.connect.String() +
			"; speak TLS in the tunnel (https://), or send plain http:// requests to the proxy itself\n"
		_, _ = io.WriteString(s.Conn, "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"+
			"Connection: close\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
	}
	i.log.LogAttrs(context.Background(), slog.LevelDebug, "client inside an intercepted CONNECT does not speak TLS",
		slog.String("client", s.client),
		slog.String("connect", s.connect.String()),
		slog.String("first_bytes", what))
	s.Close()
}

// sniff reads the client's first bytes, keeping them, until
// SniffFirstBytes decides.
func (s *session) sniff() (FirstBytes, error) {
	v := SniffFirstBytes(s.prefix[:min(len(s.prefix), SniffMax)])
	for v == NeedMore {
		var b [SniffMax]byte
		n, err := s.Conn.Read(b[:SniffMax-len(s.prefix)])
		s.prefix = append(s.prefix, b[:n]...)
		v = SniffFirstBytes(s.prefix)
		if err != nil && v == NeedMore {
			return Other, err
		}
	}
	return v, nil
}

// targetFor is the target the requests of the session go to: the host the
// client named in SNI, or the CONNECT's without SNI, and the CONNECT's
// port.
func (s *session) targetFor(sni string) (forward.Target, error) {
	if sni == "" {
		s.sni = false
		return s.connect, nil
	}
	t, err := forward.ParseTarget(net.JoinHostPort(sni, strconv.Itoa(int(s.connect.Port()))), forward.DefaultConnectPort)
	if err != nil {
		return forward.Target{}, fmt.Errorf("intercept: the client's server name (SNI) is not a host name: %w", err)
	}
	s.sni = true
	return t, nil
}

// chooseTarget sets the session's target from the server name the client
// sent (see targetFor). The CONNECT was intercepted for its authority; a
// client naming another host in SNI gets that host intercepted only if
// the rules would have intercepted a CONNECT to it.
func (i *Interceptor) chooseTarget(ctx context.Context, s *session, sni string) (forward.Target, error) {
	t, err := s.targetFor(sni)
	if err != nil {
		return t, err
	}
	if t.Host() != s.connect.Host() && i.decide(ctx, t) != decideIntercept {
		return forward.Target{}, fmt.Errorf("intercept: the server name %s differs from the CONNECT's %s and is not to be intercepted", t.Host(), s.connect.Host())
	}
	s.target = t
	return t, nil
}

// getCertificate is the tls.Config hook: the leaf for the name the client
// asked for.
func (i *Interceptor) getCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	s, ok := hello.Conn.(*session)
	if !ok {
		return nil, errors.New("intercept: handshake on a connection that is no session")
	}
	t, err := i.chooseTarget(hello.Context(), s, hello.ServerName)
	if err != nil {
		s.badSNI = err.Error()
		return nil, err
	}
	cert, err := i.leaves.Get(t.Host())
	if err != nil {
		s.badSNI = err.Error()
		if ok, held := i.mintErrLog.allow(); ok {
			i.log.LogAttrs(context.Background(), slog.LevelWarn, "intercept: no leaf certificate",
				slog.String("host", t.Host()),
				slog.String("err", err.Error()),
				slog.Int64("not_logged_since_last", held))
		}
		return nil, err
	}
	return cert, nil
}

// forwardingHeaders returns the CONNECT's Forwarded and X-Forwarded-For,
// which the requests inside take over: a trusted proxy in front wrote them
// on the CONNECT, and what the client writes inside its TLS session is
// its own claim.
func forwardingHeaders(h http.Header) map[string][]string {
	var m map[string][]string
	for _, k := range []string{"Forwarded", "X-Forwarded-For"} {
		if v, ok := h[k]; ok {
			if m == nil {
				m = make(map[string][]string, 2)
			}
			m[k] = v
		}
	}
	return m
}
