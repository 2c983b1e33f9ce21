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
		if d.IsDir() && path == filepath.Join(examplesDir, "envoy") {
			return filepath.SkipDir // Envoy's files and rate limit rules: rls_test.go checks them
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

// Every Portcullis block of docs/migrating.md is a file of
// examples/migrating/ (which TestExamplesCheck checks), word for word, and
// every such file is shown there.
func TestMigratingBlocksAreTheCheckedExamples(t *testing.T) {
	doc, err := os.ReadFile("../../docs/migrating.md")
	if err != nil {
		t.Fatal(err)
	}
	const marker = "<!-- portcullis: "
	shown := map[string]bool{}
	rest := string(doc)
	for {
		i := strings.Index(rest, marker)
		if i < 0 {
			break
		}
		rest = rest[i+len(marker):]
		name, after, ok := strings.Cut(rest, " -->\n```yaml\n")
		if !ok {
			t.Fatalf("a %q marker is not followed by a yaml block", marker)
		}
		block, _, ok := strings.Cut(after, "```\n")
		if !ok {
			t.Fatalf("the yaml block of %s does not end", name)
		}
		file, err := os.ReadFile(filepath.Join("../..", name))
		if err != nil {
			t.Errorf("docs/migrating.md shows %s: %v", name, err)
			continue
		}
		if block != string(file) {
			t.Errorf("docs/migrating.md's block for %s differs from the file", name)
		}
		shown[filepath.Base(name)] = true
	}
	files, err := filepath.Glob(filepath.Join(examplesDir, "migrating", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples/migrating/*.yaml: %v", err)
	}
	for _, f := range files {
		if !shown[filepath.Base(f)] {
			t.Errorf("%s is not shown in docs/migrating.md", f)
		}
	}
}
