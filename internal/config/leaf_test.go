package config_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// module is the path every package of the project starts with.
const module = "github.com/seed-a07d1050/portcullis/"

// TestConfigIsALeaf fails when a non-test file of the package imports a package of the
// project: config parses and checks YAML into plain values with the standard library, and
// what those values describe is built by the daemon (daemon.Check), so that config can be
// read, fuzzed and used by other commands without the daemon's runtime packages.
func TestConfigIsALeaf(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, file, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(path, module) {
				t.Errorf("%s imports %s: config must import no package of the project", file, path)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no source file found")
	}
}
