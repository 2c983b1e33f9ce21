package h2check_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/seed-a07d1050/portcullis/internal/h2check"
	"github.com/seed-a07d1050/portcullis/internal/testcert"
)

const waitLimit = 10 * time.Second

// serve starts srv over TLS on a loopback port with cert and returns its
// address; the test closes it.
func serve(t *testing.T, srv *http.Server, cert *testcert.Cert) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if srv.TLSConfig == nil {
		srv.TLSConfig = &tls.Config{}
	}
	srv.TLSConfig.Certificates = []tls.Certificate{cert.TLS}
	srv.TLSConfig.MinVersion = tls.VersionTLS12
	srv.ErrorLog = log.New(io.Discard, "", 0)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.ServeTLS(ln, "", "")
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	return ln.Addr().String()
}

// echo answers every request with its method, path and proto.
var echo = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	fmt.Fprintf(w, "%s %s %s tls=%v", r.Method, r.URL.Path, r.Proto, r.TLS != nil)
})

// servers starts the two servers the differential tests compare: net/http's
// own HTTP/2, and the one Configure sets up.
func servers(t *testing.T) (plain, checked string) {
	cert, err := testcert.New()
	if err != nil {
		t.Fatal(err)
	}
	std := &http.Server{Handler: echo, ReadHeaderTimeout: waitLimit}
	withCheck := &http.Server{Handler: echo, ReadHeaderTimeout: waitLimit}
	if err := h2check.Configure(withCheck); err != nil {
		t.Fatal(err)
	}
	return serve(t, std, cert), serve(t, withCheck, cert)
}

// outcome is how a server answered one raw HTTP/2 request.
type outcome struct {
	status int           // the response's :status; 0 without one
	body   string        // the response body
	goAway http2.ErrCode // the GOAWAY's code, when the server sent one
	closed bool          // the connection ended before a response
}

func (o outcome) String() string {
	if o.status != 0 {
		return fmt.Sprintf("%d %q", o.status, o.body)
	}
	return fmt.Sprintf("GOAWAY %v closed=%v", o.goAway, o.closed)
}

// request is one raw exchange: settings to send first, then a GET with the
// extra header fields, padded with a field of pad bytes when pad > 0.
type request struct {
	settings []http2.Setting
	fields   []string
	pad      int
}

// exchange sends req over a new HTTP/2 connection to addr and reads the
// server's frames until the response ends or the connection fails.
func exchange(t *testing.T, addr string, req request) outcome {
	t.Helper()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: waitLimit}, "tcp", addr,
		&tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(waitLimit))
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if err := fr.WriteSettings(req.settings...); err != nil {
		t.Fatal(err)
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	fields := append([]string{":method", "GET", ":scheme", "https", ":path", "/x", ":authority", "localhost"}, req.fields...)
	if req.pad > 0 {
		fields = append(fields, "x-pad", strings.Repeat("p", req.pad))
	}
	for i := 0; i+1 < len(fields); i += 2 {
		_ = enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	var o outcome
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || strings.Contains(err.Error(), "reset") {
				o.closed = true
				return o
			}
			t.Fatalf("reading the answer: %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.MetaHeadersFrame:
			_, _ = fmt.Sscan(f.PseudoValue("status"), &o.status)
		case *http2.DataFrame:
			o.body += string(f.Data())
			if f.StreamEnded() {
				return o
			}
		case *http2.GoAwayFrame:
			o.goAway = f.ErrCode
			if f.ErrCode != http2.ErrCodeNo {
				return o
			}
		case *http2.RSTStreamFrame:
			t.Fatalf("stream reset with %v", f.ErrCode)
		}
	}
}

