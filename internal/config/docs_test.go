package config_test

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/config"
)

const reference = "../../docs/config.md"

// schemaField is one YAML field found by walking the config types.
type schemaField struct {
	path   string // as docs/config.md writes it: listeners[].routes[].limit, limit.key
	goType string // the Go struct and field, for messages: Listener.MaxConns
	typ    reflect.Type
}

// sharedRoots are types documented once under their own name rather than at every place
// they appear.
var sharedRoots = map[reflect.Type]string{
	reflect.TypeFor[config.Limit]():    "limit",
	reflect.TypeFor[config.Rate]():     "rate",
	reflect.TypeFor[config.ConnRate](): "conn_rate",
}

// textTypes are struct types written in YAML as one string (they read and write their own
// text form): leaves of the schema, documented as strings.
var textTypes = map[reflect.Type]bool{
	reflect.TypeFor[config.RateValue](): true,
	reflect.TypeFor[config.RateLimit](): true,
}

// schema walks every field of Config and the types it holds, by reflection.
func schema(t *testing.T) []schemaField {
	t.Helper()
	var out []schemaField
	done := make(map[reflect.Type]bool)
	var walk func(typ reflect.Type, prefix string)
	walk = func(typ reflect.Type, prefix string) {
		for i := range typ.NumField() {
			sf := typ.Field(i)
			if !sf.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(sf.Tag.Get("yaml"), ",")
			if name == "" || name == "-" {
				t.Errorf("%s.%s has no yaml tag", typ.Name(), sf.Name)
				continue
			}
			path := name
			if prefix != "" {
				path = prefix + "." + name
			}
			out = append(out, schemaField{path: path, goType: typ.Name() + "." + sf.Name, typ: sf.Type})
			ft := sf.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct && ft.Elem() != reflect.TypeFor[netip.Prefix]() {
				if root, ok := sharedRoots[ft.Elem()]; ok {
					if !done[ft.Elem()] {
						done[ft.Elem()] = true
						walk(ft.Elem(), root)
					}
					continue
				}
				walk(ft.Elem(), path+"[]")
				continue
			}
			if ft.Kind() != reflect.Struct || ft == reflect.TypeFor[netip.Prefix]() || textTypes[ft] {
				continue
			}
			if root, ok := sharedRoots[ft]; ok {
				if !done[ft] {
					done[ft] = true
					walk(ft, root)
				}
				continue
			}
			walk(ft, path)
		}
	}
	walk(reflect.TypeFor[config.Config](), "")
	return out
}

var rowRE = regexp.MustCompile("^\\| `([^`]+)` \\|(.*)$")

// fieldTableHeader starts every field table of docs/config.md.
const fieldTableHeader = "| Field | Type | Default | Zero / negative | Meaning |"

