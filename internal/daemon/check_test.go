package daemon_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/daemon"
)

// The bases of checkCases: a reverse listener (lines 1 to 5), a forward listener (lines 1 to
// 4) and a forward listener intercepting with the test CA (lines 1 to 8), as config's own
// error tests write them.
const (
	checkBase = `listeners:
  - protocol: http
    listen: 127.0.0.1:8080
    routes:
      - upstreams: [http://127.0.0.1:9000]
`
	fwdBase = `listeners:
  - protocol: http
    listen: 127.0.0.1:3128
    mode: forward
`
	interceptBase = fwdBase + `    forward:
      intercept:
        ca_cert: testdata/files/intercept-ca.pem
        ca_key: testdata/files/intercept-ca-key.pem
`
)

// checkCases are configurations that config.Parse accepts (config is a leaf and checks
// only what the standard library can) and the daemon's build pass refuses, with the exact
// message: placed at the field that named the value, as Validate's errors are.
var checkCases = []struct {
	name string
	yaml string
	want string // $FILES stands for the absolute testdata/files directory
}{
	{"deny file bad line", checkBase + "    deny_file: testdata/files/bad.list\n",
		`portcullis.yaml:6:16: listeners[0].deny_file: $FILES/bad.list:4: host bits set: write 10.0.0.0/8 for the network or 10.1.2.3/32 for the address (got "10.1.2.3/8")`},
	{"allow file bad line", checkBase + "    allow_file: testdata/files/server.crt\n",
		`portcullis.yaml:6:17: listeners[0].allow_file: $FILES/server.crt:1: not an IP address or CIDR (got "-----BEGIN CERTIFICATE-----")`},
	{"allow file empty", checkBase + "    allow_file: testdata/files/empty.list\n",
		`portcullis.yaml:6:17: listeners[0].allow_file: holds no entry, so every client would be refused (to refuse everyone, write 0.0.0.0/0 and ::/0 in a deny_file) (got "$FILES/empty.list")`},
	{"forward rate target override not a target", fwdBase + "    rate: {rate: 10r/s, key: target_host, overrides: {\"127.1\": 100r/s}}\n",
		`portcullis.yaml:5:64: listeners[0].rate.overrides["127.1"]: must be a target host or host:port: numeric host that is not a dotted-quad IPv4 address (got "127.1")`},
	{"forward rate target overrides naming one target twice", fwdBase + "    rate: {rate: 10r/s, key: target_host, overrides: {\"a.example:443\": 1r/s, \"A.example.:443\": 2r/s}}\n",
		`portcullis.yaml:5:54: listeners[0].rate.overrides: target overrides name a.example:443 twice`},
	{"htpasswd not bcrypt", checkBase + "    auth: {htpasswd: testdata/files/md5.htpasswd}\n",
		"portcullis.yaml:6:22: listeners[0].auth.htpasswd: does not load: $FILES/md5.htpasswd:1: user \"alice\": the hash is Apache MD5 ($apr1$); only bcrypt is accepted: make one with `htpasswd -B $FILES/md5.htpasswd alice`"},
	{"target override not a target", fwdBase + "    forward: {limits: [{key: target_host, overrides: {\"127.1\": 2}}]}\n",
		`portcullis.yaml:5:64: listeners[0].forward.limits[0].overrides["127.1"]: must be a target host or host:port: numeric host that is not a dotted-quad IPv4 address (got "127.1")`},
	{"target overrides naming one target twice", fwdBase + "    forward: {limits: [{key: target_host, overrides: {\"a.example:443\": 2, \"A.example.:443\": 3}}]}\n",
		`portcullis.yaml:5:54: listeners[0].forward.limits[0].overrides: target overrides name a.example:443 twice`},
	{"intercept ca_cert not PEM", fwdBase + "    forward: {intercept: {ca_cert: testdata/files/garbage.pem, ca_key: testdata/files/intercept-ca-key.pem}}\n",
		`portcullis.yaml:5:36: listeners[0].forward.intercept.ca_cert: does not load: no PEM CERTIFICATE block in the CA certificate file (got "$FILES/garbage.pem")`},
	{"intercept ca_key not PEM", fwdBase + "    forward: {intercept: {ca_cert: testdata/files/intercept-ca.pem, ca_key: testdata/files/garbage.pem}}\n",
		`portcullis.yaml:5:77: listeners[0].forward.intercept.ca_key: does not load: no PEM private key block (PRIVATE KEY, EC PRIVATE KEY or RSA PRIVATE KEY) in the CA key file (got "$FILES/garbage.pem")`},
	{"intercept ca_key of another certificate", fwdBase + "    forward: {intercept: {ca_cert: testdata/files/intercept-ca.pem, ca_key: testdata/files/other.key}}\n",
		`portcullis.yaml:5:77: listeners[0].forward.intercept.ca_key: does not load: the private key does not match the CA certificate (the certificate is for "portcullis config test CA (test file)") (got "$FILES/other.key")`},
	{"intercept rule with a port", interceptBase + "        intercept: [\"*.example.com:443\"]\n",
		`portcullis.yaml:9:21: listeners[0].forward.intercept.intercept[0]: a rule names no port (and an IPv6 address is written whole, 2001:db8::1) (got "*.example.com:443")`},
	{"bypass network with host bits", interceptBase + "        bypass: [example.com, 10.1.2.3/8]\n",
		`portcullis.yaml:9:31: listeners[0].forward.intercept.bypass[1]: host bits set; did you mean 10.0.0.0/8? (got "10.1.2.3/8")`},
	{"intercept ca_key readable by others", fwdBase + "    forward: {intercept: {ca_cert: testdata/files/intercept-ca.pem, ca_key: testdata/files/intercept-ca-key-readable.pem}}\n",
		`portcullis.yaml:5:77: listeners[0].forward.intercept.ca_key: the CA key file is readable by group or others: $FILES/intercept-ca-key-readable.pem has mode 0644; chmod 600 it (or set intercept.allow_readable_ca_key: true) (got "$FILES/intercept-ca-key-readable.pem")`},
	{"upstream ca_file without certificates", interceptBase + "        upstream: {ca_file: testdata/files/garbage.pem}\n",
		`portcullis.yaml:9:29: listeners[0].forward.intercept.upstream.ca_file: does not load: holds no PEM CERTIFICATE (got "$FILES/garbage.pem")`},
}

