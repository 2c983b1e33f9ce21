// Package doctest checks, from a package's own tests, that configuration
// structs document what their zero values mean, so that a field added
// without saying so fails the build's tests instead of surprising a user.
package doctest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"strings"
	"testing"
)

// ZeroValuesDocumented fails t for every exported field of typ, a struct
// declared in file (a path relative to the test's package directory), whose
// doc comment is missing or does not say what its zero value means: the
// comment must mention "zero", "nil" or "empty" (or "false", for a bool).
func ZeroValuesDocumented(t testing.TB, file string, typ reflect.Type) {
	t.Helper()
	name, _, _ := strings.Cut(typ.Name(), "[") // a generic type's reflect name carries its arguments
	docs := fieldDocs(t, file, name)
	for i := range typ.NumField() {
		f := typ.Field(i)
		if !f.IsExported() {
			continue
		}
		doc := strings.ToLower(docs[f.Name])
		switch {
		case strings.TrimSpace(doc) == "":
			t.Errorf("%s.%s has no doc comment in %s", name, f.Name, file)
		case !mentionsZero(doc, f.Type.Kind() == reflect.Bool):
			t.Errorf("%s.%s does not say what its zero value means:\n%s", name, f.Name, docs[f.Name])
		}
	}
}

// mentionsZero reports whether a lower-cased doc comment says what a zero
// value means.
func mentionsZero(doc string, isBool bool) bool {
	for _, w := range []string{"zero", "nil", "empty"} {
		if strings.Contains(doc, w) {
			return true
		}
	}
	return isBool && strings.Contains(doc, "false")
}

// fieldDocs returns the doc comment of each field of the struct type named
// name in file.
func fieldDocs(t testing.TB, file, name string) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ParseComments)
	if err != nil {
		t.Fatalf("doctest: %v", err)
	}
	docs := map[string]string{}
	found := false
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok || ts.Name.Name != name {
			return true
		}
		st, ok := ts.Type.(*ast.StructType)
		if !ok {
			return false
		}
		found = true
		for _, field := range st.Fields.List {
			for _, n := range field.Names {
				docs[n.Name] = field.Doc.Text()
			}
			if len(field.Names) == 0 { // embedded: named by its type
				docs[embeddedName(field.Type)] = field.Doc.Text()
			}
		}
		return false
	})
	if !found {
		t.Fatalf("doctest: no struct type %s in %s", name, file)
	}
	return docs
}

// embeddedName is the field name of an embedded type: Policy for Policy,
// limit.Policy, Policy[K] or *Policy.
func embeddedName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.Ident:
		return t.Name
	case *ast.SelectorExpr:
		return t.Sel.Name
	case *ast.IndexExpr:
		return embeddedName(t.X)
	case *ast.IndexListExpr:
		return embeddedName(t.X)
	case *ast.StarExpr:
		return embeddedName(t.X)
	}
	return ""
}