// referenceRows returns the rows of the field tables of docs/config.md: path to the cells
// after the path.
func referenceRows(t *testing.T) map[string][]string {
	t.Helper()
	text, err := os.ReadFile(reference)
	if err != nil {
		t.Fatal(err)
	}
	rows := make(map[string][]string)
	inFieldTable := false
	for _, line := range strings.Split(string(text), "\n") {
		switch {
		case line == fieldTableHeader:
			inFieldTable = true
			continue
		case !strings.HasPrefix(line, "|"):
			inFieldTable = false
			continue
		}
		m := rowRE.FindStringSubmatch(line)
		if !inFieldTable || m == nil {
			continue
		}
		cells := strings.Split(strings.TrimSuffix(m[2], "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if _, dup := rows[m[1]]; dup {
			t.Errorf("%s documents %s twice", reference, m[1])
		}
		rows[m[1]] = cells
	}
	return rows
}

// TestReferenceCoversSchema fails when a config field has no row in docs/config.md, when a
// row names a field that does not exist, or when a row's type disagrees with the Go type.
func TestReferenceCoversSchema(t *testing.T) {
	rows := referenceRows(t)
	fields := schema(t)
	if len(fields) < 70 {
		t.Fatalf("walked only %d fields; the walk is broken", len(fields))
	}
	known := make(map[string]bool)
	for _, f := range fields {
		known[f.path] = true
		cells, ok := rows[f.path]
		if !ok {
			t.Errorf("%s (%s) has no row in %s", f.path, f.goType, reference)
			continue
		}
		if len(cells) != 4 || cells[0] == "" || cells[3] == "" {
			t.Errorf("%s: the row needs a type, default, zero/negative and meaning column: %q", f.path, cells)
			continue
		}
		if want := docType(f.typ); !strings.HasPrefix(cells[0], want) {
			t.Errorf("%s: type column %q, want it to start with %q for Go type %s", f.path, cells[0], want, f.typ)
		}
	}
	for path := range rows {
		if !known[path] {
			t.Errorf("%s documents %s, which is no config field", reference, path)
		}
	}
}

// docType is how docs/config.md starts the type of a Go field type.
func docType(typ reflect.Type) string {
	switch typ {
	case reflect.TypeFor[time.Duration]():
		return "duration"
	case reflect.TypeFor[netip.Prefix]():
		return "string"
	}
	if textTypes[typ] {
		return "string"
	}
	if typ.Kind() == reflect.Pointer && typ.Elem().Kind() != reflect.Struct {
		typ = typ.Elem() // an optional scalar, such as *bool: nil means its default
	}
	switch typ.Kind() {
	case reflect.String:
		return "string"
	case reflect.Int:
		return "integer"
	case reflect.Float64:
		return "number"
	case reflect.Bool:
		return "bool"
	case reflect.Slice:
		return "list of"
	case reflect.Map:
		return "map of"
	case reflect.Struct, reflect.Pointer:
		return "block"
	}
	return typ.String()
}

// TestReferenceProtocolTable compares the protocol table of docs/config.md with
// Protocol.Uses, for every listener field.
func TestReferenceProtocolTable(t *testing.T) {
	text, err := os.ReadFile(reference)
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(text), "| Field | http | https | http3 | tcp |")
	if !ok {
		t.Fatalf("%s has no protocol table", reference)
	}
	table, _, _ = strings.Cut(table, "\n\n")
	protocols := []config.Protocol{config.ProtocolHTTP, config.ProtocolHTTPS, config.ProtocolHTTP3, config.ProtocolTCP}
	inTable := make(map[string][]string)
	for _, line := range strings.Split(table, "\n") {
		if m := rowRE.FindStringSubmatch(line); m != nil {
			cells := strings.Split(strings.TrimSuffix(m[2], "|"), "|")
			for i := range cells {
				cells[i] = strings.TrimSpace(cells[i])
			}
			inTable[m[1]] = cells
		}
	}
	for _, f := range schema(t) {
		name, ok := strings.CutPrefix(f.path, "listeners[].")
		if !ok || strings.ContainsAny(name, ".[") {
			continue
		}
		cells, listed := inTable[name]
		for i, p := range protocols {
			uses := p.Uses(name)
			switch {
			case !listed && !uses:
				t.Errorf("listeners[].%s is not for %s but missing from the protocol table", name, p)
			case listed && (cells[i] == "yes") != uses:
				t.Errorf("protocol table says %q for %s on %s; Protocol.Uses says %v", cells[i], name, p, uses)
			}
		}
		delete(inTable, name)
	}
	for name := range inTable {
		t.Errorf("protocol table lists %s, which is no listener field", name)
	}
}

// TestReferenceExample checks that the full example in docs/config.md is testdata/full.yaml.
func TestReferenceExample(t *testing.T) {
	text, err := os.ReadFile(reference)
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(text), "## Full example")
	if !ok {
		t.Fatalf("%s has no full example", reference)
	}
	_, block, _ := strings.Cut(after, "```yaml\n")
	block, _, _ = strings.Cut(block, "```\n")
	full, err := os.ReadFile("testdata/full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal([]byte(block), full) {
		t.Errorf("the full example in %s differs from testdata/full.yaml", reference)
	}
	_, after, _ = strings.Cut(string(text), "## Minimal example")
	_, block, _ = strings.Cut(after, "```yaml\n")
	block, _, _ = strings.Cut(block, "```\n")
	minimal, err := os.ReadFile("testdata/minimal.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(minimal, []byte(block)) {
		t.Errorf("the minimal example in %s is not in testdata/minimal.yaml", reference)
	}
}