// checkFiles makes a directory whose testdata/files is config's test files, makes it the
// working directory (Parse resolves relative paths against the YAML file's directory), and
// returns the absolute testdata/files path the messages show. It gives the test CA keys the
// modes their cases need: git checks files out readable by everyone.
func checkFiles(t *testing.T) string {
	t.Helper()
	src, err := filepath.Abs("../config/testdata/files")
	if err != nil {
		t.Fatal(err)
	}
	for file, mode := range map[string]os.FileMode{"intercept-ca-key.pem": 0o600, "intercept-ca-key-readable.pem": 0o644} {
		if err := os.Chmod(filepath.Join(src, file), mode); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "testdata"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(src, filepath.Join(dir, "testdata", "files")); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	return filepath.Join(dir, "testdata", "files")
}

// TestCheckErrors feeds each configuration to Check, Start and the Reload of a running
// server, and checks that all three refuse it with the same message, the field's file and
// line included: what `portcullis check` prints is what run and a reload say. The running
// server keeps serving its configuration.
func TestCheckErrors(t *testing.T) {
	dir := checkFiles(t)
	running := startDaemon(t, `admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: 127.0.0.1:0
    routes:
      - upstreams: ["{{backend}}"]
`).srv
	for _, tt := range checkCases {
		t.Run(tt.name, func(t *testing.T) {
			want := strings.ReplaceAll(tt.want, "$FILES", dir)
			cfg, err := config.Parse("portcullis.yaml", []byte(tt.yaml))
			if err != nil {
				t.Fatalf("Parse: %v; config alone should accept it", err)
			}
			err = daemon.Check(cfg)
			if err == nil {
				t.Fatalf("Check succeeded, want %q", want)
			}
			if got := err.Error(); got != want {
				t.Errorf("Check:\n got  %s\n want %s", got, want)
			}
			var ce *config.Error
			if !errors.Is(err, config.ErrInvalid) || !errors.As(err, &ce) {
				t.Errorf("Check's error %v is not a *config.Error wrapping config.ErrInvalid", err)
			}
			srv, err := daemon.Start(cfg, daemon.Options{Logger: testLogger(t)})
			if err == nil {
				_ = srv.Close()
				t.Fatalf("Start succeeded, want %q", want)
			}
			if got := err.Error(); got != "daemon: "+want {
				t.Errorf("Start:\n got  %s\n want daemon: %s", got, want)
			}
			if err := running.Reload(cfg); err == nil || err.Error() != "daemon: "+want {
				t.Errorf("Reload:\n got  %v\n want daemon: %s", err, want)
			}
			if running.Addr("web") == nil {
				t.Errorf("the running server lost its listener after a refused reload")
			}
		})
	}
}
