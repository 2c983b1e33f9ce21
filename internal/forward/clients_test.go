package forward_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// These tests drive the proxy with clients nobody here wrote: curl and
// Python's requests. Without them the tests skip, except under CI=true,
// where they fail (.ci/run installs curl and python3-requests).

// need returns the path of a tool, or skips (fails under CI=true).
func need(t *testing.T, what string, find func() (string, bool)) string {
	t.Helper()
	path, ok := find()
	if ok {
		return path
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is missing (CI=true); .ci/run installs it", what)
	}
	t.Skipf("%s is missing: skipping (install it to run this test)", what)
	return ""
}

func findCurl() (string, bool) {
	p, err := exec.LookPath("curl")
	return p, err == nil
}

// findPython returns an interpreter that can import requests: $PYTHON,
// python3 on PATH, or /usr/bin/python3 (where Debian's python3-requests
// installs it).
func findPython() (string, bool) {
	cands := []string{os.Getenv("PYTHON")}
	if p, err := exec.LookPath("python3"); err == nil {
		cands = append(cands, p)
	}
	cands = append(cands, "/usr/bin/python3")
	for _, c := range cands {
		if c == "" {
			continue
		}
		if err := exec.Command(c, "-c", "import requests").Run(); err == nil {
			return c, true
		}
	}
	return "", false
}

// cleanEnv is the environment without any proxy setting, so that only the
// proxy each command names is used.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasSuffix(strings.ToLower(name), "_proxy") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

func run(t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = cleanEnv()
	out, err := cmd.CombinedOutput()
	return string(out), err
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
	curl := need(t, "curl", findCurl)
	plain, tlsTarget := newTarget(t, false), newTarget(t, true)
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
		{"http authenticated", proxyURL(withAuth, "alice:alice-pw"), "http://" + plain.addr + "/echo", "200"},
		{"https authenticated", proxyURL(withAuth, "alice:alice-pw"), "https://" + tlsTarget.addr + "/echo", "200"},
		{"http no auth needed", proxyURL(open, ""), "http://" + plain.addr + "/echo", "200"},
		{"https no auth needed", proxyURL(open, ""), "https://" + tlsTarget.addr + "/echo", "200"},
		{"http without credentials", proxyURL(withAuth, ""), "http://" + plain.addr + "/echo", "407"},
		{"http wrong password", proxyURL(withAuth, "alice:nope"), "http://" + plain.addr + "/echo", "407"},
		{"https without credentials", proxyURL(withAuth, ""), "https://" + tlsTarget.addr + "/echo", "407"},
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
				e := decodeEcho(t, strings.Join(lines[:len(lines)-1], "\n"))
				if e.Header.Get("Proxy-Authorization") != "" || e.Header.Get("Proxy-Connection") != "" {
					t.Fatalf("proxy headers reached the target: %v", e.Header)
				}
			}
		})
	}
}

const pythonClient = `
import sys, requests
proxy, url, ca = sys.argv[1], sys.argv[2], sys.argv[3]
s = requests.Session()
s.trust_env = False  # only the proxy given here
try:
    r = s.get(url, proxies={"http": proxy, "https": proxy}, verify=ca, timeout=10)
    print(r.status_code)
    print(r.text)
except requests.exceptions.ProxyError as e:
    print("proxyerror")
    print(e)
`

func TestPythonRequests(t *testing.T) {
	python := need(t, "python3 with requests (apt-get install python3-requests)", findPython)
	plain, tlsTarget := newTarget(t, false), newTarget(t, true)
	withAuth := newStack(t, stackOptions{users: []string{"alice", "alice-pw"}})
	open := newStack(t, stackOptions{})
	ca := certFile(t, withAuth)
	for _, tc := range []struct {
		name, proxy, url string
		want             string // first line of output
		detail           string // in the rest of the output
	}{
		{"http authenticated", "http://alice:alice-pw@" + withAuth.addr, "http://" + plain.addr + "/echo", "200", `"Host":"` + plain.addr},
		{"https authenticated", "http://alice:alice-pw@" + withAuth.addr, "https://" + tlsTarget.addr + "/echo", "200", `"Host":"` + tlsTarget.addr},
		{"http no auth needed", "http://" + open.addr, "http://" + plain.addr + "/echo", "200", `"URI":"/echo"`},
		{"https no auth needed", "http://" + open.addr, "https://" + tlsTarget.addr + "/echo", "200", `"URI":"/echo"`},
		{"http without credentials", "http://" + withAuth.addr, "http://" + plain.addr + "/echo", "407", "proxy authentication required"},
		{"https without credentials", "http://" + withAuth.addr, "https://" + tlsTarget.addr + "/echo", "proxyerror", "407"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := run(t, python, "-c", pythonClient, tc.proxy, tc.url, ca)
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
