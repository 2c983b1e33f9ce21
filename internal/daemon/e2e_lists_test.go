package daemon_test

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
)

// writeList writes a deny or allow list file and returns its path.
func writeList(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// closedUntouched dials addr from ip and reports whether the daemon
// closes the connection without sending a byte, while the client has sent
// none either: a refusal at accept.
func closedUntouched(t *testing.T, ip, addr string) bool {
	t.Helper()
	c := dialFrom(t, ip, addr)
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(waitLimit))
	n, err := c.Read(make([]byte, 1))
	return n == 0 && err != nil && !isTimeout(err)
}

// deniedMetric reads portcullis_denied_connections_total of a listener and
// reason from /metrics.
func deniedMetric(t *testing.T, d *testDaemon, listener, reason string) float64 {
	t.Helper()
	return metricLine(t, d, `portcullis_denied_connections_total{listener="`+listener+`",reason="`+reason+`"}`)
}

// metricLine reads the value of the /metrics line starting with series.
func metricLine(t *testing.T, d *testDaemon, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(d.metrics(), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("metric line %q", line)
			}
			return f
		}
	}
	t.Fatalf("no metric %s in /metrics", series)
	return 0
}

func listsDaemon(t *testing.T, lists string) *testDaemon {
	t.Helper()
	return startDaemon(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    max_conns_per_client: 1
`+lists+`
    routes:
      - upstreams: ["{{backend}}"]
`)
}

// A denied client is closed before any byte either way, takes no
// connection slot (its cap of 1 would otherwise refuse the next), is
// counted by list and never reaches the backend; others are served.
func TestDenyListRefusesAtAccept(t *testing.T) { defaultServer(t, testDenyListRefusesAtAccept) }

func testDenyListRefusesAtAccept(t *testing.T) {
	deny := writeList(t, t.TempDir(), "deny", "# test\n127.0.0.2\n2001:db8::/32\n")
	d := listsDaemon(t, "    deny_file: "+deny)
	addr := d.srv.Addr("web").String()
	for i := range 3 {
		if !closedUntouched(t, "127.0.0.2", addr) {
			t.Fatalf("connection %d from the denied 127.0.0.2 not closed at once", i)
		}
	}
	if st, _, _ := get(t, d.client("127.0.0.3"), d.url("web", "/")); st != http.StatusOK {
		t.Fatalf("127.0.0.3, not denied: %d", st)
	}
	if n := d.backend.requests.Load(); n != 1 {
		t.Errorf("the backend saw %d requests, want only 127.0.0.3's", n)
	}
	ls := d.listener("web")
	if ls.Connections.Refused.Filtered != 3 || ls.Connections.Refused.ClientCap != 0 || ls.Connections.Accepted != 1 {
		t.Errorf("connection counts %+v: want 3 filtered, none over the cap, 1 accepted", ls.Connections)
	}
	for _, k := range ls.BusyClients {
		if k.Key == "127.0.0.2" {
			t.Errorf("the denied client holds a connection slot: %+v", k)
		}
	}
	if got := deniedMetric(t, d, "web", "deny_list"); got != 3 {
		t.Errorf("deny_list refusals %v, want 3", got)
	}
	if got := deniedMetric(t, d, "web", "not_allowed"); got != 0 {
		t.Errorf("not_allowed refusals %v, want 0", got)
	}
	if got := metricLine(t, d, `portcullis_connections_refused_total{listener="web",reason="filtered"}`); got != 3 {
		t.Errorf("connections refused as filtered %v, want 3", got)
	}
}

// With an allow list only, the clients outside it are refused.
func TestAllowListOnly(t *testing.T) { defaultServer(t, testAllowListOnly) }

func testAllowListOnly(t *testing.T) {
	allow := writeList(t, t.TempDir(), "allow", "127.0.0.3\n")
	d := listsDaemon(t, "    allow_file: "+allow)
	addr := d.srv.Addr("web").String()
	if !closedUntouched(t, "127.0.0.2", addr) {
		t.Fatal("127.0.0.2, outside the allow list, not refused")
	}
	if st, _, _ := get(t, d.client("127.0.0.3"), d.url("web", "/")); st != http.StatusOK {
		t.Fatalf("127.0.0.3, allowed: %d", st)
	}
	if got := deniedMetric(t, d, "web", "not_allowed"); got != 1 {
		t.Errorf("not_allowed refusals %v, want 1", got)
	}
	if n := d.backend.requests.Load(); n != 1 {
		t.Errorf("the backend saw %d requests, want 1", n)
	}
}

// A more specific allow entry admits one address of a denied /24, and a
// more specific deny entry refuses one inside an allowed network.
func TestMoreSpecificEntryWins(t *testing.T) { defaultServer(t, testMoreSpecificEntryWins) }

func testMoreSpecificEntryWins(t *testing.T) {
	dir := t.TempDir()
	deny := writeList(t, dir, "deny", "127.0.0.0/24\n127.0.1.9\n")
	allow := writeList(t, dir, "allow", "127.0.0.3\n127.0.1.0/24\n")
	d := listsDaemon(t, "    deny_file: "+deny+"\n    allow_file: "+allow)
	addr := d.srv.Addr("web").String()
	for _, ip := range []string{"127.0.0.3", "127.0.1.8"} {
		if st, _, _ := get(t, d.client(ip), d.url("web", "/")); st != http.StatusOK {
			t.Fatalf("%s: %d, want 200", ip, st)
		}
	}
	for _, ip := range []string{"127.0.0.4", "127.0.1.9"} {
		if !closedUntouched(t, ip, addr) {
			t.Fatalf("%s not refused", ip)
		}
	}
	if !closedUntouched(t, "127.0.2.1", addr) {
		t.Fatal("127.0.2.1, in neither list, not refused")
	}
	if got := deniedMetric(t, d, "web", "deny_list"); got != 2 {
		t.Errorf("deny_list refusals %v, want 2", got)
	}
	if got := deniedMetric(t, d, "web", "not_allowed"); got != 1 {
		t.Errorf("not_allowed refusals %v, want 1", got)
	}
}

// A reload reads the list again: the next connection of a newly denied
// client is refused while its open connection goes on being served. A bad
// file fails the reload, naming file and line, and the running lists
// stay.
func TestDenyListReload(t *testing.T) { defaultServer(t, testDenyListReload) }

func testDenyListReload(t *testing.T) {
	deny := writeList(t, t.TempDir(), "deny", "127.0.0.2\n")
	text := `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    deny_file: ` + deny + `
    routes:
      - upstreams: ["{{backend}}"]
`
	d := startDaemon(t, text)
	addr := d.srv.Addr("web").String()
	open := keepAlive(t, "127.0.0.4", addr)

	writeList(t, filepath.Dir(deny), "deny", "127.0.0.2\n127.0.0.4\n")
	if err := d.srv.Reload(d.sameAddr(text)); err != nil {
		t.Fatalf("reload: %v", err)
	}
	if !closedUntouched(t, "127.0.0.4", addr) {
		t.Fatal("127.0.0.4, added to the file, not refused after the reload")
	}
	open.get("/after-reload") // the connection open before is untouched
	if st, _, _ := get(t, d.client("127.0.0.5"), d.url("web", "/")); st != http.StatusOK {
		t.Fatalf("127.0.0.5: %d", st)
	}

	next := d.sameAddr(text) // parsed while the file is good
	writeList(t, filepath.Dir(deny), "deny", "127.0.0.2\n127.0.0.5\nnot-an-address\n")
	err := d.srv.Reload(next)
	if err == nil || !strings.Contains(err.Error(), deny+`:3: not an IP address or CIDR (got "not-an-address")`) {
		t.Fatalf("reload with a bad file: %v, want the file, line and text", err)
	}
	if !closedUntouched(t, "127.0.0.4", addr) {
		t.Fatal("127.0.0.4 no longer refused after a failed reload")
	}
	if st, _, _ := get(t, d.client("127.0.0.5"), d.url("web", "/")); st != http.StatusOK {
		t.Fatalf("127.0.0.5, in the bad file only: %d, want the old lists to stay", st)
	}
	open.get("/after-failed-reload")
	_ = open.c.Close()
}

// countingUpstream is a TCP server that counts the connections it accepts
// and echoes what it reads.
func countingUpstream(t *testing.T) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	var n atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String(), &n
}

// On a tcp listener a denied client is closed and the upstream never hears
// of it; on a listener behind a trusted proxy speaking PROXY protocol, the
// client the header names is checked, not the proxy.
func TestDenyListTCPAndProxyProtocol(t *testing.T) {
	up, accepted := countingUpstream(t)
	deny := writeList(t, t.TempDir(), "deny", "127.0.0.0/24\n192.0.2.66\n")
	d := startDaemon(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: db
    protocol: tcp
    listen: "127.0.0.1:0"
    upstream: "`+up+`"
    deny_file: `+deny+`
  - name: behind
    protocol: tcp
    listen: "127.0.0.1:0"
    upstream: "`+up+`"
    deny_file: `+deny+`
    trusted_proxies: [127.0.0.5/32]
    proxy_protocol: true
`)
	db, behind := d.srv.Addr("db").String(), d.srv.Addr("behind").String()
	if !closedUntouched(t, "127.0.0.2", db) {
		t.Fatal("denied client on the tcp listener not refused")
	}
	echo := func(ip, addr, header string) error {
		c := dialFrom(t, ip, addr)
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(waitLimit))
		if _, err := io.WriteString(c, header+"ping"); err != nil {
			return err
		}
		b := make([]byte, 4)
		if _, err := io.ReadFull(c, b); err != nil {
			return err
		}
		if string(b) != "ping" {
			return errors.New("echo " + string(b))
		}
		return nil
	}
	if err := echo("127.0.1.1", db, ""); err != nil {
		t.Fatalf("client outside the list: %v", err)
	}
	// The trusted proxy's own address is in the denied /24: its
	// connections are checked by the client they carry.
	if err := echo("127.0.0.5", behind, "PROXY TCP4 192.0.2.1 127.0.0.1 40000 80\r\n"); err != nil {
		t.Fatalf("an allowed client behind the trusted proxy: %v", err)
	}
	if err := echo("127.0.0.5", behind, "PROXY TCP4 192.0.2.66 127.0.0.1 40000 80\r\n"); err == nil {
		t.Fatal("the denied client 192.0.2.66 behind the trusted proxy was served")
	}
	if !closedUntouched(t, "127.0.0.6", behind) {
		t.Fatal("a denied peer that is no trusted proxy not refused")
	}
	if n := accepted.Load(); n != 2 {
		t.Errorf("the upstream accepted %d connections, want the 2 allowed ones", n)
	}
	for _, name := range []string{"db", "behind"} {
		// A proxied connection is counted until the daemon has seen both
		// sides end, just after the client's side closed.
		ls := d.listener(name)
		for deadline := time.Now().Add(5 * time.Second); ls.Connections.Open != 0 && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
			ls = d.listener(name)
		}
		if ls.Connections.Open != 0 || ls.Connections.Refused.ClientCap != 0 {
			t.Errorf("%s: counts %+v after the test", name, ls.Connections)
		}
	}
	if got := deniedMetric(t, d, "behind", "deny_list"); got != 2 {
		t.Errorf("behind: deny_list refusals %v, want 2 (the PROXY client and the peer)", got)
	}
}