// TestFieldDocComments fails when a field of a config struct has no doc comment in the Go
// source.
func TestFieldDocComments(t *testing.T) {
	structs := make(map[string]bool)
	for _, f := range schema(t) {
		goStruct, _, _ := strings.Cut(f.goType, ".")
		structs[goStruct] = true
	}
	fset := token.NewFileSet()
	sources, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	seen := make(map[string]bool)
	for _, name := range sources {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok || !structs[ts.Name.Name] {
				return true
			}
			seen[ts.Name.Name] = true
			for _, field := range ts.Type.(*ast.StructType).Fields.List {
				for _, name := range field.Names {
					if name.IsExported() && (field.Doc == nil || strings.TrimSpace(field.Doc.Text()) == "") {
						t.Errorf("%s.%s has no doc comment", ts.Name.Name, name.Name)
					}
				}
			}
			return false
		})
	}
	for s := range structs {
		if !seen[s] {
			t.Errorf("struct %s not found in the source", s)
		}
	}
	if !structs["Listener"] || !structs["Queue"] {
		t.Errorf("the walk did not reach Listener and Queue")
	}
}

// builtByDaemon lists the fields whose values config, a leaf, takes as written: what they
// say is parsed where the daemon builds it (its prepare step, which check runs), and their
// bad cases are in internal/daemon's TestCheckErrors.
var builtByDaemon = map[string]bool{
	"listeners[].forward.intercept.intercept": true, // intercept.ParseRules
	"listeners[].forward.intercept.bypass":    true,
}

// acceptsAnything lists the fields with no invalid value, so no bad case can exist for them.
var acceptsAnything = map[string]bool{
	"log.access_log":            true, // any bool
	"cluster.redis.username":    true, // any string
	"cluster.redis.tls.enabled": true,
	"cluster.prefix":            true,
	"limit.shadow":              true,
	"limit.release_tunnels":     true,
	"rate.dry_run":              true,
}

var (
	indexRE    = regexp.MustCompile(`\[\d+\]`)
	mapKeyRE   = regexp.MustCompile(`\["[^"]*"\]`)
	errorPathR = regexp.MustCompile(`^[^:]+(?::\d+){0,2}: ([^ ]+): `)
	limitRootR = regexp.MustCompile(`^.*\.(?:client_limit|limit|shadow_limit|limits\[\])\.`)
	rateRootR  = regexp.MustCompile(`^.*\.rate\.`)
	connRootR  = regexp.MustCompile(`^.*\.(?:conn_rate|handshake_rate)\.`)
)

// TestEveryFieldHasABadCase fails when a field that can hold a wrong value has no case in
// badConfigs whose error names it: every such field is proven to be validated.
func TestEveryFieldHasABadCase(t *testing.T) {
	covered := make(map[string]bool)
	for _, c := range badConfigs {
		m := errorPathR.FindStringSubmatch(c.want)
		if m == nil {
			continue
		}
		p := mapKeyRE.ReplaceAllString(m[1], "")
		p = indexRE.ReplaceAllString(p, "[]")
		roots := []string{p, limitRootR.ReplaceAllString(p, "limit."), rateRootR.ReplaceAllString(p, "rate."),
			connRootR.ReplaceAllString(p, "conn_rate.")}
		for _, q := range roots {
			for ; q != ""; q = trimLast(q) {
				covered[q] = true
			}
		}
	}
	for _, f := range schema(t) {
		if !covered[f.path] && !acceptsAnything[f.path] && !builtByDaemon[f.path] {
			t.Errorf("%s (%s) has no bad case in badConfigs", f.path, f.goType)
		}
	}
}

// trimLast drops the last element of a documentation path: "a.b[]" -> "a.b", "a.b" -> "a".
func trimLast(p string) string {
	if s, ok := strings.CutSuffix(p, "[]"); ok {
		return s
	}
	i := strings.LastIndex(p, ".")
	if i < 0 {
		return ""
	}
	return p[:i]
}
