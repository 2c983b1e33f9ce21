package main

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/backend"
)

// refusedFrom dials addr from ip and reports whether the daemon closes the
// connection without a byte.
func refusedFrom(t *testing.T, ip, addr string) bool {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: waitLimit}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial from %s: %v", ip, err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(waitLimit))
	n, err := c.Read(make([]byte, 1))
	ne, timeout := err.(net.Error)
	return n == 0 && err != nil && !(timeout && ne.Timeout())
}

// TestRunDenyFileFromFlags runs from --deny-file and --allow-file and
// reads the deny file again on SIGHUP.
func TestRunDenyFileFromFlags(t *testing.T) {
	b, err := backend.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	dir := t.TempDir()
	deny, allow := filepath.Join(dir, "deny"), filepath.Join(dir, "allow")
	for file, text := range map[string]string{deny: "127.0.0.2\n", allow: "127.0.0.0/24\n"} {
		if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	sig := &signals{}
	logs := &syncBuffer{}
	srv, code := startRun(t, []string{"run", "--listen", "127.0.0.1:0", "--upstream", b.URL(),
		"--deny-file", deny, "--allow-file", allow}, sig, io.Discard, logs)
	addr := srv.Addr("http").String()
	if !refusedFrom(t, "127.0.0.2", addr) {
		t.Fatal("127.0.0.2, in --deny-file, not refused")
	}
	if !refusedFrom(t, "127.0.1.1", addr) {
		t.Fatal("127.0.1.1, outside --allow-file, not refused")
	}
	get := func(ip string) int {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: waitLimit}
		c := &http.Client{Timeout: waitLimit, Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
		resp, err := c.Get("http://" + addr + "/")
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if st := get("127.0.0.3"); st != http.StatusOK {
		t.Fatalf("127.0.0.3: %d", st)
	}
	if err := os.WriteFile(deny, []byte("127.0.0.2\n127.0.0.3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sig.send(syscall.SIGHUP)
	if !waitFor(func() bool { return get("127.0.0.3") == 0 }) {
		t.Fatalf("127.0.0.3, added to the file, still served after SIGHUP:\n%s", logs.String())
	}
	sig.send(syscall.SIGTERM)
	if c := waitCode(t, code); c != exitOK {
		t.Fatalf("exit code %d", c)
	}
}

// TestCheckReportsBadListFile: check names the configuration's line and
// the list file's.
func TestCheckReportsBadListFile(t *testing.T) {
	dir := t.TempDir()
	deny := filepath.Join(dir, "deny.list")
	if err := os.WriteFile(deny, []byte("10.0.0.0/8\n# fine so far\n10.0.0.0/33\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	file := writeFile(t, "listeners:\n  - protocol: http\n    listen: 127.0.0.1:0\n    deny_file: "+deny+"\n    routes: [{upstreams: [\"http://127.0.0.1:1\"]}]\n")
	var out, errOut bytes.Buffer
	if code := run([]string{"check", "--config", file}, &out, &errOut); code != exitUsage {
		t.Fatalf("exit %d, want %d", code, exitUsage)
	}
	want := file + `:4:16: listeners[0].deny_file: ` + deny + `:3: not an IP address or CIDR (got "10.0.0.0/33")`
	if got := strings.TrimSpace(errOut.String()); got != want {
		t.Errorf("check said\n %s\nwant\n %s", got, want)
	}
}