// TestDifferential sends the same raw requests to net/http's HTTP/2 and to
// the checked one: valid requests get the same answers, and each case
// h2spec finds net/http wrong in gets the answer RFC 9113 asks for.
func TestDifferential(t *testing.T) {
	plain, checked := servers(t)
	ok := outcome{status: 200, body: "GET /x HTTP/2.0 tls=true"}
	for _, tc := range []struct {
		name        string
		req         request
		wantPlain   func(outcome) bool
		wantChecked outcome
	}{
		{"plain request", request{}, nil, ok},
		{"te trailers", request{fields: []string{"te", "trailers"}}, nil, ok},
		{"several settings", request{settings: []http2.Setting{{ID: http2.SettingInitialWindowSize, Val: 1 << 20}, {ID: http2.SettingEnablePush, Val: 0}}}, nil, ok},
		{"headers near the frame limit", request{pad: h2check.MaxFrameSize - 200}, nil, ok},
		{"connection", request{fields: []string{"connection", "close"}}, is400, outcome{goAway: http2.ErrCodeProtocol}},
		{"keep-alive", request{fields: []string{"keep-alive", "5"}}, is400, outcome{goAway: http2.ErrCodeProtocol}},
		{"proxy-connection", request{fields: []string{"proxy-connection", "close"}}, is400, outcome{goAway: http2.ErrCodeProtocol}},
		{"transfer-encoding", request{fields: []string{"transfer-encoding", "chunked"}}, is400, outcome{goAway: http2.ErrCodeProtocol}},
		{"upgrade", request{fields: []string{"upgrade", "h2c"}}, is400, outcome{goAway: http2.ErrCodeProtocol}},
		{"te gzip", request{fields: []string{"te", "gzip"}}, is400, outcome{goAway: http2.ErrCodeProtocol}},
		{"te twice", request{fields: []string{"te", "trailers", "te", "trailers"}}, is400, outcome{goAway: http2.ErrCodeProtocol}},
		{"repeated setting", request{settings: []http2.Setting{{ID: http2.SettingInitialWindowSize, Val: 1}, {ID: http2.SettingInitialWindowSize, Val: 1 << 16}}},
			func(o outcome) bool { return o.goAway == http2.ErrCodeProtocol }, ok},
		{"headers over the frame limit", request{pad: 30000}, func(o outcome) bool { return o.status == 200 }, outcome{goAway: http2.ErrCodeFrameSize}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, c := exchange(t, plain, tc.req), exchange(t, checked, tc.req)
			if tc.wantPlain == nil && p != c {
				t.Fatalf("net/http answered %v, the checked server %v", p, c)
			}
			if tc.wantPlain != nil && !tc.wantPlain(p) {
				t.Fatalf("net/http answered %v: the case no longer shows what the layer is for", p)
			}
			if c.status != tc.wantChecked.status || c.body != tc.wantChecked.body || c.goAway != tc.wantChecked.goAway {
				t.Fatalf("the checked server answered %v; want %v", c, tc.wantChecked)
			}
		})
	}
}

func is400(o outcome) bool { return o.status == http.StatusBadRequest }

// TestShutdownEndsHTTP2Gracefully checks that srv.Shutdown reaches the
// HTTP/2 connections Configure serves: an idle one gets GOAWAY(NO_ERROR)
// and Shutdown returns.
func TestShutdownEndsHTTP2Gracefully(t *testing.T) {
	cert, err := testcert.New()
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: echo}
	if err := h2check.Configure(srv); err != nil {
		t.Fatal(err)
	}
	addr := serve(t, srv, cert)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: cert.Pool}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: waitLimit}).Get("https://" + addr + "/s")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "GET /s HTTP/2.0 tls=true" {
		t.Fatalf("body %q", body)
	}
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		done <- srv.Shutdown(ctx)
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
	case <-time.After(waitLimit + time.Second):
		t.Fatal("Shutdown did not return")
	}
}

func TestConfigureRejectsCipherSuitesWithoutHTTP2s(t *testing.T) {
	srv := &http.Server{TLSConfig: &tls.Config{CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384}}}
	if err := h2check.Configure(srv); err == nil || !strings.HasPrefix(err.Error(), "h2check: ") {
		t.Fatalf("Configure: %v; want an h2check error", err)
	}
}

// TestLargeBodiesBothWays sends a 1 MiB request body and reads a 1 MiB
// response over a checked connection, many DATA frames each way at the
// 16 KiB frame size the server advertises, with several streams at once.
func TestLargeBodiesBothWays(t *testing.T) {
	cert, err := testcert.New()
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("X-Got", fmt.Sprint(n))
		_, _ = w.Write(bytes.Repeat([]byte("r"), 1<<20))
	})}
	if err := h2check.Configure(srv); err != nil {
		t.Fatal(err)
	}
	addr := serve(t, srv, cert)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: cert.Pool}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: waitLimit}
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			resp, err := c.Post("https://"+addr+"/up", "application/octet-stream", bytes.NewReader(bytes.Repeat([]byte("u"), 1<<20)))
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			n, err := io.Copy(io.Discard, resp.Body)
			if err == nil && (resp.ProtoMajor != 2 || resp.Header.Get("X-Got") != "1048576" || n != 1<<20) {
				err = fmt.Errorf("proto %s, server got %s bytes, client %d", resp.Proto, resp.Header.Get("X-Got"), n)
			}
			errs <- err
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
