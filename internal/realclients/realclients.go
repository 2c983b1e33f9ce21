// Package realclients runs, in tests, HTTP clients nobody in this project
// wrote: curl and Python's requests. A test that needs one and does not find
// it skips, except under CI=true, where it fails (.ci/run installs curl and
// python3-requests).
package realclients

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Curl returns the path of curl, or skips (fails under CI=true).
func Curl(t testing.TB) string {
	t.Helper()
	return need(t, "curl", func() (string, bool) {
		p, err := exec.LookPath("curl")
		return p, err == nil
	})
}

// Python returns an interpreter that can import requests: $PYTHON, python3
// on PATH, or /usr/bin/python3 (where Debian's python3-requests installs
// it); or skips (fails under CI=true).
func Python(t testing.TB) string {
	t.Helper()
	return need(t, "python3 with requests (apt-get install python3-requests)", func() (string, bool) {
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
	})
}

func need(t testing.TB, what string, find func() (string, bool)) string {
	t.Helper()
	if path, ok := find(); ok {
		return path
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is missing (CI=true); .ci/run installs it", what)
	}
	t.Skipf("%s is missing: skipping (install it to run this test)", what)
	return ""
}

// CleanEnv is the environment without any proxy setting (http_proxy,
// HTTPS_PROXY, no_proxy, ...), so that a command uses only the proxy its
// arguments name.
func CleanEnv() []string {
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

// Run runs name with args in CleanEnv, killed after limit, and returns its
// combined output.
func Run(t testing.TB, limit time.Duration, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = CleanEnv()
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// PythonGet is a Python program using requests: it GETs argv[2] through the
// proxy argv[1] (for http and https URLs alike), trusting the CA file
// argv[3], and prints the status code and the body, or "proxyerror" and the
// error when the proxy refused a CONNECT.
const PythonGet = `
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
