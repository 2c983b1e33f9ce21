package daemon_test

import (
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// netnsChild marks the copy of the test binary that runs inside its own
// network namespace.
const netnsChild = "PORTCULLIS_TEST_NETNS_CHILD"

// A client from a public address (198.51.100.7, on lo of a network
// namespace of the test's own, so that nothing outside it changes) is
// refused by a forward listener without auth or allow_file, while a
// loopback client of the same listener is served: the e2e of
// TestForwardLocalClientsOnly with a real peer address rather than one a
// trusted proxy names. It runs as root only (unshare -n, ip).
func TestForwardPublicPeerRefused(t *testing.T) {
	if os.Getenv(netnsChild) == "" {
		if os.Geteuid() != 0 {
			t.Skip("needs root for a network namespace; TestForwardLocalClientsOnly covers the decision")
		}
		if _, err := exec.LookPath("unshare"); err != nil {
			t.Skip("no unshare")
		}
		cmd := exec.Command("unshare", "-n", os.Args[0], "-test.run=^TestForwardPublicPeerRefused$", "-test.count=1")
		cmd.Env = append(os.Environ(), netnsChild+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "PASS") {
			t.Fatalf("in a network namespace: %v\n%s", err, out)
		}
		return
	}
	for _, c := range [][]string{{"ip", "link", "set", "lo", "up"}, {"ip", "addr", "add", "198.51.100.7/32", "dev", "lo"}} {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", c, err, out)
		}
	}
	d, logs := startLogged(t, `
listeners:
  - name: egress
    protocol: http
    listen: "127.0.0.1:0"
    mode: forward
    forward:
      destinations: {allow: ["127.0.0.0/8"]}
`)
	for _, tc := range []struct {
		from string
		want int
	}{{"127.0.0.2", http.StatusOK}, {"198.51.100.7", http.StatusForbidden}} {
		resp, err := d.proxyClient("egress", "", "", tc.from).Get(d.backend.URL() + "/")
		if err != nil {
			t.Fatal(err)
		}
		body := readBody(t, resp)
		if resp.StatusCode != tc.want {
			t.Errorf("from %s: %d %q, want %d", tc.from, resp.StatusCode, body, tc.want)
		}
	}
	if !strings.Contains(logs.String(), "client=198.51.100.7") {
		t.Errorf("no log line for the refused client:\n%s", logs)
	}
}
