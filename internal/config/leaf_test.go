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

// textOnly are the packages of the project config may import: they read text into plain
// values and import no package of the project themselves (TestConfigIsALeaf checks).
var textOnly = map[string]string{
	module + "internal/ratetext": "../ratetext",
}

// TestConfigIsALeaf fails when a non-test file of the package imports a package of the
// project other than the text readers of textOnly, or when one of those imports one:
// config parses and checks YAML into plain values, and what those values describe is built
// by the daemon (daemon.Check), so that config can be read, fuzzed and used by other
// commands without the daemon's runtime packages.
func TestConfigIsALeaf(t *testing.T) {
	checkImportsNone(t, ".", textOnly)
	for _, dir := range textOnly {
		checkImportsNone(t, dir, nil)
	}
}

// checkImportsNone fails the test when a non-test file in dir imports a package of the
// project that allowed does not name.
func checkImportsNone(t *testing.T, dir string, allowed map[string]string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
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
			if _, ok := allowed[path]; strings.HasPrefix(path, module) && !ok {
				t.Errorf("%s imports %s: it must import no package of the project", file, path)
			}
		}
	}
	if checked == 0 {
		t.Fatalf("no source file found in %s", dir)
	}
}
