package main

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// examplesDir is the repository's examples/, from this package's directory.
const examplesDir = "../../examples"

// exampleConfigs returns every YAML file under examples/.
func exampleConfigs(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(examplesDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && (strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no YAML file under %s", examplesDir)
	}
	return files
}

// Every example configuration passes "portcullis check", the command a user
// runs, so that none of them rots when the schema changes.
func TestExamplesCheck(t *testing.T) {
	for _, file := range exampleConfigs(t) {
		t.Run(strings.TrimPrefix(file, examplesDir+"/"), func(t *testing.T) {
			var out, errOut bytes.Buffer
			if code := run([]string{"check", "--config", file}, &out, &errOut); code != exitOK {
				t.Fatalf("portcullis check --config %s: exit %d\n%s", file, code, errOut.String())
			}
			if !strings.Contains(out.String(), "is valid") {
				t.Errorf("check printed no verdict:\n%s", out.String())
			}
		})
	}
}

// The README's one-minute tour checks a portcullis.yaml: that file exists
// and the README names it where it is.
func TestReadmeNamesTheExampleConfig(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	const cmd = "check --config examples/portcullis.yaml"
	if !strings.Contains(string(readme), cmd) {
		t.Errorf("README.md lacks %q", cmd)
	}
	if _, err := os.Stat(filepath.Join(examplesDir, "portcullis.yaml")); err != nil {
		t.Error(err)
	}
}

// The example certificate must not expire under the examples: it is
// replaced when less than 90 days remain.
func TestExampleCertificateIsCurrent(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(examplesDir, "files", "cert.pem"))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatal("examples/files/cert.pem holds no PEM block")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if left := time.Until(cert.NotAfter); left < 90*24*time.Hour {
		t.Errorf("examples/files/cert.pem expires %v (in %v): make a new one as examples/files/README.md says",
			cert.NotAfter, left.Round(time.Hour))
	}
	if err := cert.VerifyHostname("localhost"); err != nil {
		t.Error(err)
	}
}
