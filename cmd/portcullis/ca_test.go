package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/intercept"
)

func TestCACreate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	var out, errOut bytes.Buffer
	if code := run([]string{"ca", "create", "--out", dir, "--permit-domain", "corp.example,.internal.example"}, &out, &errOut); code != exitOK {
		t.Fatalf("exit %d\n%s", code, errOut.String())
	}
	certFile, keyFile := filepath.Join(dir, intercept.CACertFile), filepath.Join(dir, intercept.CAKeyFile)
	for _, want := range []string{certFile, keyFile, "--cacert " + certFile, "Firefox", "update-ca-certificates", "corp.example, .internal.example; no IP address", "SHA-256"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if fi, err := os.Stat(keyFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("key file: %v, mode %v; want 0600", err, fi.Mode())
	}
	ca, err := intercept.LoadCA(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if c := ca.Certificate(); !c.IsCA || len(c.PermittedDNSDomains) != 2 {
		t.Errorf("CA %v, constraints %v", c.IsCA, c.PermittedDNSDomains)
	}
	key, _ := os.ReadFile(keyFile)

	out.Reset()
	errOut.Reset()
	if code := run([]string{"ca", "create", "--out", dir}, &out, &errOut); code != exitFailure || !strings.Contains(errOut.String(), "never overwritten") {
		t.Errorf("second create: exit %d, %q; want 1 and a refusal", code, errOut.String())
	}
	if again, _ := os.ReadFile(keyFile); !bytes.Equal(again, key) {
		t.Error("the key was overwritten")
	}
}

func TestCACreateUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"ca"}, exitUsage, "ca create --out DIR"},
		{[]string{"ca", "destroy"}, exitUsage, "ca create --out DIR"},
		{[]string{"ca", "create"}, exitUsage, "--out DIR is required"},
		{[]string{"ca", "create", "--out", t.TempDir(), "--days", "0"}, exitUsage, "--days must be at least 1"},
		{[]string{"ca", "create", "--out", t.TempDir(), "--permit-domain", "not a name"}, exitUsage, "is not a DNS name"},
		{[]string{"ca", "create", "--out", t.TempDir(), "--permit-network", "10.0.0.0/8"}, exitUsage, "goes with --permit-domain"},
		{[]string{"ca", "create", "--out", t.TempDir(), "--permit-domain", "a.example", "--permit-network", "10.1.0.0/8"}, exitUsage, "did you mean 10.0.0.0/8"},
		{[]string{"ca", "create", "--out", t.TempDir(), "--permit-domain", "a.example", "--permit-network", "ten"}, exitUsage, "is not a CIDR"},
	} {
		var out, errOut bytes.Buffer
		code := run(tc.args, &out, &errOut)
		if code != tc.code || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, errOut.String(), tc.code, tc.want)
		}
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"ca", "create", "--help"}, &out, &errOut); code != exitOK || !strings.Contains(out.String(), "-permit-domain") {
		t.Errorf("help: exit %d, %q", code, out.String())
	}
}
