package forward_test

import (
	"github.com/seed-a07d1050/portcullis/internal/proxytest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/realclients"
)

// These tests drive the proxy with clients nobody here wrote: curl and
// Python's requests. Without them the tests skip, except under CI=true,
// where they fail (.ci/run installs curl and python3-requests).

func run(t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	return realclients.Run(t, waitLimit, name, args...)
}

func certFile(t *testing.T, s *stack) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(path, s.cert.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestCurl(t *testing.T) {
	curl := realclients.Curl(t)
	plain, tlsTarget := proxytest.NewTarget(t, proxytest.TargetOptions{}), proxytest.NewTarget(t, proxytest.TargetOptions{Cert: sharedCert(t)})
	withAuth := newStack(t, stackOptions{users: []string{"alice", "alice-pw"}})
	open := newStack(t, stackOptions{})
	ca := certFile(t, withAuth)
	proxyURL := func(s *stack, userinfo string) string {
		if userinfo == "" {
			return "http://" + s.addr
		}
		return "http://" + userinfo + "@" + s.addr
	}
	for _, tc := range []struct {
		name, proxy, url string
		want             string // last line: the code curl reports
	}{
		{"http authenticated", proxyURL(withAuth, "alice:alice-pw"), "http://" + plain.Addr + "/echo", "200"},
		{"https authenticated", proxyURL(withAuth, "alice:alice-pw"), "https://" + tlsTarget.Addr + "/echo", "200"},
		{"http no auth needed", proxyURL(open, ""), "http://" + plain.Addr + "/echo", "200"},
		{"https no auth needed", proxyURL(open, ""), "https://" + tlsTarget.Addr + "/echo", "200"},
		{"http without credentials", proxyURL(withAuth, ""), "http://" + plain.Addr + "/echo", "407"},
		{"http wrong password", proxyURL(withAuth, "alice:nope"), "http://" + plain.Addr + "/echo", "407"},
		{"https without credentials", proxyURL(withAuth, ""), "https://" + tlsTarget.Addr + "/echo", "407"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// %{http_connect} is the proxy's answer to CONNECT; %{http_code}
			// the final one (000 when the tunnel was refused).
			out, err := run(t, curl, "-sS", "--max-time", "10", "-x", tc.proxy, "--cacert", ca,
				"-w", "\n%{http_connect} %{http_code}", tc.url)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			codes := strings.Fields(lines[len(lines)-1])
			if len(codes) != 2 {
				t.Fatalf("curl: %v\n%s", err, out)
			}
			connectCode, code := codes[0], codes[1]
			if strings.HasPrefix(tc.url, "https") && tc.want != "200" {
				if connectCode != tc.want {
					t.Fatalf("CONNECT answered %s, want %s\n%s", connectCode, tc.want, out)
				}
				return
			}
			if code != tc.want {
				t.Fatalf("curl got %s, want %s (err %v)\n%s", code, tc.want, err, out)
			}
			if tc.want == "200" {
				e := proxytest.DecodeEcho(t, []byte(strings.Join(lines[:len(lines)-1], "\n")))
				if e.Header.Get("Proxy-Authorization") != "" || e.Header.Get("Proxy-Connection") != "" {
					t.Fatalf("proxy headers reached the target: %v", e.Header)
				}
			}
		})
	}
}

func TestPythonRequests(t *testing.T) {
	python := realclients.Python(t)
	plain, tlsTarget := proxytest.NewTarget(t, proxytest.TargetOptions{}), proxytest.NewTarget(t, proxytest.TargetOptions{Cert: sharedCert(t)})
	withAuth := newStack(t, stackOptions{users: []string{"alice", "alice-pw"}})
	open := newStack(t, stackOptions{})
	ca := certFile(t, withAuth)
	for _, tc := range []struct {
		name, proxy, url string
		want             string // first line of output
		detail           string // in the rest of the output
	}{
		{"http authenticated", "http://alice:alice-pw@" + withAuth.addr, "http://" + plain.Addr + "/echo", "200", `"Host":"` + plain.Addr},
		{"https authenticated", "http://alice:alice-pw@" + withAuth.addr, "https://" + tlsTarget.Addr + "/echo", "200", `"Host":"` + tlsTarget.Addr},
		{"http no auth needed", "http://" + open.addr, "http://" + plain.Addr + "/echo", "200", `"URI":"/echo"`},
		{"https no auth needed", "http://" + open.addr, "https://" + tlsTarget.Addr + "/echo", "200", `"URI":"/echo"`},
		{"http without credentials", "http://" + withAuth.addr, "http://" + plain.Addr + "/echo", "407", "proxy authentication required"},
		{"https without credentials", "http://" + withAuth.addr, "https://" + tlsTarget.Addr + "/echo", "proxyerror", "407"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := run(t, python, "-c", realclients.PythonGet, tc.proxy, tc.url, ca)
			if err != nil {
				t.Fatalf("python: %v\n%s", err, out)
			}
			first, rest, _ := strings.Cut(out, "\n")
			if first != tc.want || !strings.Contains(rest, tc.detail) {
				t.Fatalf("got %q, want %q with %q\n%s", first, tc.want, tc.detail, out)
			}
			if tc.want == "200" && strings.Contains(rest, "Proxy-Authorization") {
				t.Fatalf("Proxy-Authorization reached the target:\n%s", out)
			}
		})
	}
}
