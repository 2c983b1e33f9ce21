package intercept_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"github.com/seed-a07d1050/portcullis/internal/proxytest"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/forward"
	"github.com/seed-a07d1050/portcullis/internal/intercept"
)

// assemblyRig is a forward proxy and the files of an Assembly: a CA written as
// `portcullis ca create` writes it, and the targets' roots.
type assemblyRig struct {
	proxy             *forward.Proxy
	certFile, keyFile string
	rootsFile         string
	pool              *x509.CertPool // trusts the CA
}

func newAssemblyRig(t *testing.T) *assemblyRig {
	t.Helper()
	p, err := forward.New(forward.Config{Policy: proxytest.AllowLoopback(t), Resolver: testResolver, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	dir := t.TempDir()
	certFile, keyFile, err := intercept.WriteCA(filepath.Join(dir, "ca"), intercept.CAOptions{CommonName: "assembly test CA"})
	if err != nil {
		t.Fatal(err)
	}
	ca, err := intercept.LoadCA(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Certificate())
	roots := filepath.Join(dir, "roots.pem")
	if err := os.WriteFile(roots, originCert(t).CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return &assemblyRig{proxy: p, certFile: certFile, keyFile: keyFile, rootsFile: roots, pool: pool}
}

// config is an AssemblyConfig whose inner handler counts the requests it serves in n.
func (r *assemblyRig) config(n *atomic.Int64) intercept.AssemblyConfig {
	return intercept.AssemblyConfig{
		Proxy:      r.proxy,
		CACertFile: r.certFile,
		CAKeyFile:  r.keyFile,
		Upstream:   intercept.UpstreamSettings{RootsFile: r.rootsFile},
		Inner: func(up *intercept.Upstream) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
				n.Add(1)
				up.ServeHTTP(w, req)
			})
		},
		Name:   "egress",
		Logger: quiet,
		Wait:   waitLimit,
	}
}

// serve serves a behind a proxy listener and returns a keep-alive client through it that
// trusts the CA.
func (r *assemblyRig) serve(t *testing.T, a *intercept.Assembly) *http.Client {
	t.Helper()
	srv := httptest.NewServer(a.Wrap(r.proxy))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	tr := &http.Transport{Proxy: http.ProxyURL(u), DialContext: proxytest.DialerFrom("127.0.0.1").DialContext, MaxIdleConnsPerHost: 4,
		TLSClientConfig: &tls.Config{RootCAs: r.pool}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: waitLimit}
}

// TestAssemblyKeepsWhatDidNotChange builds an Assembly, serves a request through it, then
// builds a second from the same settings: it keeps the Interceptor (the open session goes
// on) and, once committed, the session's next request goes through the second's handler.
// A third, with another handshake timeout, makes a new Interceptor, and retiring the old
// one for it ends the old session.
func TestAssemblyKeepsWhatDidNotChange(t *testing.T) {
	rig := newAssemblyRig(t)
	tg := newTarget(t)
	echo := "https://localhost:" + tg.Port() + "/echo"
	var n1, n2, n3 atomic.Int64
	a1, err := intercept.NewAssembly(rig.config(&n1), nil)
	if err != nil {
		t.Fatal(err)
	}
	a1.Commit()
	c := rig.serve(t, a1)
	if got := mustGet(t, c, echo); got.status != http.StatusOK || n1.Load() != 1 {
		t.Fatalf("first request: %d, inner 1 saw %d", got.status, n1.Load())
	}

	a2, err := intercept.NewAssembly(rig.config(&n2), a1)
	if err != nil {
		t.Fatal(err)
	}
	if a1.Replaced(a2) {
		t.Fatal("an Assembly built from the same settings replaced a part of its predecessor")
	}
	a2.Commit()
	if got := mustGet(t, c, echo); got.status != http.StatusOK || n1.Load() != 1 || n2.Load() != 1 {
		t.Fatalf("after commit: %d, inner 1 saw %d (want 1), inner 2 %d (want 1)", got.status, n1.Load(), n2.Load())
	}
	if s, _ := a2.Stats(); s.Sessions != 1 || s.Leaves.Minted != 1 {
		t.Errorf("kept Interceptor: %d sessions, %d leaves minted; want the one session and the one leaf", s.Sessions, s.Leaves.Minted)
	}

	// A request under way on the session when its Interceptor is retired.
	slow := make(chan error, 1)
	go func() {
		_, err := get(t.Context(), c, "https://localhost:"+tg.Port()+"/slow?id=held")
		slow <- err
	}()
	if id := tg.Next(t); id != "held" {
		t.Fatalf("the target saw %q", id)
	}

	cfg3 := rig.config(&n3)
	cfg3.HandshakeTimeout = 3 * time.Second
	a3, err := intercept.NewAssembly(cfg3, a2)
	if err != nil {
		t.Fatal(err)
	}
	if !a2.Replaced(a3) {
		t.Fatal("a new handshake timeout kept the Interceptor")
	}
	if s, _ := a3.Stats(); s.Sessions != 0 || s.Leaves.Cached != 1 {
		t.Errorf("new Interceptor: %d sessions (want 0), %d leaves cached (want the kept 1)", s.Sessions, s.Leaves.Cached)
	}
	if cut, _ := a2.Retire(t.Context(), a3); !cut {
		t.Error("retiring with no drain time cut nothing, but a request was under way")
	}
	if err := <-slow; err == nil {
		t.Error("the request under way survived the retirement of its Interceptor")
	}
	tg.Open()
	if s, _ := a2.Stats(); s.Open != 0 {
		t.Errorf("%d sessions still open on the retired Interceptor", s.Open)
	}
	if n := n2.Load(); n != 2 {
		t.Errorf("inner 2 saw %d requests, want 2 (one of them cut)", n)
	}
	a3.CloseAll()
}

// TestLoadCAFilesNamesTheFile checks that each CA problem names the file it is about.
func TestLoadCAFilesNamesTheFile(t *testing.T) {
	rig := newAssemblyRig(t)
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.pem")
	readable := filepath.Join(dir, "readable-key.pem")
	key, err := os.ReadFile(rig.keyFile)
	if err != nil {
		t.Fatal(err)
	}
	for file, data := range map[string][]byte{garbage: []byte("not PEM\n"), readable: key} {
		if err := os.WriteFile(file, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(readable, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, cert, key string
		wantFile        string
		wantCert        bool
		wantIs          error
	}{
		{"certificate not PEM", garbage, rig.keyFile, garbage, true, nil},
		{"key not PEM", rig.certFile, garbage, garbage, false, nil},
		{"key missing", rig.certFile, filepath.Join(dir, "nope.pem"), filepath.Join(dir, "nope.pem"), false, os.ErrNotExist},
		{"key readable by others", rig.certFile, readable, readable, false, intercept.ErrKeyReadable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, _, err := intercept.LoadCAFiles(tc.cert, tc.key, false)
			var ce *intercept.CAFileError
			if !errors.As(err, &ce) || ce.File != tc.wantFile || ce.Cert != tc.wantCert {
				t.Fatalf("error %v (%#v), want a CAFileError about %s (cert %v)", err, ce, tc.wantFile, tc.wantCert)
			}
			if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Errorf("error %v does not match %v", err, tc.wantIs)
			}
		})
	}
	if _, _, _, err := intercept.LoadCAFiles(rig.certFile, readable, true); err != nil {
		t.Errorf("a readable key with allowReadableKey: %v", err)
	}
}
