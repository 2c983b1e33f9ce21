package connlimit

import (
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"strings"
	"testing"
)

// Every Config field says what its zero value means; a field added without
// that fails here.
func TestConfigFieldsDocumentZero(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "config.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok || ts.Name.Name != "Config" {
			return true
		}
		for _, field := range ts.Type.(*ast.StructType).Fields.List {
			for _, name := range field.Names {
				docs[name.Name] = field.Doc.Text()
			}
		}
		return false
	})
	typ := reflect.TypeFor[Config]()
	for i := range typ.NumField() {
		name := typ.Field(i).Name
		doc := strings.ToLower(docs[name])
		if doc == "" {
			t.Errorf("Config.%s has no doc comment", name)
			continue
		}
		if !strings.Contains(doc, "zero") && !strings.Contains(doc, "nil") && !strings.Contains(doc, "empty") {
			t.Errorf("Config.%s does not say what its zero value means", name)
		}
	}
}

// NewListener applies defaults on its own copy and leaves the caller's
// Config as it was.
func TestNewListenerDoesNotMutateConfig(t *testing.T) {
	cfg := Config{Levels: []Level{{IPv4Bits: 24, Max: 9}}}
	l := newTestListener(t, nil, cfg)
	if cfg.PerClient != 0 || cfg.Logger != nil || cfg.Name != "" {
		t.Fatalf("caller's Config changed: %+v", cfg)
	}
	cfg.Levels[0].Max = 1
	if l.s.Levels[0].Max != 9 || l.s.PerClient != DefaultPerClient || l.s.ProxyHeaderTimeout != DefaultProxyHeaderTimeout {
		t.Fatalf("listener settings = %+v", l.s)
	}
}