// On an http3 listener a denied client's handshake is refused at once,
// without a Retry even under retry: always, and never enters the attempts
// in progress.
func TestDenyListHTTP3(t *testing.T) {
	certFile, keyFile, pool := selfSigned(t)
	deny := writeList(t, t.TempDir(), "deny", "127.0.0.2\n")
	d := startDaemon(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: quic
    protocol: http3
    listen: "127.0.0.1:0"
    tls: {cert_file: "`+certFile+`", key_file: "`+keyFile+`"}
    quic: {retry: always}
    deny_file: `+deny+`
    routes:
      - upstreams: ["{{backend}}"]
`)
	url := "https://127.0.0.1:" + strconv.Itoa(d.srv.Addr("quic").(*net.UDPAddr).Port)
	err := h3Get(t, "127.0.0.2", url, pool)
	var te *quic.TransportError
	if !errors.As(err, &te) || te.ErrorCode != quic.ConnectionRefused {
		t.Fatalf("denied client: %v, want CONNECTION_REFUSED", err)
	}
	if got := quicMetric(t, d, `portcullis_quic_attempts_total{outcome="retried"}`); got != 0 {
		t.Errorf("%v Retries sent to the denied client, want 0", got)
	}
	if got := quicMetric(t, d, `portcullis_quic_attempts_total{outcome="admitted"}`); got != 0 {
		t.Errorf("%v attempts admitted, want 0", got)
	}
	if err := h3Get(t, "127.0.0.3", url, pool); err != nil {
		t.Fatalf("client outside the list: %v", err)
	}
	if got := deniedMetric(t, d, "quic", "deny_list"); got < 1 {
		t.Errorf("deny_list refusals %v, want at least 1", got)
	}
	if got := d.listener("quic").Connections.Refused.Filtered; got < 1 {
		t.Errorf("/debug/limits shows %d filtered QUIC attempts, want at least 1", got)
	}
	if n := d.backend.requests.Load(); n != 1 {
		t.Errorf("the backend saw %d requests, want 1", n)
	}
}

// Naming another file is no socket change: the listener is kept, with its
// counts, and checks against the new file. A reload that does rebuild the
// listener (a new cap) gives the new one the lists and the refusal counts
// of the old.
func TestDenyListFileChangeKeepsListener(t *testing.T) {
	defaultServer(t, testDenyListFileChangeKeepsListener)
}

func testDenyListFileChangeKeepsListener(t *testing.T) {
	dir := t.TempDir()
	first, second := writeList(t, dir, "first", "127.0.0.2\n"), writeList(t, dir, "second", "127.0.0.3\n")
	text := func(deny string, cap int) string {
		return `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    max_conns_per_client: ` + strconv.Itoa(cap) + `
    deny_file: ` + deny + `
    routes:
      - upstreams: ["{{backend}}"]
`
	}
	d := startDaemon(t, text(first, 8))
	addr := d.srv.Addr("web").String()
	if !closedUntouched(t, "127.0.0.2", addr) {
		t.Fatal("127.0.0.2 not refused")
	}
	if st, _, _ := get(t, d.client("127.0.0.3"), d.url("web", "/")); st != http.StatusOK {
		t.Fatalf("127.0.0.3: %d", st)
	}

	if err := d.srv.Reload(d.sameAddr(text(second, 8))); err != nil {
		t.Fatalf("reload: %v", err)
	}
	if got := d.listener("web").Connections.Accepted; got != 1 {
		t.Fatalf("accepted %d after naming another file, want the kept listener's 1", got)
	}
	if !closedUntouched(t, "127.0.0.3", addr) {
		t.Fatal("127.0.0.3, in the new file, not refused")
	}
	if st, _, _ := get(t, d.client("127.0.0.2"), d.url("web", "/")); st != http.StatusOK {
		t.Fatalf("127.0.0.2, only in the old file: %d", st)
	}

	if err := d.srv.Reload(d.sameAddr(text(second, 9))); err != nil {
		t.Fatalf("reload with a new cap: %v", err)
	}
	if got := d.listener("web").Connections.Accepted; got != 0 {
		t.Fatalf("accepted %d after a new cap, want a rebuilt listener's 0", got)
	}
	if !closedUntouched(t, "127.0.0.3", addr) {
		t.Fatal("127.0.0.3 not refused by the rebuilt listener")
	}
	if got := deniedMetric(t, d, "web", "deny_list"); got != 3 {
		t.Errorf("deny_list refusals %v, want 3 across both reloads", got)
	}
}

// An http3 listener whose QUIC settings change is bound again at its
// address by a reload: the new socket refuses by the lists read for the
// reload, and keeps counting where the old one stopped.
func TestDenyListHTTP3Rebind(t *testing.T) {
	certFile, keyFile, pool := selfSigned(t)
	deny := writeList(t, t.TempDir(), "deny", "127.0.0.2\n")
	text := func(listen, retry string) string {
		return `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: quic
    protocol: http3
    listen: "` + listen + `"
    tls: {cert_file: "` + certFile + `", key_file: "` + keyFile + `"}
    quic: {retry: ` + retry + `}
    deny_file: ` + deny + `
    routes:
      - upstreams: ["{{backend}}"]
`
	}
	d := startDaemon(t, text("127.0.0.1:0", "always"))
	listen := d.srv.Addr("quic").String()
	url := "https://" + listen
	if err := h3Get(t, "127.0.0.2", url, pool); err == nil {
		t.Fatal("127.0.0.2 served before the reload")
	}
	before := deniedMetric(t, d, "quic", "deny_list")
	writeList(t, filepath.Dir(deny), "deny", "127.0.0.3\n")
	if err := d.srv.Reload(parseConfig(t, text(listen, "adaptive"), d.backend.URL())); err != nil {
		t.Fatalf("reload: %v", err)
	}
	if err := h3Get(t, "127.0.0.3", url, pool); err == nil {
		t.Fatal("127.0.0.3, added to the file, served after the reload")
	}
	if err := h3Get(t, "127.0.0.2", url, pool); err != nil {
		t.Fatalf("127.0.0.2, no longer in the file: %v", err)
	}
	if got := deniedMetric(t, d, "quic", "deny_list"); got <= before {
		t.Errorf("deny_list refusals %v after the rebind, want more than the %v before it", got, before)
	}
}
