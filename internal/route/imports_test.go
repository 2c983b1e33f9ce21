package route

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImportsNeitherDaemonNorListen fails when a non-test file of the
// package imports internal/daemon or internal/listen: the daemon hands a
// listener its table (Table.Handler, Table.Byte), so that the route table
// and the listeners stay apart, and the daemon alone assembles them.
func TestImportsNeitherDaemonNorListen(t *testing.T) {
	const internal = "github.com/seed-a07d1050/portcullis/internal/"
	forbidden := []string{internal + "daemon", internal + "listen"}
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
			for _, no := range forbidden {
				if path == no || strings.HasPrefix(path, no+"/") {
					t.Errorf("%s imports %s", file, path)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no source file found")
	}
}
