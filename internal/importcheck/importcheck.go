// Package importcheck lets a package's tests hold its non-test files to
// the imports its design allows (a leaf imports none of the project's
// packages; the route table never imports the listeners), so that a
// boundary drawn in the docs fails a test when it is crossed.
package importcheck

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Refuse fails t for every import of a non-test Go file in dir that bad
// reports, naming the file and the import, and fails it when dir holds no
// such file at all (a wrong dir would otherwise pass).
func Refuse(t testing.TB, dir string, bad func(path string) bool) {
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
		f, err := parser.ParseFile(fset, file, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, imp := range f.Imports {
			if path, _ := strconv.Unquote(imp.Path.Value); bad(path) {
				t.Errorf("%s imports %s", file, path)
			}
		}
	}
	if checked == 0 {
		t.Fatalf("no source file found in %s", dir)
	}
}
